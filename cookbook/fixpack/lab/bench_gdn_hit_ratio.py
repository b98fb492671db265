"""Benchmark (not a test): how much of a shared prefix a prefix-cache hit reaches on the GDN hybrid,
for shared prefixes of 1 to 20 blocks, through the release's real engine on the CPU (cookbook/fixpack/lab/_engine.py),
the tiny Qwen3.5 hybrid (256-token blocks, 512-token prefill chunks: the recipe's 896 and 1,792 in
miniature).

For each size n: a writer prompt (the n shared blocks, then a tail of its own longer than a chunk) runs
first under the size's salt; a reader prompt (the same n blocks, another tail) follows under that salt.
The figure is the reader's cached tokens over the n blocks' tokens. A hit can only reach a block boundary
where the writer's state was checkpointed: before gdn-prefix-cache's 0010-0012 the end of a step (a
prefill chunk's end, the prompt's last full block), so with 2-block chunks an odd n lost its last block;
with them every boundary, so every ratio should be 1. The reader's first token must be the cold run's.

Run with a release tree (pristine or patched) first on the path, like the lab's tests:

    cd cookbook/fixpack/lab && PYTHONPATH=<tree>:stubs COOKBOOK_LAB_TREE=<tree> VLLM_USE_FAKE_HPU=1 \\
        PT_HPU_LAZY_MODE=0 HF_HUB_OFFLINE=1 $(../../scripts/fix-lab.sh --print)/bin/python \\
        bench_gdn_hit_ratio.py [--max-blocks 20] [--tail 600]
"""

from __future__ import annotations

import argparse
import sys

import _engine
import lab_stubs  # noqa: F401  (torch.hpu, as the lab's pytest plugin puts it)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-blocks", type=int, default=20)
    ap.add_argument("--tail", type=int, default=600, help="tokens after the shared prefix (more than a chunk)")
    args = ap.parse_args(argv)
    block = _engine.BLOCK
    tokens = args.max_blocks * block + args.tail + 8
    # Room for every size's writer and reader in every group, so no size evicts another's blocks.
    num_blocks = 4 * 2 * (args.max_blocks + 1) * (tokens // block + 2)
    problems, shared_sum, hit_sum = [], 0, 0
    print(f"{'blocks':>6} {'shared':>7} {'hit':>7} {'ratio':>6}")
    with _engine.engine(_engine.tiny_qwen35(), num_blocks=num_blocks, max_model_len=tokens) as engine:
        for n in range(1, args.max_blocks + 1):
            prefix = _engine.prompt(5000 + n, n * block)
            reader = prefix + _engine.prompt(7000 + n, args.tail)
            engine.generate(prefix + _engine.prompt(6000 + n, args.tail), salt=f"size-{n}", max_tokens=1)
            hit = engine.generate(reader, salt=f"size-{n}", max_tokens=1)
            cold = engine.generate(reader, salt=f"cold-{n}", max_tokens=1)
            (h,), (c,) = _engine.generated(hit), _engine.generated(cold)
            if h["token"] != c["token"] or abs(h["logprob"] - c["logprob"]) > _engine.TOL:
                problems.append(f"{n} blocks: hit token {h['token']} ({h['logprob']:.4f}), "
                                f"cold {c['token']} ({c['logprob']:.4f})")
            if cold.num_cached_tokens:
                problems.append(f"{n} blocks: the cold run hit {cold.num_cached_tokens} tokens")
            shared = n * block
            shared_sum, hit_sum = shared_sum + shared, hit_sum + hit.num_cached_tokens
            print(f"{n:6d} {shared:7d} {hit.num_cached_tokens:7d} {hit.num_cached_tokens / shared:6.3f}", flush=True)
    print(f"all sizes: {hit_sum} of {shared_sum} shared tokens hit ({hit_sum / shared_sum:.3f})")
    for p in problems:
        print("WRONG:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
