"""Benchmark (not a test): what seeded rows cost vLLM's `random_sample` per decode step on the CPU.

One decode step's sampling of `--rows` rows (32: the recipe's decode batch) at a model's vocabulary
size, with a seeded generator on the host for every row, then with no seeded row; and one row's
host draw alone (`exponential_` over the vocabulary on a CPU generator), which is what a host
generator adds per seeded row and step on a device whose stock draw runs on the device. One torch
thread, CPU time of this thread (the machine is shared), min and median over `--reps` repetitions.

Run with a release tree (pristine or patched) first on the path, like the lab's tests:

    cd cookbook/fixpack/lab && PYTHONPATH=<tree>:stubs VLLM_USE_FAKE_HPU=1 \\
        $(../../scripts/fix-lab.sh --print)/bin/python bench_seeded_draw.py [--rows 32] [--reps 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def timed(fn, reps: int, setup=lambda: None) -> tuple[float, float]:
    """(min, median) CPU milliseconds of this thread over reps calls of fn(setup()), setup untimed."""
    out = []
    for _ in range(reps):
        arg = setup()
        start = time.thread_time()
        fn(arg)
        out.append(time.thread_time() - start)
    return min(out) * 1e3, statistics.median(out) * 1e3


def measure(vocab: int, rows: int, reps: int) -> str:
    from vllm.v1.sample.ops.topk_topp_sampler import random_sample

    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(rows, vocab), dim=-1)
    generators = {i: torch.Generator().manual_seed(i) for i in range(rows)}
    random_sample(probs.clone(), generators)  # warm-up
    # random_sample divides the probabilities in place: each call gets a fresh copy.
    seeded = timed(lambda p: random_sample(p, generators), reps, probs.clone)
    unseeded = timed(lambda p: random_sample(p, {}), reps, probs.clone)
    row = torch.empty(vocab)
    draw = timed(lambda _: row.exponential_(generator=generators[0]), reps * 4)
    return (f"vocab {vocab}: {rows} seeded rows {seeded[0]:.1f} (median {seeded[1]:.1f}) ms/step; "
            f"{rows} unseeded rows {unseeded[0]:.1f} ({unseeded[1]:.1f}) ms/step; "
            f"one row's host draw {draw[0]:.2f} ({draw[1]:.2f}) ms")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--vocab", type=int, nargs="+", default=[151936, 248320])
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    for vocab in args.vocab:
        print(measure(vocab, args.rows, args.reps))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
