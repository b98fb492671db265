"""sampling-rows-refresh: when rows move in the persistent batch, the device sampling rows move
with them, so each request is sampled with its own temperature, top-p/top-k and penalties.

The stock InputBatch's `swap_states` (and `condense`) move the CPU rows only, and the selective
sampling metadata the runner samples with reads the device rows unrefreshed unless the batch
changed (`skip_copy=not batch_changed`, decided in `_update_states` from adds and removes). The
runner's decodes-first reorder in `sample_tokens` swaps rows after that decision: in a step where
nothing was added or removed but a prompt in its next chunk sits before a running decode, row i
is sampled with row j's parameters. Penalties also read the prompt tokens from a CPU cache the
swap leaves in the old order.

The tests drive the release's `sample_tokens` on a real InputBatch (cookbook/fixpack/lab/_step.py), and the
batch's own API for a swap made anywhere else; they also count what a reorder step copies to the
device: the rows that moved, once, and not the whole batch nor the prompt-token tensor again.
"""

import pytest
import torch
import vllm_gaudi.v1.worker.hpu_input_batch as hpu_input_batch
from _step import VOCAB, Step, peaked, point_h2d_at_cpu, request
from vllm.sampling_params import SamplingParams

SAMPLING_ROWS = ("temperature", "top_p", "top_k", "frequency_penalties", "presence_penalties",
                 "repetition_penalties")


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


def _own_rows(batch, req_id):
    """A request's sampling values as its SamplingParams give them (its CPU row)."""
    row = batch.req_id_to_index[req_id]
    return (float(batch.temperature_cpu[row]), float(batch.repetition_penalties_cpu[row]),
            float(batch.frequency_penalties_cpu[row]))


def _prompt_row(batch, req_id, width):
    """The request's prompt tokens padded with the vocabulary size, as the penalties read them."""
    row = batch.req_id_to_index[req_id]
    prompt = batch.token_ids_cpu[row, :batch.num_prompt_tokens[row]].tolist()
    return prompt + [VOCAB] * (width - len(prompt))


def _sampled_rows(metadata, req_ids):
    return {
        rid: (float(metadata.temperature[i]), float(metadata.repetition_penalties[i]),
              float(metadata.frequency_penalties[i]))
        for i, rid in enumerate(req_ids)
    }


def test_rows_swapped_outside_the_step_reorder_are_sampled_with_their_own_parameters(monkeypatch):
    """Any swap before sampling, not only the one in sample_tokens: the batch keeps its device rows
    and its prompt-token cache in step with the CPU rows itself."""
    point_h2d_at_cpu(monkeypatch)
    s = Step()
    s.add(request("A", SamplingParams(temperature=0.7, repetition_penalty=1.5, frequency_penalty=0.3),
                  prompt_len=12, computed=12, output=[9]))
    s.add(request("B", SamplingParams(temperature=0.0), prompt_len=4, computed=4, output=[9]))
    s.refresh()
    batch = s.batch
    pairs = [("A", batch.req_output_token_ids[0]), ("B", batch.req_output_token_ids[1])]
    batch.make_selective_sampling_metadata(pairs, skip_copy=True)  # a steady step: the prompt cache is built

    batch.swap_states(0, 1)
    metadata = batch.make_selective_sampling_metadata(pairs, skip_copy=True)

    assert _sampled_rows(metadata, ["A", "B"]) == {rid: pytest.approx(_own_rows(batch, rid)) for rid in "AB"}
    width = metadata.prompt_token_ids.shape[1]
    assert metadata.prompt_token_ids.tolist() == [_prompt_row(batch, rid, width) for rid in "AB"]


def _count_copies(monkeypatch, batch):
    """Record each host-to-device copy of a sampling row tensor (name, rows or "all") and each
    rebuild of the prompt-token tensor."""
    names = {id(getattr(batch, name)): name for name in SAMPLING_ROWS}
    copies, prompt_builds = [], []
    update, copy = hpu_input_batch.async_h2d_update, hpu_input_batch.async_h2d_copy
    build = batch._make_prompt_token_ids_cpu_tensor

    def counted_update(source, dest, indices, *args, **kwargs):
        if id(dest) in names:
            copies.append((names[id(dest)], sorted(indices)))
        return update(source, dest, indices, *args, **kwargs)

    def counted_copy(source, dest_tensor=None, *args, **kwargs):
        if id(dest_tensor) in names:
            copies.append((names[id(dest_tensor)], "all"))
        return copy(source, dest_tensor, *args, **kwargs)

    def counted_build():
        prompt_builds.append(1)
        return build()

    monkeypatch.setattr(hpu_input_batch, "async_h2d_update", counted_update)
    monkeypatch.setattr(hpu_input_batch, "async_h2d_copy", counted_copy)
    monkeypatch.setattr(batch, "_make_prompt_token_ids_cpu_tensor", counted_build)
    return copies, prompt_builds


def _advance(step, scheduled):
    """What `_update_states` does between steps for running requests: computed tokens advance."""
    for rid, n in scheduled.items():
        step.batch.num_computed_tokens_cpu[step.batch.req_id_to_index[rid]] += n


def test_a_reorder_step_copies_only_the_rows_that_moved_and_samples_each_with_its_own(monkeypatch):
    """Two prompts in chunks; the later, shorter one finishes first and becomes a decode behind the
    longer one: the next step swaps them with nothing added or removed. That step copies the two
    moved rows of each sampling tensor in use, once, and reuses the prompt-token cache."""
    point_h2d_at_cpu(monkeypatch)
    s = Step()
    s.add(request("D", SamplingParams(temperature=0.0, repetition_penalty=1.2), prompt_len=4, computed=4,
                  output=[9]), peaked(3))
    s.add(request("L", SamplingParams(temperature=0.7, frequency_penalty=0.5), prompt_len=18), peaked(5))
    s.add(request("S", SamplingParams(temperature=0.5, repetition_penalty=1.5), prompt_len=4), peaked(6))
    s.refresh()
    for scheduled, changed in (({"D": 1, "L": 6, "S": 2}, True), ({"D": 1, "L": 6, "S": 2}, False)):
        s.run(scheduled, batch_changed=changed)
        _advance(s, scheduled)
    assert s.batch.req_ids == ["D", "L", "S"]  # S is now a decode behind the prompt L

    copies, prompt_builds = _count_copies(monkeypatch, s.batch)
    s.run({"D": 1, "L": 6, "S": 1}, batch_changed=False)

    batch = s.batch
    assert batch.req_ids == ["D", "S", "L"]
    moved = [batch.req_id_to_index["S"], batch.req_id_to_index["L"]]
    in_use = ("temperature", "frequency_penalties", "presence_penalties", "repetition_penalties")
    assert sorted(copies, key=str) == sorted(((name, sorted(moved)) for name in in_use), key=str)
    assert prompt_builds == []
    for req_ids, metadata in s.sampled:
        assert _sampled_rows(metadata, req_ids) == {rid: pytest.approx(_own_rows(batch, rid)) for rid in req_ids}
        width = metadata.prompt_token_ids.shape[1]
        assert metadata.prompt_token_ids.tolist() == [_prompt_row(batch, rid, width) for rid in req_ids]
