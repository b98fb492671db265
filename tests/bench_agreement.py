"""Run by tests/prove/test_bench.py with the CPU vLLM environment's Python: `invoke bench`'s measuring code and
`vllm bench serve` (its own parser and main; the package's `vllm` console script is broken) on the same
server and the same workload, in blocks of a few requests taken in turns (v c c v v c ...).

What the design rests on (measured on these 2-core machines, 2026-12-03):
- The server's speed drifts by up to 2x within seconds (blocks of 10 requests went 72 to 108 tokens/s
  back to back), and in level shifts inside a block. One long run per side measures two servers, and so
  did blocks of 10 (pooled TTFT ratios 0.95-1.07 over five runs). Blocks of 2 in ABBA order keep both
  sides on the same server state: eight runs of 40 blocks came out within 2.4% on both figures.
- Side by side (both clients at once) cancelled the drift but not the clients: two back-to-back streams
  kept a fixed phase against each other's decode steps, so each request waited for a part of the other's
  step set by its client's turnaround, and median TTFTs came out 3-13% apart while tokens/s agreed.
- The prompt's text moves the server's speed: with the cookbook's filler text the same lengths ran about
  7% faster (TTFT and tokens/s) than with vLLM's random-dataset prompts. So both sides send the same
  prompts, vLLM's random dataset for the block's seed: one workload, measured by two clients.
- vLLM's random dataset draws each prompt as a run of consecutive token ids from a random start; with the
  tiny model's 646-token vocabulary two prompts often share a start, and a shared start is a prefix-cache
  hit (a fifth of the TTFT). Each side of a block has a cache salt of its own (vLLM's through
  --extra-body): no block hits another's cache.
- Neither side warms up (vLLM's test prompt is off): the blocks follow each other within a second, so
  the engine never idles; and vLLM's test prompt is its first request, so with prefix caching that
  request came back a cache hit.
- Both clients are aiohttp, used alike: one session, kept-alive connections, the clock read as each piece
  of the body arrives. (The hand-written client before it, against a stand-in server that answered after a
  fixed 200 ms, had median TTFTs 1.7 ms from vLLM's: the clients themselves differed by under 1%.)

usage:
  python bench_agreement.py URL MODEL TOKENIZER STREAMS PROMPTS INPUT_LEN OUTPUT_LEN BLOCKS
      prints one JSON object: per side, per block, the output tokens, the benchmark's duration and each
      request's TTFT, as each client measured them
"""

import gc
import json
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cookbook.prove import bench  # noqa: E402
from cookbook.prove.openai_client import Server  # noqa: E402


def vllm_args(url, model, tokenizer, streams, prompts, input_len, output_len, seed, salt):
    """`vllm bench serve`'s arguments for one block, parsed by its own parser."""
    from vllm.benchmarks import serve as vllm_serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    vllm_serve.add_cli_args(parser)
    return parser.parse_args([
        "--backend", "vllm", "--base-url", url, "--model", model, "--tokenizer", tokenizer,
        "--dataset-name", "random", "--random-input-len", str(input_len), "--random-output-len", str(output_len),
        "--num-prompts", str(prompts), "--max-concurrency", str(streams), "--ignore-eos", "--temperature", "0",
        "--seed", str(seed), "--extra-body", json.dumps({"cache_salt": salt}), "--save-detailed",
        "--disable-tqdm", "--percentile-metrics", "ttft,e2el", "--ready-check-timeout-sec", "0"])


def vllm_block(args) -> dict:
    from vllm.benchmarks import serve as vllm_serve

    r = vllm_serve.main(args)
    return {"output_tokens": r["total_output_tokens"], "duration_s": r["duration"], "ttfts": r["ttfts"],
            "prompt_tokens": r["input_lens"]}


def random_prompts(args) -> list:
    """The requests `vllm bench serve` samples for these arguments (its random dataset, its seed)."""
    from vllm.benchmarks.datasets import get_samples
    from vllm.tokenizers import get_tokenizer

    return get_samples(args, get_tokenizer(args.tokenizer))


def cookbook_block(server, args, salt) -> dict:
    """`invoke bench`'s client and metrics (bench.concurrently, bench.short_metrics) on the block's
    prompts, `streams` in flight at a time as vLLM's --max-concurrency sends them."""
    bodies = [{**bench.completion_body(server.model, r.prompt, r.expected_output_len), "cache_salt": salt}
              for r in random_prompts(args)]
    timings, begin, end = bench.concurrently(server, "/v1/completions", bodies, streams=args.max_concurrency)
    errors = [t.error for t in timings if t.error]
    if errors:
        raise SystemExit(f"the cookbook side: {len(errors)} of {len(timings)} requests failed: {errors[0]}")
    m = bench.short_metrics(timings, begin, end)
    return {"output_tokens": m["output_tokens"], "duration_s": m["duration_s"], "ttfts": [t.ttft for t in timings],
            "prompt_tokens": [t.prompt_tokens for t in timings]}


def main(url, model, tokenizer, streams, prompts, input_len, output_len, blocks) -> dict:
    import vllm.benchmarks.serve  # noqa: F401  (imported before the first block: about 20 s of CPU)

    # vLLM's benchmark freezes the garbage collector's heap before it measures (a full collection over
    # torch's objects is a pause inside some request); freezing it here spares the cookbook's blocks too.
    gc.collect()
    gc.freeze()
    server = Server.connect(url)
    nonce = uuid.uuid4().hex[:8]
    out = {"vllm": [], "cookbook": []}
    for i in range(blocks):
        # The same prompts on both sides of a block (vLLM's sampler, one seed), each side with a cache salt
        # of its own: the second side does not hit the first one's prefix cache.
        seed = 1000 + i
        for side in ("vllm", "cookbook") if i % 2 == 0 else ("cookbook", "vllm"):
            salt = f"agreement-{nonce}-{side}-{i}"
            args = vllm_args(url, model, tokenizer, streams, prompts, input_len, output_len, seed, salt)
            out[side].append(vllm_block(args) if side == "vllm" else cookbook_block(server, args, salt))
    return out


if __name__ == "__main__":
    u, m, t, *numbers = sys.argv[1:9]
    print(json.dumps(main(u, m, t, *map(int, numbers))))
