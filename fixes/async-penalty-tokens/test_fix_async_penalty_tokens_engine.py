"""async-penalty-tokens end to end: the release's real engine on the CPU (cookbook/fixpack/lab/_engine.py), the tiny
Qwen3.5 hybrid, greedy requests with a repetition, frequency or presence penalty. With async scheduling
on (vLLM 0.26.0's default) each must generate what it generates with async scheduling off. On the stock
tree the penalties never see the generated tokens under async scheduling: the repetition penalty lets a
generated token come back, and frequency and presence penalties change nothing at all.

One engine per mode, four requests each (two in flight: a request's prefill joins another's decodes),
so every penalty request is sampled beside other requests and in mixed steps."""

import _engine
import pytest

PROMPT = _engine.prompt(0, 12)
# (name, penalty, max_tokens); with these the random model's greedy output repeats tokens (its 2nd and
# 17th), which each penalty avoids with async scheduling off.
REQUESTS = [("none", {}, 20), ("repetition_penalty", {"repetition_penalty": 1.8}, 24),
            ("frequency_penalty", {"frequency_penalty": 1.5}, 24), ("presence_penalty", {"presence_penalty": 1.5}, 24)]


def _generate(model_dir, async_scheduling: bool) -> dict[str, list[int]]:
    from vllm import SamplingParams

    with _engine.engine(model_dir, async_scheduling=async_scheduling, prefix_caching=False) as engine:
        params = [SamplingParams(max_tokens=n, temperature=0, ignore_eos=True, **p) for _, p, n in REQUESTS]
        with engine._cpu():
            outs = engine.llm.generate([{"prompt_token_ids": PROMPT}] * len(REQUESTS), params, use_tqdm=False)
    return {name: list(out.outputs[0].token_ids) for (name, _, _), out in zip(REQUESTS, outs, strict=True)}


@pytest.fixture(scope="module")
def outputs(qwen35_dir):
    """Each request's tokens with async scheduling off (False) and on (True); one engine after the other."""
    return {async_scheduling: _generate(qwen35_dir, async_scheduling) for async_scheduling in (False, True)}


@pytest.mark.parametrize("penalty", [name for name, _, _ in REQUESTS[1:]])
def test_a_penalty_gives_the_same_tokens_with_async_scheduling_on_and_off(outputs, penalty):
    off, on, plain = outputs[False][penalty], outputs[True][penalty], outputs[False]["none"]
    n = len(plain)
    assert outputs[True]["none"] == plain  # async scheduling alone changes nothing
    assert off[:n] != plain, f"{penalty} did not change the output with async scheduling off: {off}"
    diverged = next((i for i, (a, b) in enumerate(zip(on, off, strict=True)) if a != b), None)
    assert diverged is None, (f"{penalty}, async scheduling on: {on}; off: {off}; first differs at token "
                              f"{diverged} (without the penalty: {plain})")
