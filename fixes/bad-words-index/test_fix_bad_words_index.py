"""bad-words-index: `bad_words` on a sampled subset of the batch bans the right token in the right
row instead of raising `IndexError`.

The input batch keys its bad-words map by persistent batch row, and the stock
`make_selective_sampling_metadata` hands that map as it is to vLLM's sampler, whose
`apply_bad_words` indexes the rows of the logits it samples: the decodes alone, or one prefill
batch. A request with bad words behind a decode is then looked up past the end of the decode
logits (`IndexError` in the engine core), or its ban lands on another request's row.
"""

import pytest
import torch
from _step import VOCAB, Step, point_h2d_at_cpu, request
from vllm.sampling_params import SamplingParams

BANNED = 5


class _Words:
    """The two calls `SamplingParams.update_from_tokenizer` makes of a tokenizer: each word is one
    token id, with or without a leading space."""
    max_token_id = VOCAB - 1

    def encode(self, text, add_special_tokens=False):
        return [{"five": BANNED}[text.strip()]]


def _bans_five():
    params = SamplingParams(temperature=0.0, bad_words=["five"])
    params.update_from_tokenizer(_Words())
    assert params.bad_words_token_ids == [[BANNED]]
    return params


def _prefers_five():
    """Greedy picks 5; with 5 banned it picks 6."""
    row = torch.zeros(VOCAB)
    row[BANNED], row[BANNED + 1] = 8.0, 4.0
    return row


@pytest.fixture
def step(monkeypatch):
    point_h2d_at_cpu(monkeypatch)
    s = Step()
    s.add(request("D", SamplingParams(temperature=0.0), prompt_len=4, computed=4, output=[9]), _prefers_five())
    s.add(request("P", _bans_five(), prompt_len=6, computed=0), _prefers_five())
    s.refresh()
    return s


def test_a_request_with_bad_words_after_a_decode_samples_without_index_error(step):
    tokens = step.run({"D": 1, "P": 6}, batch_changed=True)
    assert set(tokens) == {"D", "P"}


def test_the_ban_applies_to_its_own_row_only(step):
    tokens = step.run({"D": 1, "P": 6}, batch_changed=True)
    assert tokens["P"] == [BANNED + 1]  # its own ban took effect
    assert tokens["D"] == [BANNED]  # the decode beside it has no ban


def test_a_ban_in_a_merged_prefill_batch_lands_on_its_own_row(monkeypatch):
    point_h2d_at_cpu(monkeypatch)
    s = Step(decode_bucket=2, prefill_batch=2)
    s.add(request("D", SamplingParams(temperature=0.0), prompt_len=4, computed=4, output=[9]), _prefers_five())
    s.add(request("P1", _bans_five(), prompt_len=6, computed=0), _prefers_five())
    s.add(request("P2", SamplingParams(temperature=0.0), prompt_len=6, computed=0), _prefers_five())
    s.refresh()
    # P1 is batch row 1 and row 0 of the prefill batch [P1, P2]; stock bans row 1 there: P2's.
    tokens = s.run({"D": 1, "P1": 6, "P2": 6}, batch_changed=True)
    assert tokens == {"D": [BANNED], "P1": [BANNED + 1], "P2": [BANNED]}
