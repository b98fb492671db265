"""partial-prefill-draws, end to end: a seeded request's tokens do not depend on how its prompt is
chunked. With async scheduling (vLLM 0.26.0's default) or a structured-output request in the step, the
runner gives a chunk that does not finish its prompt one logits row, samples it and throws the token
away; the stock sampler draws that row from the request's seeded generator, so every chunk before
the last moves the request's random stream one draw ahead. vLLM's GPU runner rewinds the generator of
such a row.

The release's engine on the CPU (cookbook/fixpack/lab/_engine.py), prefix caching off: the same seeded requests on
an engine that prefills in chunks of two blocks with async scheduling, and on one that prefills each
prompt in one step without it. The serving test's model and dtype (cookbook/fixpack/lab/_serving.py: float32, so
two runs of a request differ by about 5e-6 and tokens compare exactly)."""

import _engine
import _serving
import pytest

B = _engine.BLOCK


def _seeded(engine, prompts, seed):
    from vllm import SamplingParams

    with engine._cpu():
        outs = engine.llm.generate([{"prompt_token_ids": p} for p in prompts],
                                   SamplingParams(temperature=1.0, seed=seed, max_tokens=8, ignore_eos=True),
                                   use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


@pytest.fixture(scope="module")
def model_dir():
    return _serving.model_dir()


@pytest.fixture(scope="module")
def prompts():
    # 1, 2 and 3 chunks of 512 tokens: no, one and two thrown-away draws on the chunking engine.
    return [_engine.prompt(40 + n, n * 2 * B - 100) for n in (1, 2, 3)]


@pytest.fixture(scope="module")
def in_one_step(model_dir, prompts):
    with _engine.engine(model_dir, **_serving.ALONE) as engine:
        return _seeded(engine, prompts, seed=5)


def test_a_seeded_prompt_prefilled_in_chunks_samples_what_it_samples_in_one_step(model_dir, prompts, in_one_step):
    with _engine.engine(model_dir, prefix_caching=False, async_scheduling=True, dtype=_serving.DTYPE) as engine:
        chunked = _seeded(engine, prompts, seed=5)
    assert chunked[0] == in_one_step[0], "a one-chunk prompt must not differ: the comparison itself is off"
    bad = [f"{n + 1} chunks: {c} against {o} in one step" for n, (c, o) in enumerate(zip(chunked, in_one_step,
                                                                                          strict=True)) if c != o]
    assert not bad, "; ".join(bad)


def test_without_async_scheduling_a_structured_output_step_keeps_no_partial_prefill_token(model_dir, prompts):
    """A JSON-schema request beside chunked greedy prompts, async scheduling off: the stock runner keeps
    each unfinished chunk's token as output and writes it into its copy of the request's tokens. Compared
    as the serving test compares (_serving.differences: tokens exactly)."""
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    greedy = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True, logprobs=2)
    schema = StructuredOutputsParams(json=_serving.JSON_SCHEMA)
    params = [SamplingParams(temperature=0.0, max_tokens=12, structured_outputs=schema)] + [greedy] * len(prompts)
    batch = [_engine.prompt(60, 30)] + prompts
    with _engine.engine(model_dir, prefix_caching=False, async_scheduling=False, dtype=_serving.DTYPE) as engine, \
            engine._cpu():
        together = engine.llm.generate([{"prompt_token_ids": p} for p in batch], params, use_tqdm=False)
        alone = [engine.llm.generate([{"prompt_token_ids": p}], greedy, use_tqdm=False)[0] for p in prompts]
    bad = [d for n, (t, a) in enumerate(zip(together[1:], alone, strict=True))
           for d in _serving.differences(f"{n + 1} chunks beside a JSON request", _serving.summary(t),
                                         _serving.summary(a))]
    assert not bad, "; ".join(bad)
