"""The release's real engine on the CPU (cookbook/fixpack/lab/_engine.py) with the tiny Qwen3.5 hybrid: what holds
on the pristine and on the patched tree alike. vLLM derives the hybrid block this model's geometry
calls for (a multiple of the 128-token kernel block, as the 27B's 896), and a cold run, prefilled in
chunks that end on block boundaries, gives transformers' greedy tokens and logprobs.

The engine is bf16 (the HPU platform runs float32 models in bf16) and the reference float32, so
tokens and logprobs are compared with a tolerance: `TOL` on each logprob, and a token may differ only
where the reference's top two are within `TOL` (measured: at most 0.08 apart, both trees)."""

import _engine
import pytest

TOL = _engine.TOL


def test_the_engine_derives_a_hybrid_block_of_whole_kernel_blocks(qwen35_engine):
    cache = qwen35_engine.vllm_config.cache_config
    assert cache.block_size == _engine.BLOCK and _engine.BLOCK % 128 == 0 and _engine.BLOCK > 128
    assert cache.mamba_block_size == _engine.BLOCK  # `align` mode: chunks end on block boundaries
    assert qwen35_engine.vllm_config.scheduler_config.max_num_batched_tokens == 2 * _engine.BLOCK


@pytest.mark.parametrize("length", [3 * _engine.BLOCK + 17, 5 * _engine.BLOCK - 1])
def test_a_cold_chunked_run_matches_transformers(qwen35_engine, qwen35_reference, length):
    ids = _engine.prompt(length, length)
    out = qwen35_engine.generate(ids, salt=f"cold-{length}")
    assert out.num_cached_tokens == 0
    steps = _engine.generated(out)
    ref = qwen35_reference.steps(ids, [s["token"] for s in steps])
    assert not _engine.disagreements(steps, ref, TOL)
