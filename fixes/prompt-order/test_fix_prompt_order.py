"""prompt-order: prompts run in the order the scheduler scheduled them, so a request that hits a
block another request of the same step is still writing runs after its writer.

vLLM's KV manager marks a block cached as soon as it is allocated, so a request scheduled later in
the same step can hit a block an earlier one writes in that step. vllm-gaudi runs the prompts as
sequential forward passes in batch order; the stock decodes-first swap (first prompt with last
decode) reverses prompt rows, and a new request that fills a freed row can sit before its writer.
"""

import pytest
from _step import Step, peaked, point_h2d_at_cpu, request
from vllm.sampling_params import SamplingParams

GREEDY = SamplingParams(temperature=0.0)


def _prompt_passes(step):
    decodes = {rid for rid in step.batch.req_ids if step.scheduled[rid] == 1}
    return [rid for ids in step.passes for rid in ids if rid not in decodes]


@pytest.fixture
def step(monkeypatch):
    point_h2d_at_cpu(monkeypatch)
    return Step()


def test_the_decodes_first_reorder_keeps_the_prompts_in_schedule_order(step):
    # Rows A, B, D are prompts scheduled in that order; X and Y are decodes after them.
    for rid in ("A", "B", "D"):
        step.add(request(rid, GREEDY, prompt_len=8, computed=0), peaked(1))
    for rid in ("X", "Y"):
        step.add(request(rid, GREEDY, prompt_len=4, computed=4, output=[2]), peaked(1))
    step.refresh()
    step.run({"X": 1, "Y": 1, "A": 8, "B": 8, "D": 8}, batch_changed=True)

    assert _prompt_passes(step) == ["A", "B", "D"]  # stock: D, B, A
    assert step.batch.req_ids == ["X", "Y", "A", "B", "D"]  # decodes first, each part in its order


def test_a_reader_in_a_lower_row_runs_after_its_writer(step):
    # W writes its second chunk this step; R, new this step, took row 0 freed by a finished request
    # and hits the blocks W allocated for that chunk. The scheduler scheduled W (running) first.
    step.add(request("R", GREEDY, prompt_len=12, computed=8), peaked(1))
    step.add(request("W", GREEDY, prompt_len=16, computed=8), peaked(1))
    step.refresh()
    step.run({"W": 8, "R": 4}, batch_changed=True)

    assert _prompt_passes(step) == ["W", "R"]
