"""sampling-rows-refresh: after the step's reorder (decodes first) the device sampling rows are the
CPU rows again, so each request is sampled with its own temperature.

The stock runner computes `batch_changed` in `_update_states`, before `sample_tokens` swaps prompts
behind decodes; the swaps move CPU rows only, and with no request added or removed the sampling
reads the device rows unrefreshed (`skip_copy=not batch_changed`): row i is sampled with row j's
temperature, top-p/top-k and penalties.
"""

import pytest
import torch
from _step import Step, peaked, point_h2d_at_cpu, request
from vllm.sampling_params import SamplingParams


@pytest.fixture
def step(monkeypatch):
    point_h2d_at_cpu(monkeypatch)
    torch.manual_seed(0)
    s = Step()
    # A long prompt in its second chunk sits before a running decode: the step must swap them.
    s.add(request("P", SamplingParams(temperature=0.7), prompt_len=12, computed=6), peaked(5, high=0.01))
    s.add(request("D", SamplingParams(temperature=0.0), prompt_len=4, computed=4, output=[9]), peaked(3, high=0.01))
    s.refresh()  # the earlier step that added them copied the rows to the device
    return s


def _temperature_of(step, req_id):
    for req_ids, metadata in step.sampled:
        if req_id in req_ids:
            return float(metadata.temperature[req_ids.index(req_id)])
    raise AssertionError(f"{req_id} was not sampled: {step.sampled}")


def test_a_reorder_with_no_batch_change_leaves_device_rows_equal_to_cpu_rows(step):
    step.run({"P": 6, "D": 1}, batch_changed=False)

    batch = step.batch
    assert batch.req_ids == ["D", "P"]  # the step did reorder
    assert batch.temperature[:2].tolist() == pytest.approx(batch.temperature_cpu[:2].tolist())


def test_each_request_is_sampled_with_its_own_temperature_after_the_reorder(step):
    tokens = step.run({"P": 6, "D": 1}, batch_changed=False)

    # Stock: the greedy decode gets the prompt's 0.7 and samples at random, the prompt gets -1 (greedy).
    assert _temperature_of(step, "D") == pytest.approx(-1.0)
    assert _temperature_of(step, "P") == pytest.approx(0.7)
    assert tokens["D"] == [3]  # greedy: the argmax of its nearly flat logits row
