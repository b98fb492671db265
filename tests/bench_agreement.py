"""Run by tests/test_bench.py with the CPU vLLM environment's Python: `vllm bench serve` (its own
parser and main; the package's `vllm` console script is broken) and `invoke bench`'s scenario code on
the same server and workload, in alternating rounds, so that load from elsewhere on the machine falls
on both alike. Prints one JSON object: each round's output tokens/s and median TTFT from each side.

usage: python bench_agreement.py URL MODEL TOKENIZER STREAMS PROMPTS INPUT_LEN OUTPUT_LEN ROUNDS
"""

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vllm.benchmarks import serve as vllm_serve  # noqa: E402
from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: E402

from cookbook import bench  # noqa: E402


def vllm_bench(url, model, tokenizer, streams, prompts, input_len, output_len, seed) -> dict:
    parser = FlexibleArgumentParser()
    vllm_serve.add_cli_args(parser)
    args = parser.parse_args([
        "--backend", "vllm", "--base-url", url, "--model", model, "--tokenizer", tokenizer,
        "--dataset-name", "random", "--random-input-len", str(input_len), "--random-output-len", str(output_len),
        "--num-prompts", str(prompts), "--max-concurrency", str(streams), "--ignore-eos", "--temperature", "0",
        "--seed", str(seed), "--save-detailed", "--disable-tqdm", "--percentile-metrics", "ttft,e2el"])
    r = vllm_serve.main(args)
    return {"output_tokens_per_s": r["output_throughput"], "median_ttft_s": r["median_ttft_ms"] / 1000,
            "prompt_tokens": statistics.mean(r["input_lens"])}


def cookbook_bench(client, server, filler, seeds, streams, prompts, input_len, output_len) -> dict:
    # `prompts` requests in runs of `streams` at once, as vLLM's --num-prompts at --max-concurrency.
    w = bench.Workload("agreement", "agreement", "short", streams, input_len, output_len, {})
    v = bench.run_scenario(client, server, w, prompts // streams, filler, seeds)["values"]
    return {"output_tokens_per_s": v["aggregate_tokens_per_s"], "median_ttft_s": v["median_ttft_s"],
            "prompt_tokens": input_len}


def main(url, model, tokenizer, streams, prompts, input_len, output_len, rounds) -> dict:
    client = bench.Client(url)
    server = bench.server_info(client)
    filler = bench.filler_ids(client, server.model)
    seeds = iter(range(1, 10**6))
    out = {"vllm": [], "cookbook": []}
    for i in range(rounds):
        cpu = time.process_time()
        v = vllm_bench(url, model, tokenizer, streams, prompts, input_len, output_len, seed=i)  # warms up first, itself
        v["client_cpu_s"] = time.process_time() - cpu
        out["vllm"].append(v)
        # The same prompt length in tokens as vLLM's random prompts came to (decoded and re-encoded,
        # they drift by a token or two from --random-input-len).
        n = round(v["prompt_tokens"])
        cpu = time.process_time()
        c = cookbook_bench(client, server, filler, seeds, streams, prompts, n, output_len)
        c["client_cpu_s"] = time.process_time() - cpu
        out["cookbook"].append(c)
    return out


if __name__ == "__main__":
    u, m, t, *numbers = sys.argv[1:9]
    print(json.dumps(main(u, m, t, *map(int, numbers))))
