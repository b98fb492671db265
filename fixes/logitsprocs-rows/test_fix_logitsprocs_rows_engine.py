"""logitsprocs-rows end to end: `min_tokens` with stop tokens through the release's real engine on the
CPU (cookbook/fixpack/lab/_engine.py: the tiny Qwen3.5 hybrid, prefix caching on), async scheduling off and on
(vLLM 0.26.0's default).

A greedy request from a fixed prompt; its stop tokens are taken from its own unconstrained output. A
stop token it would emit first is banned until `min_tokens` tokens are out, and one it emits at its
6th token ends it there exactly when `min_tokens` is at most 5. Stock never bans them: the scheduler
does not end a request before `min_tokens`, but the stop token is sampled and stays in the output.
Under async scheduling the sampled tokens stay on the device and the min-tokens processor counts a
placeholder output the batch keeps; the runner makes its batch again for every hybrid model when the
KV cache is set up, and a batch that had lost the count banned the stop tokens for the whole request
(it ran to max_tokens).
"""

import _engine
import pytest

MAX_TOKENS = 16
PROMPT = _engine.prompt(1, 20)  # its greedy output's 6th token is not among the first five


@pytest.fixture(scope="module", params=[False, True], ids=["sync", "async"])
def engine(request, qwen35_dir):
    with _engine.engine(qwen35_dir, async_scheduling=request.param) as e:
        yield e


def run(engine, **params) -> tuple[list[int], str]:
    """One greedy request on PROMPT (EOS ignored: only the stop tokens end it early)."""
    from vllm import SamplingParams

    sampling = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True, **params)
    with engine._cpu():
        out = engine.llm.generate([{"prompt_token_ids": PROMPT}], sampling, use_tqdm=False)[0].outputs[0]
    return list(out.token_ids), out.finish_reason


@pytest.fixture(scope="module")
def free(engine) -> list[int]:
    tokens, reason = run(engine)
    assert reason == "length" and len(tokens) == MAX_TOKENS and tokens[5] not in tokens[:5], tokens
    return tokens


def test_a_stop_token_is_not_sampled_before_min_tokens(engine, free):
    tokens, reason = run(engine, min_tokens=4, stop_token_ids=[free[0]])
    assert len(tokens) >= 4 and free[0] not in tokens[:4], (tokens, reason)


def test_the_stop_token_at_the_6th_token_ends_the_request_once_min_tokens_is_reached(engine, free):
    """min_tokens 2 and 5: out after 6 tokens, as the unconstrained run has them (async scheduling
    on stops where it stops off); min_tokens 6: the 6th token may not be the stop token."""
    stop = free[5]
    outcomes = {m: run(engine, min_tokens=m, stop_token_ids=[stop]) for m in (2, 5, 6)}
    assert outcomes[2] == outcomes[5] == (free[:6], "stop"), outcomes
    tokens, _ = outcomes[6]
    assert tokens[:5] == free[:5] and len(tokens) > 6 and tokens[5] != stop, outcomes[6]
