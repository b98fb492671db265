"""structured-output-rows: in a structured-output step with decodes and prompts, each logits row is
sampled with its own request's parameters, and its own grammar still applies.

With a grammar in the step the runner joins all logits, decodes first then prompts, applies the
grammar bitmask by batch row (which, after the reorder, is the logits row: that part is right) and
samples them in one call. The stock request-id list for that call is `prompt_req_ids +
decode_req_ids`: prompts first, one entry per request. Each row then takes another request's
temperature, top-p/top-k, penalties and seeded generator: a greedy decode is sampled at random and
a sampled prompt greedily. A prompt with several logits rows shifts every row after it.
"""

import pytest
import torch
from _step import VOCAB, Step, bitmask, drop_pinning, point_h2d_at_cpu, request
from vllm.sampling_params import SamplingParams

EVERY_TOKEN = range(VOCAB)


def _nearly_flat(token):
    """Greedy picks `token`; sampling at temperature 1 almost never does (1 in ~64)."""
    row = torch.zeros(VOCAB)
    row[token] = 0.01
    return row


def _row_temperatures(step):
    (req_ids, metadata), = [s for s in step.sampled if len(s[0]) > 1]
    return [round(float(t), 3) for t in metadata.temperature]


@pytest.fixture
def step(monkeypatch):
    point_h2d_at_cpu(monkeypatch)
    torch.manual_seed(0)
    s = Step()
    s.add(request("D", SamplingParams(temperature=0.0), prompt_len=4, computed=4, output=[9]), _nearly_flat(3))
    s.add(request("P", SamplingParams(temperature=1.0), prompt_len=6, computed=0), _nearly_flat(3))
    s.refresh()
    return s


def test_the_joint_sampling_gives_each_row_its_own_temperature(step):
    step.run({"D": 1, "P": 6}, batch_changed=True, grammar=bitmask({"D": EVERY_TOKEN, "P": EVERY_TOKEN}))
    assert _row_temperatures(step) == [-1.0, 1.0]  # logits rows: D, then P


def test_a_greedy_decode_stays_greedy_beside_a_sampled_prompt(step):
    for _ in range(8):
        tokens = step.run({"D": 1, "P": 6}, batch_changed=True, grammar=bitmask({"D": EVERY_TOKEN, "P": EVERY_TOKEN}))
        assert tokens["D"] == [3]


def test_the_grammar_and_the_parameters_both_follow_the_row(step):
    # D may only say 40, P only 50; D is greedy and P samples, both among their allowed tokens.
    step.run({"D": 1, "P": 6}, batch_changed=True, grammar=bitmask({"P": [50], "D": [40]}))
    assert _row_temperatures(step) == [-1.0, 1.0]
    assert step.runner.requests["D"].output_token_ids[-1] == 40
    assert step.runner.requests["P"].output_token_ids[-1] == 50


def test_a_prompt_with_several_logits_rows_keeps_the_rows_after_it_right(monkeypatch):
    point_h2d_at_cpu(monkeypatch)
    drop_pinning(monkeypatch)
    s = Step()
    s.add(request("D", SamplingParams(temperature=0.0), prompt_len=4, computed=4, output=[9]), _nearly_flat(3))
    # Resumed after preemption with its first output token recomputed: two logits rows on the stock
    # release, one once resumed-prefill-logits is in the pack; the rows after it must be right either way.
    s.add(request("R", SamplingParams(temperature=0.5), prompt_len=6, computed=4, output=[7]), _nearly_flat(3))
    s.add(request("P", SamplingParams(temperature=1.0), prompt_len=6, computed=0), _nearly_flat(3))
    s.refresh()
    s.run({"D": 1, "R": 3, "P": 6}, batch_changed=True, grammar=bitmask({"P": [50], "D": [40]}))
    temps = _row_temperatures(s)  # rows: D, R (one or two), P
    assert len(temps) in (3, 4) and temps[0] == -1.0 and set(temps[1:-1]) == {0.5} and temps[-1] == 1.0, temps
    assert s.runner.requests["D"].output_token_ids[-1] == 40
    assert s.runner.requests["P"].output_token_ids[-1] == 50  # its grammar is on its own row
