"""async-penalty-tokens: under async scheduling the penalties and bad words see the generated tokens.

Under async scheduling (vLLM 0.26.0's default) the sampled tokens stay on the device and stock
vllm-gaudi never appends them to the output lists the sampling metadata hands to the sampler, so
repetition, frequency and presence penalties see the prompt only and a multi-token bad word never
matches. These tests run five steps of the release's `sample_tokens` (see _runner.py: a prefill, then
decodes, a second prompt joining the decodes at the third step) once with async scheduling off and
once on, and compare the tokens; the engine companion (test_fix_async_penalty_tokens_engine.py) does
the same with the release's whole engine.
"""

import pytest
import torch

TOP, SECOND = 7, 3  # every row's favourite and second token (neither is in the prompts)
STEPS = 5


def _tokens(monkeypatch, async_scheduling: bool, params: dict, joining: dict | None = None) -> dict[str, list[int]]:
    """Each request's tokens; "a" has `params`, "x" none, "y" (joining at the third step) `joining`."""
    from _runner import VOCAB, Model, Runner

    row = torch.zeros(VOCAB)
    row[TOP], row[SECOND] = 5.0, 4.0
    runner = Runner(monkeypatch, Model(fixed_logits=row), async_scheduling=async_scheduling)
    runner.add("a", [20, 21, 22], **params)
    runner.add("x", [23, 24, 25])
    tokens = {"a": [], "x": [], "y": []}
    for step in range(STEPS):
        scheduled = {"a": 1, "x": 1} if step else {"a": 3, "x": 3}
        if step == 2:  # a new prompt joins the decodes: its row is sampled after theirs
            runner.add("y", [26, 27], **(params if joining is None else joining))
            scheduled["y"] = 2
        elif step > 2:
            scheduled["y"] = 1
        out = runner.run(scheduled)
        for rid in scheduled:
            tokens[rid] += out.sampled_token_ids[out.req_id_to_index[rid]]
    return tokens


CASES = {  # the penalty, and what "a" generates with it when the sampler sees the generated tokens
    # TOP is divided by 2 once generated: 2.5 against SECOND's 4, then 2.5 against 2.
    "repetition_penalty": ({"repetition_penalty": 2.0}, [TOP, SECOND, TOP, TOP, TOP]),
    # TOP loses 0.6 each time it is generated, SECOND too.
    "frequency_penalty": ({"frequency_penalty": 0.6}, [TOP, TOP, SECOND, TOP, SECOND]),
    # TOP and SECOND lose 1.5 once generated.
    "presence_penalty": ({"presence_penalty": 1.5}, [TOP, SECOND, TOP, TOP, TOP]),
}


@pytest.mark.parametrize("penalty", list(CASES))
def test_a_penalty_counts_the_tokens_generated_under_async_scheduling(monkeypatch, penalty):
    params, expected = CASES[penalty]
    sync = _tokens(monkeypatch, False, params)
    assert sync["a"] == expected and sync["x"] == [TOP] * STEPS, sync
    assert _tokens(monkeypatch, True, params) == sync


def test_a_two_token_bad_word_matches_the_tokens_generated_under_async_scheduling(monkeypatch):
    """bad_words [TOP, TOP] (token ids as update_from_tokenizer makes them): after a TOP, TOP is banned."""
    bans = {"_bad_words_token_ids": [[TOP, TOP]]}
    got = {mode: _tokens(monkeypatch, mode, bans, joining={}) for mode in (False, True)}
    assert got[False]["a"] == [TOP, SECOND, TOP, SECOND, TOP]
    assert got[True] == got[False]
