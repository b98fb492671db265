"""Benchmark (not a test): time to first token of a prefix-cache hit against the same prompt cold,
through the release's real engine on the CPU (cookbook/fixpack/lab/_engine.py), the tiny Qwen3.5 hybrid.

Each round: the prompt (a shared prefix of `--prefix-blocks` blocks and a tail) runs cold under a
salt of its own (no hit possible); another request on the same prefix caches it under the round's
shared salt; the same prompt then runs under that salt and hits the prefix. The time is the wall time
of a request for one token (its prefill and one sample: the time to first token offline). The hit
must give the cold run's token and logprob (within the lab's tolerance), and hit exactly the prefix.

Run with a release tree (pristine or patched) first on the path, like the lab's tests:

    cd cookbook/fixpack/lab && PYTHONPATH=<tree>:stubs COOKBOOK_LAB_TREE=<tree> VLLM_USE_FAKE_HPU=1 \\
        PT_HPU_LAZY_MODE=0 HF_HUB_OFFLINE=1 $(../../scripts/fix-lab.sh --print)/bin/python \\
        bench_gdn_ttft.py [--prefix-blocks 8] [--tail 64] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import _engine
import lab_stubs  # noqa: F401  (torch.hpu, as the lab's pytest plugin puts it)


def timed(engine, ids, salt):
    """(wall seconds, CPU seconds of this process, output). On a shared machine the CPU time is the
    steadier figure: the engine core runs in this process."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = engine.generate(ids, salt=salt, max_tokens=1)
    return time.perf_counter() - wall, time.process_time() - cpu, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prefix-blocks", type=int, default=8)
    ap.add_argument("--tail", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    block = _engine.BLOCK
    tokens = (args.prefix_blocks + 1) * block + args.tail + 8
    # Room for every round's blocks in every group, so no round evicts another's.
    num_blocks = 4 * (args.rounds + 1) * (tokens // block + 2) * 2
    with _engine.engine(_engine.tiny_qwen35(), num_blocks=num_blocks, max_model_len=tokens) as engine:
        warm = _engine.prompt(999, args.prefix_blocks * block + args.tail)
        engine.generate(warm, salt="warm-up", max_tokens=1)  # first-call costs out of the figures
        cold_t, hit_t, cold_c, hit_c, problems = [], [], [], [], []
        for r in range(args.rounds):
            prefix = _engine.prompt(1000 + r, args.prefix_blocks * block)
            ids = prefix + _engine.prompt(2000 + r, args.tail)
            t_cold, c_cold, cold = timed(engine, ids, f"cold-{r}")
            engine.generate(prefix + _engine.prompt(3000 + r, args.tail), salt=f"shared-{r}", max_tokens=1)
            t_hit, c_hit, hit = timed(engine, ids, f"shared-{r}")
            (c,), (h,) = _engine.generated(cold), _engine.generated(hit)
            if hit.num_cached_tokens != args.prefix_blocks * block:
                problems.append(f"round {r}: hit {hit.num_cached_tokens} cached tokens")
            if h["token"] != c["token"] or abs(h["logprob"] - c["logprob"]) > _engine.TOL:
                problems.append(f"round {r}: hit token {h['token']} ({h['logprob']:.4f}), "
                                f"cold {c['token']} ({c['logprob']:.4f})")
            cold_t.append(t_cold)
            hit_t.append(t_hit)
            cold_c.append(c_cold)
            hit_c.append(c_hit)
            print(f"round {r}: wall cold {t_cold * 1000:7.1f} ms hit {t_hit * 1000:7.1f} ms; "
                  f"cpu cold {c_cold * 1000:7.1f} ms hit {c_hit * 1000:7.1f} ms", flush=True)
    cold_m, hit_m = statistics.median(cold_t), statistics.median(hit_t)
    cold_cm, hit_cm = statistics.median(cold_c), statistics.median(hit_c)
    print(f"prompt {len(ids)} tokens, shared prefix {args.prefix_blocks} blocks of {block} "
          f"({args.prefix_blocks * block} tokens), {args.rounds} rounds")
    print(f"median TTFT: cold {cold_m * 1000:.1f} ms, hit {hit_m * 1000:.1f} ms, "
          f"hit/cold {hit_m / cold_m:.3f} (goal <= 0.333)")
    print(f"median CPU time: cold {cold_cm * 1000:.1f} ms, hit {hit_cm * 1000:.1f} ms, "
          f"hit/cold {hit_cm / cold_cm:.3f}")
    for p in problems:
        print("WRONG:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
