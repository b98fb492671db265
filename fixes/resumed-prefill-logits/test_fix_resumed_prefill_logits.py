"""resumed-prefill-logits: a request preempted after generating tokens is resumed with prefix-cache
hits (num_computed_tokens > 0, past its prompt). The release's runner picks a prefill's logits rows
from its prompt length alone, so every recomputed generated position gets a logits row: each is
sampled and appended to the output (the generated tail repeats); and a one-token chunk of the
recompute is taken for a decode. Patched, the rows start at the request's last known token (its
num_tokens, not its prompt), so the resumed prefill yields exactly one row, at its last position,
and is a prefill until only that token is left; the generated tokens stay output tokens (the
penalties read them) and the prompt length stays the prompt.

reset_prefix_cache(reset_running_requests=True) preempts and resumes a request in the same step, so
the runner still holds it in its persistent batch: stock keeps its old row, appends the new blocks to
the old ones, and lays out the recompute on the old (freed) blocks with its prompt length unchanged.
Patched, the runner drops and re-adds it, as vLLM's GPU runner does.

The preemption and the resume come from vLLM's real scheduler (vllm-gaudi's HPUAsyncScheduler) under
KV-cache pressure; the resume step's SchedulerOutput goes through the release's own _update_states,
_get_prompts_and_decodes and _extract_prefill_batch_contents on a real InputBatch. What stands in:
the runner's memory of the request before the resume (its CachedRequestState, taken from the
scheduler's Request: the runner removed the request from its persistent batch when it was not
scheduled), the pipeline-parallel group (one rank), and prefill merging (one request).
"""

import functools
from types import SimpleNamespace
from unittest.mock import MagicMock

import pytest
import torch
import vllm_gaudi.v1.worker.hpu_model_runner as hmr
from _scheduler import hpu_async_scheduler, request, run_until_resumed, step_output, tiny_model_dir
from vllm_gaudi.v1.worker.hpu_input_batch import CachedRequestState, InputBatch
from vllm_gaudi.v1.worker.hpu_model_runner import HPUModelRunner

BLOCK = 16
PROMPT = 40
BOUND = ("_update_states", "_get_prompts_and_decodes", "_is_prompt", "is_decoder_only",
         "_extract_prefill_batch_contents", "_get_attention_group_id_for_hybrid", "_resolve_block")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("tiny-llama"))


def preempted_and_resumed(model_dir):
    """Two requests on a pool of 9 usable 16-token blocks: b is preempted when both need a fifth
    block, a runs on and evicts b's last cached block, then b resumes with 48 tokens cached."""
    sched = hpu_async_scheduler(model_dir, num_blocks=10, block_size=BLOCK)
    a = request("a", list(range(1, PROMPT + 1)), max_tokens=45, block_size=BLOCK)
    b = request("b", list(range(201, PROMPT + 201)), max_tokens=64, block_size=BLOCK)
    sched.add_request(a)
    sched.add_request(b)
    return run_until_resumed(sched), b


def runner_for(resumed_req, monkeypatch, num_computed_tokens=None, block_ids=(1, 2, 3, 4), in_batch=False):
    monkeypatch.setattr(hmr, "get_pp_group", lambda: SimpleNamespace(is_last_rank=True))
    monkeypatch.setattr(hmr, "async_h2d_copy", functools.partial(hmr.async_h2d_copy, device="cpu"))
    r = MagicMock(spec=HPUModelRunner)
    for name in BOUND:
        setattr(r, name, getattr(HPUModelRunner, name).__get__(r))
    r.input_batch = InputBatch(max_num_reqs=4, max_model_len=1024, max_num_batched_tokens=1024,
                               device=torch.device("cpu"), pin_memory=False, vocab_size=1000,
                               block_sizes=[BLOCK], kernel_block_sizes=[BLOCK])
    r.requests = {resumed_req.request_id: CachedRequestState(
        req_id=resumed_req.request_id, prompt_token_ids=list(resumed_req.prompt_token_ids), mm_features=[],
        sampling_params=resumed_req.sampling_params, generator=None, block_ids=[list(block_ids)],
        num_computed_tokens=resumed_req.num_tokens - 1 if num_computed_tokens is None else num_computed_tokens,
        output_token_ids=list(resumed_req.output_token_ids))}
    if in_batch:
        r.input_batch.add_request(r.requests[resumed_req.request_id])
    r.encoder_cache, r._compact_gdn_group_ids, r.uses_mrope = {}, set(), False
    r.use_async_scheduling, r.use_structured_output = True, False
    r.num_mamba_like_layers, r.attn_block_size, r.defragmenter = 0, BLOCK, None
    r.invalid_req_indices = []
    r.vllm_config = MagicMock(speculative_config=None)
    r.profiler = MagicMock(enabled=False)
    r.get_dp_padding = lambda n: 0
    r._can_merge_prefill_contents = lambda lhs, rhs: not lhs.req_ids
    return r


