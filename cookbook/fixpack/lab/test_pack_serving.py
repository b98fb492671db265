"""The whole pack under the recipe's serving conditions (cookbook/fixpack/lab/_serving.py): the release's real engine
on the CPU, 47 requests mixing prefix-cache hits (some reaching into generated text, some restoring a
checkpoint written inside a prefill chunk), preemption and resume, greedy and seeded sampling, the three
penalties, min_tokens, logit_bias, bad_words, stop strings, logprobs, prompt logprobs and a JSON schema,
with async scheduling on (vLLM 0.26.0's default) and off.

Each request served among the others must give exactly what it gives alone on a fresh engine with none
of those conditions: the same tokens, finish reason and text, and logprobs within `_serving.TOL`; the
plain greedy ones also transformers' float32 tokens and logprobs. No near-tie is excused: the engine runs
the model in float32 (`_serving.DTYPE`, where the release runs bf16), where two runs differ by about
5e-6 and every plain greedy choice has a margin of at least `_serving.MARGIN_FLOOR` (checked here). On the pristine
release the engine core dies (a prefill batch of several new prompts with prefix caching on); each fix's
own module says which of its defects this run reaches.

float32 has one blind spot: stale bytes in a page read as finite values the attention mask hides. So
the same workload also runs once in the release's bf16 (async), where such bytes read as NaN: there no
logprob may be NaN or infinite (tokens are not compared in bf16)."""

import _engine
import _serving
import pytest


@pytest.fixture(scope="module")
def model_dir():
    return _serving.model_dir()


@pytest.fixture(scope="module")
def reference(model_dir):
    return _engine.Reference(model_dir)


@pytest.fixture(scope="module")
def yardstick(model_dir):
    """Each request served alone, on one engine made on first use (after a run among many succeeded)."""
    state = {"engine": None, "outputs": {}}

    def outputs(requests):
        todo = [r for r in requests if r.name not in state["outputs"]]
        if todo:
            state["engine"] = state["engine"] or _engine.Engine(model_dir, **_serving.ALONE)
            state["outputs"] |= _serving.alone(state["engine"], todo)
        return state["outputs"]

    yield outputs
    if state["engine"] is not None:
        state["engine"].close()


@pytest.fixture(scope="module", params=[True, False], ids=["async", "sync"])
def served(request, model_dir):
    with _engine.engine(model_dir, async_scheduling=request.param, **_serving.CONDITIONS) as engine:
        assert engine.vllm_config.cache_config.block_size == _serving.B  # the geometry the waves are cut to
        return _serving.together(engine)


@pytest.fixture(scope="module", params=[True], ids=["bf16-async"])
def served_bf16(request):
    """The same run in the release's bf16, with the shared lab model (the same 256-token block)."""
    kwargs = _serving.CONDITIONS | dict(dtype=_engine.DTYPE, async_scheduling=request.param)
    with _engine.engine(_engine.tiny_qwen35(), **kwargs) as engine:
        assert engine.vllm_config.cache_config.block_size == _serving.B
        return _serving.together(engine)


def _all(served):
    return _serving.wave_one() + _serving.wave_inner() + _serving.wave_between() + served.second_wave


def test_the_run_meets_the_serving_conditions(served):
    first, second = _serving.wave_one() + _serving.wave_inner() + _serving.wave_between(), served.second_wave
    assert len(_serving.wave_one()) >= 32 and len(second) == 8
    assert served.preemptions > 0, "the pool never ran short: no request was preempted and resumed"
    hits = [r.name for r in first + second if served.outputs[r.name]["cached"]]
    assert len(hits) >= 6, f"too few prefix-cache hits: {hits}"
    into_generated = [r.name for r in second if served.outputs[r.name]["cached"] > len(_prefix_of(r, first))]
    assert into_generated, "no hit reached into an earlier request's generated text"
    inner = _serving.inner_hits(first + second, served)
    assert inner, ("no hit restored a checkpoint written inside a prefill chunk; hits: "
                   f"{[(r.name, served.outputs[r.name]['cached']) for r in first + second if r.name in hits]}")


def _prefix_of(request, first):
    return next(r.prompt for r in first if request.name.endswith("-on-" + r.name))


def test_every_request_gives_what_it_gives_alone(served, yardstick):
    requests = _all(served)
    alone = yardstick(requests)
    bad = [d for r in requests for d in _serving.differences(r.name, served.outputs[r.name], alone[r.name])]
    assert not bad, f"{len(bad)} departures from the requests served alone:\n" + "\n".join(bad)


def test_greedy_requests_give_transformers_tokens_by_a_clear_margin(served, reference):
    bad = []
    for r in _all(served):
        if r.feature not in _serving.PLAIN_GREEDY:
            continue
        out = served.outputs[r.name]
        logprobs = [lp[t] for t, lp in zip(out["tokens"], out["logprobs"], strict=True)] if out["logprobs"] else None
        for i, step in enumerate(reference.steps(r.prompt, out["tokens"])):
            mine = logprobs[i] if logprobs else step["logprob"]  # prompt-logprobs: no sample logprobs asked
            if step["token"] != step["top1"] or abs(mine - step["logprob"]) > _serving.TOL:
                bad.append(f"{r.name}: step {i}: token {step['token']} ({mine:.6f}), reference "
                           f"{step['top1']} ({step['logprob']:.6f})")
            elif step["margin"] < _serving.MARGIN_FLOOR:
                bad.append(f"{r.name}: step {i}: a margin of {step['margin']:.2e}: a near-tie another CPU may "
                           "break the other way")
    assert not bad, "\n".join(bad)


def test_in_the_release_dtype_every_logprob_is_finite(served_bf16):
    """float32 cannot show stale bytes: a block's former GDN checkpoint (float32 state) left in rows of
    an attention page its new owner has not written reads as finite K/V, which the attention bias
    masks. In bf16 some of those bytes are NaN, and NaN survives the bias. Tokens are not compared here
    (bf16 near-ties differ by CPU); a NaN or infinite logprob is a defect on any CPU."""
    assert served_bf16.preemptions > 0 and _serving.inner_hits(_all(served_bf16), served_bf16)
    bad = _serving.non_finite(served_bf16.outputs)
    assert not bad, f"{len(bad)} requests with logprobs that are not finite:\n" + "\n".join(bad)
