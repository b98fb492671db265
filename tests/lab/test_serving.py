"""The serving test's yardstick (tests/lab/_serving.py): when a request served among others and alone
part, what transformers' float32 reference excuses and what it does not. No engine: the outputs are
written here, the reference is a table of logprobs."""

import _serving
import pytest
import torch

VOCAB = 8


def _request(feature, prompt=(1, 2)):
    return _serving.Request(f"r-{feature}", list(prompt), feature, 0)


@pytest.mark.parametrize("feature, history, a, b, alike", [
    ("greedy", [3], 4, 5, True),
    ("frequency", [3], 4, 5, True),  # neither counted yet
    ("frequency", [3], 3, 5, False),  # 3 carries the penalty
    ("presence", [3, 4], 3, 4, True),
    ("repetition", [3], 1, 3, True),  # both seen (1 in the prompt)
    ("repetition", [3], 1, 5, False),
    ("logit-bias", [], 7, 6, True),  # neither biased (index 0 biases 40 and 120)
    ("logit-bias", [], 40, 6, False),
    ("min-tokens", [3], 1, 2, False),  # index 0's stops are 1, 8, 15, ...: 1 is masked, 2 is not
    ("min-tokens", [3] * 6, 1, 2, True),  # min_tokens met: nothing masked
    ("bad-words", [3], 4, 5, False),
    ("seeded", [3], 4, 5, False),
])
def test_treated_alike(feature, history, a, b, alike):
    assert _serving.treated_alike(_request(feature), history, a, b) is alike


def _out(tokens, logprobs=None):
    return {"tokens": tokens, "text": "", "finish": "length", "logprobs": logprobs, "prompt_logprobs": None}


def _reference(rows):
    """raw(tokens): the given logprob rows, one per step."""
    table = torch.full((len(rows), VOCAB), -9.0)
    for step, row in enumerate(rows):
        for token, logprob in row.items():
            table[step, token] = logprob
    return lambda tokens: table[:len(tokens)]


def test_a_flip_the_reference_holds_as_a_near_tie_is_excused_only_when_treated_alike():
    request = _request("frequency")
    got, want = _out([3, 4, 2]), _out([3, 5, 6])
    raw = _reference([{3: -1.0}, {4: -2.0, 5: -2.05}])
    alike = lambda history, a, b: _serving.treated_alike(request, history, a, b)  # noqa: E731
    flips = []
    assert _serving.differences("r", got, want, seeded=True, flips=flips, raw=raw, alike=alike) == []
    assert flips == ["r: step 1 (near-tie)"]
    far = _reference([{3: -1.0}, {4: -2.0, 5: -2.5}])
    assert _serving.differences("r", got, want, seeded=True, raw=far, alike=alike)
    counted = _out([4, 4, 2]), _out([4, 5, 6])  # 4 already penalised: its raw margin says nothing
    assert _serving.differences("r", *counted, seeded=True, raw=raw, alike=alike)
    assert _serving.differences("r", got, want, seeded=True)  # no reference: the first tokens must match


def test_logprobs_apart_are_excused_only_when_each_is_within_the_tolerance_of_the_reference():
    got, want = _out([3, 4], [{3: -1.0}, {4: -2.02}]), _out([3, 4], [{3: -1.0}, {4: -2.13}])
    near = _reference([{3: -1.0}, {4: -2.07}])
    assert _serving.differences("r", got, want, raw=near, alike=lambda *a: True) == []
    off = _reference([{3: -1.0}, {4: -1.95}])  # 0.18 from the alone run's
    assert _serving.differences("r", got, want, raw=off, alike=lambda *a: True) == \
        ["r: logprobs at step 1: {4: -2.02} against {4: -2.13} alone"]
    assert _serving.differences("r", got, want)