def prefill_layout(runner, out):
    """(logits rows, blocks) of each prefill the release lays out for this step."""
    scheduled = [out.num_scheduled_tokens[rid] for rid in runner.input_batch.req_ids]
    info = runner._get_prompts_and_decodes(out)
    contents, _ = runner._extract_prefill_batch_contents(len(info.prompt_req_ids), len(info.decode_req_ids),
                                                         scheduled)
    return ([positions for c in contents for positions in c.logits_positions],
            [blocks for c in contents for blocks in c.blocks])


def test_a_resumed_prefill_with_prefix_hits_samples_one_token(model_dir, monkeypatch):
    out, b = preempted_and_resumed(model_dir)
    cached = out.scheduled_cached_reqs
    generated = cached.num_output_tokens[0]
    assert cached.num_computed_tokens[0] == 48 > PROMPT  # the hits reach into the generated tokens
    assert out.num_scheduled_tokens == {"b": PROMPT + generated - 48}  # recomputes the rest: 17 tokens

    runner = runner_for(b, monkeypatch)
    runner._update_states(out)
    rows, _ = prefill_layout(runner, out)
    assert rows == [[out.num_scheduled_tokens["b"] - 1]]  # one logits row, at the last recomputed position
    index = runner.input_batch.req_id_to_index["b"]
    # The generated tokens stay output tokens (the penalties read them as such), the prompt the prompt.
    assert runner.input_batch.num_prompt_tokens[index] == PROMPT
    assert runner.input_batch.num_tokens[index] == b.num_tokens


def test_a_resumed_prefill_in_chunks_keeps_one_token_from_its_last_chunk(model_dir, monkeypatch):
    # The recompute in chunks of 4, 1 and the rest (the scheduler's token budget): the first two are
    # partial prefills (under async scheduling one row each, discarded), the one-token chunk included;
    # only the last chunk's last position gives a token that is kept.
    budgets = iter((4, 1, 1024))
    sched = hpu_async_scheduler(model_dir, num_blocks=10, block_size=BLOCK)
    sched.max_num_scheduled_tokens = next(budgets)
    b = request("b", list(range(201, PROMPT + 201)), max_tokens=64, block_size=BLOCK)
    sched.add_request(request("a", list(range(1, PROMPT + 1)), max_tokens=45, block_size=BLOCK))
    sched.add_request(b)
    out = run_until_resumed(sched)
    assert out.scheduled_cached_reqs.num_computed_tokens[0] == 48 and b.num_tokens == PROMPT + 25
    total = b.num_tokens
    runner = runner_for(b, monkeypatch)
    kept, chunks = [], []
    while True:
        start, n = out.scheduled_cached_reqs.num_computed_tokens[0], out.num_scheduled_tokens["b"]
        chunks.append(n)
        runner.invalid_req_indices = []
        runner._update_states(out)
        assert runner._get_prompts_and_decodes(out).decode_req_ids == [], f"the chunk of {n} taken for a decode"
        rows, _ = prefill_layout(runner, out)
        if not runner.invalid_req_indices:
            kept += [start + p for p in rows[0]]
        sched.update_from_output(out, step_output(out, {"b": 7}, sched))
        if start + n == total:  # the recompute is done
            break
        sched.max_num_scheduled_tokens = next(budgets)
        out = sched.schedule()
    assert chunks == [4, 1, total - 48 - 5]
    assert kept == [total - 1]  # the logits of the last known token: the next token


def test_a_request_resumed_in_the_step_of_a_prefix_cache_reset_recomputes_on_its_new_blocks(model_dir, monkeypatch):
    sched = hpu_async_scheduler(model_dir, block_size=BLOCK)
    req = request("r", list(range(1, PROMPT + 1)), max_tokens=16, block_size=BLOCK)
    sched.add_request(req)
    for token in (101, 102, 103):  # prefill, then two decodes; the engine drains after each step
        step = sched.schedule()
        sched.update_from_output(step, step_output(step, {"r": token}))
    (old_blocks,) = sched.kv_cache_manager.get_block_ids("r")
    runner = runner_for(req, monkeypatch, num_computed_tokens=req.num_tokens - 1, block_ids=old_blocks, in_batch=True)

    assert sched.reset_prefix_cache(reset_running_requests=True)
    out = sched.schedule()  # preempted and resumed in one step: everything is recomputed
    assert out.scheduled_cached_reqs.resumed_req_ids == {"r"}
    assert out.num_scheduled_tokens == {"r": PROMPT + 3}
    (new_blocks,) = out.scheduled_cached_reqs.new_block_ids[0]
    runner._update_states(out)
    batch = runner.input_batch
    index = batch.req_id_to_index["r"]
    assert batch.block_table[0].num_blocks_per_row[index] == len(new_blocks)
    assert batch.num_prompt_tokens[index] == PROMPT + 3
    rows, blocks = prefill_layout(runner, out)
    assert blocks == [new_blocks]
    assert rows == [[PROMPT + 2]]
