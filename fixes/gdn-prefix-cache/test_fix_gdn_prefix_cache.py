"""gdn-prefix-cache: prefix caching for the Gated DeltaNet hybrids (Qwen3.5) in compact GDN mode.
The stock release only warns that compact mode "does not support prefix caching": a hit resumes
from whatever its slot holds. Patched, the runner refuses prefix caching without compact mode,
checkpoints every GDN layer's slot state into its block's attention page when a step ends a block,
restores the checkpoint of the last cached block into the slot of a request that starts after a
hit, zeroes a slot when it hands it to a request and the page of every block id new in a step,
whatever its group (fixes/gdn-prefix-cache/README.md).

Driven through the tree's own runner methods on CPU: `initialize_kv_cache` (cookbook/fixpack/lab/_gdn_ckpt.py's
`hybrid_caches`: only the set-up around the allocation stands in), `_update_states` and
`execute_model` on a real InputBatch and real SchedulerOutputs, `prepare_mamba_state_idxs` and
`_form_prefill_batch` for the hit's mamba metadata. What stands in: the model, the pipeline group
(one rank), prompt bucketing (one request, padded to 128-token chunks), and sample_tokens around the
checkpoint copy it ends with. The layout of a checkpoint in a page is the design's
(_gdn_ckpt.load_checkpoint reads what the runner wrote).
"""

import functools
import inspect
from types import SimpleNamespace

import pytest
import torch
import vllm_gaudi.v1.worker.hpu_model_runner as hmr
from _gdn_ckpt import KERNEL_BLOCK, block_rows, hybrid_caches, load_checkpoint, recipe_model, store_checkpoint
from _step import point_h2d_at_cpu
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput
from vllm_gaudi.v1.worker.hpu_input_batch import InputBatch
from vllm_gaudi.v1.worker.hpu_model_runner import HPUModelRunner

BLOCK = 896
GROUPS = 2  # GDN groups (the 27B has 3): two, so group offsets inside a slot are exercised
TENSORS = 2  # KV tensors, each shared by one GDN layer per group and one attention layer


def _random_bits(t: torch.Tensor, gen: torch.Generator) -> None:
    """Fill a tensor with random bytes (every bit pattern, NaNs included): copies must move bits."""
    raw = t.view(torch.uint8)
    raw.copy_(torch.randint(0, 256, raw.shape, generator=gen, dtype=torch.uint8))


def _slot_states(caches, tensor: int, index: int) -> list[torch.Tensor]:
    """One compact slot of KV tensor `tensor`'s GDN states (every GDN layer of the tensor shares them)."""
    return [s[index] for s in caches[f"gdn.0.{tensor}"]]


def _indices(base_slot: int) -> list[int]:
    """The compact state index of a base slot per GDN group (the stock `s * groups + g + 1`)."""
    return [base_slot * GROUPS + g + 1 for g in range(GROUPS)]


def _dirty(caches, gen: torch.Generator) -> None:
    """Random bits in every GDN state, as if requests had run."""
    for t in range(TENSORS):
        for s in caches[f"gdn.0.{t}"]:
            _random_bits(s, gen)


@pytest.fixture
def stepping(monkeypatch):
    """Wire a hybrid_caches runner for _update_states / execute_model on the CPU: one pipeline rank,
    the h2d copies on the CPU, a real InputBatch with a block table per KV cache group."""
    monkeypatch.setattr(hmr, "get_pp_group", lambda: SimpleNamespace(is_last_rank=True))
    monkeypatch.setattr(hmr, "async_h2d_copy", functools.partial(hmr.async_h2d_copy, device="cpu"))
    point_h2d_at_cpu(monkeypatch)

    def wire(runner, max_reqs=3):
        kernel = [KERNEL_BLOCK if i == runner._get_attention_group_id_for_hybrid() else BLOCK
                  for i in range(GROUPS + 1)]
        runner.__dict__.update(
            requests={}, encoder_cache={}, uses_mrope=False, use_async_scheduling=False, is_pooling_model=False,
            defragmenter=None, pin_memory=False, max_num_reqs=max_reqs,
            input_batch=InputBatch(max_num_reqs=max_reqs, max_model_len=8 * BLOCK, max_num_batched_tokens=8 * BLOCK,
                                   device=torch.device("cpu"), pin_memory=False, vocab_size=64,
                                   block_sizes=[BLOCK] * (GROUPS + 1), kernel_block_sizes=kernel))
        return runner

    return wire


def _new(req_id, prompt_len, computed, block_ids):
    return NewRequestData(req_id=req_id, prompt_token_ids=[1] * prompt_len, mm_features=[],
                          sampling_params=SamplingParams(max_tokens=4), pooling_params=None, block_ids=block_ids,
                          num_computed_tokens=computed, lora_request=None)


def _running(req_id, computed, new_block_ids):
    """A running request's next chunk, with its new block ids per group (appended to its table)."""
    return CachedRequestData(req_ids=[req_id], resumed_req_ids=set(), new_token_ids=[[]], all_token_ids={},
                             new_block_ids=[new_block_ids], num_computed_tokens=[computed], num_output_tokens=[0])


def _step(new=(), finished=(), scheduled=None, running=None):
    """A SchedulerOutput of new requests and `running` ones (each scheduled for `scheduled[req_id]` tokens)."""
    scheduled = scheduled or {}
    running = running or CachedRequestData.make_empty()
    return SchedulerOutput(scheduled_new_reqs=list(new), scheduled_cached_reqs=running,
                           num_scheduled_tokens=dict(scheduled), total_num_scheduled_tokens=sum(scheduled.values()),
                           scheduled_spec_decode_tokens={}, scheduled_encoder_inputs={},
                           num_common_prefix_blocks=[0] * (GROUPS + 1), finished_req_ids=set(finished),
                           free_encoder_mm_hashes=[])


def _block_ids(runner, gdn: list[list[int]], attn: list[int]) -> tuple:
    """Block ids per KV cache group in the runner's group order."""
    out, g = [], iter(gdn)
    for gid in range(GROUPS + 1):
        out.append(list(attn) if gid == runner._get_attention_group_id_for_hybrid() else list(next(g)))
    return tuple(out)


def _serving_config(**changes):
    """The runner's view of a serving configuration: prefix caching in vLLM's `align` mode, nothing else."""
    config = {"cache_config": SimpleNamespace(enable_prefix_caching=True, mamba_cache_mode="align"),
              "speculative_config": None, "kv_transfer_config": None,
              "parallel_config": SimpleNamespace(world_size=1, distributed_executor_backend="uni")}
    return SimpleNamespace(**(config | changes))


def test_prefix_caching_without_compact_gdn_is_refused(monkeypatch):
    runner = object.__new__(HPUModelRunner)
    runner.vllm_config = _serving_config()
    monkeypatch.setenv("VLLM_COMPACT_GDN", "0")
    with pytest.raises(ValueError, match="VLLM_COMPACT_GDN=1"):
        runner._check_gdn_prefix_cache()
    monkeypatch.setenv("VLLM_COMPACT_GDN", "1")
    runner._check_gdn_prefix_cache()
    assert "self._check_gdn_prefix_cache()" in inspect.getsource(HPUModelRunner.__init__)


@pytest.mark.parametrize("changes, reason", [
    ({"speculative_config": SimpleNamespace(method="ngram")}, "speculative decoding"),
    ({"kv_transfer_config": SimpleNamespace(kv_connector="ExampleConnector")}, "a KV connector"),
    ({"cache_config": SimpleNamespace(enable_prefix_caching=True, mamba_cache_mode="all")}, "mamba_cache_mode 'all'"),
    ({"parallel_config": SimpleNamespace(world_size=2, distributed_executor_backend="mp")},
     "a worker outside the scheduler's process"),
], ids=["speculative-decoding", "kv-connector", "mamba-cache-mode", "worker-in-another-process"])
def test_what_the_checkpoints_cannot_serve_is_refused_at_start_up(monkeypatch, changes, reason):
    """The stock runner starts with each of these; with speculative decoding its first step raises
    inside execute_model (fixes/gdn-prefix-cache/test_fix_gdn_prefix_cache_engine.py), ending every request."""
    monkeypatch.setenv("VLLM_COMPACT_GDN", "1")
    runner = object.__new__(HPUModelRunner)
    runner.vllm_config = _serving_config(**changes)
    with pytest.raises(ValueError, match=reason):
        runner._check_gdn_prefix_cache()


@pytest.mark.parametrize("unit, refused", [(KERNEL_BLOCK, True), (BLOCK // 2, True), (BLOCK, False),
                                           (2 * BLOCK, False)])
def test_a_prefix_match_unit_inside_a_block_is_refused_at_start_up(unit, refused):
    """vLLM matches prefixes every `prefix_match_unit` tokens; a hit that ends inside a block has no
    checkpoint to resume from (the stock runner serves it from a wrong state)."""
    if not refused:
        runner, _ = hybrid_caches(gdn_first=True, prefix_caching=True, prefix_match_unit=unit)
        assert runner._gdn_checkpoint_tensors
        return
    with pytest.raises(ValueError, match=f"prefix_match_unit {unit} lets a prefix-cache hit end inside"):
        hybrid_caches(gdn_first=True, prefix_caching=True, prefix_match_unit=unit)


def test_a_kv_cache_with_nowhere_to_keep_checkpoints_is_refused_at_start_up():
    """No KV tensor shared by GDN layers and an attention layer: no page can hold a checkpoint. The
    stock runner has no checkpoints; a silent empty list would serve every hit from a wrong state."""
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, KVCacheTensor

    runner, _ = hybrid_caches(gdn_first=True, prefix_caching=True)
    attn = FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=8, dtype=torch.bfloat16)
    config = KVCacheConfig(num_blocks=4, kv_cache_groups=[KVCacheGroupSpec(["attn.0"], attn)],
                           kv_cache_tensors=[KVCacheTensor(size=attn.page_size_bytes * 4, shared_by=["attn.0"])])
    with pytest.raises(ValueError, match="no KV tensor shared by GDN layers and an attention layer"):
        runner._find_gdn_checkpoint_tensors(config, {})


@pytest.mark.parametrize("gdn_first", [True, False], ids=["gdn-groups-first", "attention-group-first"])
def test_in_either_group_order_checkpoints_land_in_attention_pages_of_gdn_owned_blocks(gdn_first):
    """The stock set-up binds the attention layer to the GDN states when its group comes first."""
    runner, caches = hybrid_caches(gdn_first, num_blocks=6, gdn_groups=GROUPS, tensors=TENSORS, prefix_caching=True)
    rows = (6 * BLOCK // KERNEL_BLOCK + 1) * KERNEL_BLOCK
    for t in range(TENSORS):
        k, v = caches[f"attn.{t}"][:2]
        assert k.shape == v.shape == (rows, 1, 8)
        states = caches[f"gdn.0.{t}"]
        # one compact state tensor per KV tensor, shared by its GDN layers
        assert all(caches[f"gdn.{g}.{t}"][i] is states[i] for g in range(GROUPS) for i in range(2))
        # 3 request slots, and 2 scratch slots for the block boundaries inside a prefill chunk (a
        # 2-block token budget has at most 2 of them in a step)
        assert states[0].shape[0] == (3 + 2) * GROUPS + 2
    assert runner._gdn_scratch_slots == [3, 4] and sorted(runner._gdn_slot_free_list) == [0, 1, 2]
    gen = torch.Generator().manual_seed(5)
    for t in range(TENSORS):
        for c in caches[f"attn.{t}"][:2]:
            _random_bits(c, gen)
    before = {t: [c.clone() for c in caches[f"attn.{t}"][:2]] for t in range(TENSORS)}
    runner._gdn_req_to_base_slot["r"] = base = runner._gdn_slot_free_list.pop()
    index = _indices(base)
    _dirty(caches, gen)
    gdn_blocks = [4, 2]  # the block id each GDN group has for the block that ends
    runner._gdn_copy_states([(base, gdn_blocks)], to_pages=True)
    for t in range(TENSORS):
        k, v = caches[f"attn.{t}"][:2]
        for g, block in enumerate(gdn_blocks):  # the page of GDN layer (g, t) holds its state, bit for bit
            back = [torch.empty_like(s[0]) for s in caches[f"gdn.{g}.{t}"]]
            load_checkpoint(back, k[block_rows(block, BLOCK)], v[block_rows(block, BLOCK)])
            for got, state in zip(back, caches[f"gdn.{g}.{t}"], strict=True):
                assert torch.equal(got.view(torch.uint8), state[index[g]].view(torch.uint8))
        for other in (0, 1, 3, 5):  # attention KV of every other block id untouched, the pad rows too
            for c, c0 in zip((k, v), before[t], strict=True):
                assert torch.equal(c[block_rows(other, BLOCK)].view(torch.uint8),
                                   c0[block_rows(other, BLOCK)].view(torch.uint8))
        assert torch.equal(k[6 * BLOCK:].view(torch.uint8), before[t][0][6 * BLOCK:].view(torch.uint8))


def test_a_slot_handed_to_a_new_request_starts_from_zeros(stepping):
    runner, caches = hybrid_caches(True, gdn_groups=GROUPS, tensors=TENSORS, prefix_caching=True)
    stepping(runner)
    attn = [1]
    runner._update_states(_step(new=[_new("a", 100, 0, _block_ids(runner, [[2], [3]], attn))], scheduled={"a": 100}))
    slot = runner._gdn_req_to_base_slot["a"]
    gen = torch.Generator().manual_seed(2)
    _dirty(caches, gen)  # "a" ran: its slot holds its final states
    runner._update_states(_step(new=[_new("b", 100, 0, _block_ids(runner, [[5], [4]], attn))], finished={"a"},
                                scheduled={"b": 100}))
    assert runner._gdn_req_to_base_slot["b"] == slot  # the free list is a stack: b reuses a's slot
    for t in range(TENSORS):
        for index in _indices(slot):
            assert all(torch.count_nonzero(s) == 0 for s in _slot_states(caches, t, index))


def _mamba_metadata(runner, req_id, computed, scheduled):
    """The release's _form_prefill_batch for one prompt chunk (prefix caching on, one request per
    prefill batch as the runner's default); bucketing pads to whole 128-token GDN chunks."""
    runner.__dict__.update(
        profiler=SimpleNamespace(enabled=False), interleaved_sliding_window=False, use_merged_prefill=False,
        logits_rounding=1, mamba_chunk_size=KERNEL_BLOCK, dtype=torch.bfloat16, uses_mrope=False,
        cache_config=SimpleNamespace(mamba_block_size=BLOCK), get_dp_padding=lambda n: 0,
        _get_prompt_bucketing_fn=lambda: lambda q, c: (1, -(-sum(q) // KERNEL_BLOCK) * KERNEL_BLOCK, sum(c)))
    index = runner.input_batch.req_id_to_index[req_id]
    table = runner.input_batch.block_table[runner._get_attention_group_id_for_hybrid()].get_cpu_tensor()
    contents = SimpleNamespace(req_ids=[req_id], token_ids=[[1] * scheduled], context_lens=[computed],
                               blocks=[table[index].tolist()], logits_positions=[[scheduled - 1]])
    return runner._form_prefill_batch(contents).attn_metadata[0]


def test_a_batch_with_hits_and_misses_restores_the_hits_and_checkpoints_every_block_end(stepping):
    """Step 1: "cold" runs 2 blocks from scratch and checkpoints both block ends: the chunk's end from
    its slot, the boundary inside the chunk from the scratch slot its GDN layers write there (the
    prefill batch's metadata names it). Step 2: "hit" shares its first 2 blocks (vLLM gives the GDN
    groups null blocks, then the cached last block), "miss" a
    new prompt that ends mid-block, "also" one that ends a block: the hit gets the cold request's
    state at token 1792 in its slot before anything runs, and its prefill starts from it; the pages
    of the blocks new in this step are zeroed, in every group, and the cached blocks' KV is kept."""
    runner, caches = hybrid_caches(True, num_blocks=12, gdn_groups=GROUPS, tensors=TENSORS, prefix_caching=True)
    stepping(runner)
    cold_gdn = [[2, 3], [4, 5]]
    out = _step(new=[_new("cold", 2 * BLOCK, 0, _block_ids(runner, cold_gdn, [1, 6]))], scheduled={"cold": 2 * BLOCK})
    assert runner.execute_model(out) is None
    gen = torch.Generator().manual_seed(9)
    _dirty(caches, gen)  # the forward pass ran: the slot holds the state at 1792
    cold, scratch = runner._gdn_req_to_base_slot["cold"], runner._gdn_scratch_slots[0]
    # the block that ends at 1792, per group, from the slot; the one that ends at 896 from a scratch slot
    assert runner._gdn_pending_checkpoints == [(cold, [3, 5]), (scratch, [2, 4])]
    mapping = _mamba_metadata(runner, "cold", 0, 2 * BLOCK).mamba_chunks_to_block_mapping
    inner_chunk = BLOCK // KERNEL_BLOCK - 1  # the 128-token chunk that ends at 896
    for gid, index in zip(sorted(runner._compact_gdn_group_ids), _indices(scratch), strict=True):
        assert mapping[gid].tolist() == [index if c == inner_chunk else -1 for c in range(2 * BLOCK // KERNEL_BLOCK)]
    runner._gdn_write_checkpoints()  # what sample_tokens ends its forwards with
    assert "self._gdn_write_checkpoints()" in inspect.getsource(HPUModelRunner.sample_tokens)
    cold_state = [[s.clone() for s in _slot_states(caches, t, i)] for t in range(TENSORS)
                  for i in _indices(cold)]

    gen_kv = torch.Generator().manual_seed(4)
    for t in range(TENSORS):  # attention KV everywhere: the new blocks' pages held another owner's bytes
        for c in caches[f"attn.{t}"][:2]:
            _random_bits(c, gen_kv)
    runner._gdn_copy_states([(cold, [3, 5])], to_pages=True)  # the checkpoints the hit will read, again
    hit_gdn, attn = [[0, 3, 7], [0, 5, 8]], [1, 6, 9]
    out = _step(new=[_new("hit", 3 * BLOCK, 2 * BLOCK, _block_ids(runner, hit_gdn, attn)),
                     _new("miss", 500, 0, _block_ids(runner, [[10], [11]], [0])),
                     _new("also", BLOCK, 0, _block_ids(runner, [[0], [0]], [0]))],
                finished={"cold"}, scheduled={"hit": BLOCK, "miss": 500, "also": BLOCK})
    runner.execute_model(out)
    hit, miss = runner._gdn_req_to_base_slot["hit"], runner._gdn_req_to_base_slot["miss"]
    assert hit == cold  # the slot the cold request left, zeroed then restored
    # the hit checkpoints its third block; "also" ends a block on a null GDN block: nothing to write
    assert runner._gdn_pending_checkpoints == [(hit, [7, 8])]
    hit_state = [[s.clone() for s in _slot_states(caches, t, i)] for t in range(TENSORS)
                 for i in _indices(hit)]
    for got, want in zip(hit_state, cold_state, strict=True):
        assert all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(got, want, strict=True))
    for t in range(TENSORS):  # the miss starts from zeros
        for i in _indices(miss):
            assert all(torch.count_nonzero(s) == 0 for s in _slot_states(caches, t, i))
        for c in caches[f"attn.{t}"][:2]:  # new blocks' pages zeroed (9: the hit's attention block past
            # its hit); the hit's cached attention blocks keep their KV
            assert all(torch.count_nonzero(c[block_rows(b, BLOCK)]) == 0 for b in (7, 8, 9, 10, 11))
            assert all(torch.count_nonzero(c[block_rows(b, BLOCK)]) > 0 for b in (1, 6))

    meta = _mamba_metadata(runner, "hit", 2 * BLOCK, BLOCK)
    gdn_groups = sorted(runner._compact_gdn_group_ids)
    assert meta.load_indices_tensor[gdn_groups].tolist() == [[i] for i in _indices(hit)]
    assert torch.equal(meta.load_indices_tensor[gdn_groups], meta.store_indices_tensor[gdn_groups])
    assert meta.has_initial_states_p.tolist() == [1]
    for t in range(TENSORS):  # what the GDN layer reads as its initial SSM state: the cold run's at 1792
        ssm = caches[f"gdn.0.{t}"][1]
        for g, gid in enumerate(gdn_groups):
            got = ssm[meta.load_indices_tensor[gid].long()][0]
            assert torch.equal(got.view(torch.uint8), cold_state[t * GROUPS + g][1].view(torch.uint8))


def test_the_record_backs_a_hit_only_where_a_checkpoint_was_written_and_not_after_its_page_changed_hands(
        stepping):
    """vLLM's hit search asks the runner before it offers a hit (MambaManager.cached_state_filter):
    backed only by a checkpoint of the same GDN group ending at the hit's length. A block id handed to
    a new owner has its page zeroed and leaves the record; a restore the record cannot back raises
    rather than resuming from the zeroed page."""
    from vllm.v1.core.single_type_kv_cache_manager import MambaManager

    runner, _ = hybrid_caches(True, num_blocks=12, gdn_groups=GROUPS, tensors=TENSORS, prefix_caching=True)
    stepping(runner)
    gids = sorted(runner._compact_gdn_group_ids)
    runner.execute_model(_step(new=[_new("cold", 2 * BLOCK, 0, _block_ids(runner, [[2, 3], [4, 5]], [1, 6]))],
                               scheduled={"cold": 2 * BLOCK}))
    runner._gdn_write_checkpoints()
    assert runner._gdn_checkpoints == {3: (gids[0], "cold", 2 * BLOCK), 5: (gids[1], "cold", 2 * BLOCK),
                                       2: (gids[0], "cold", BLOCK), 4: (gids[1], "cold", BLOCK)}
    assert MambaManager.cached_state_filter([3, 5], gids, 2 * BLOCK)
    assert runner.gdn_unbacked_hits == 0
    assert not MambaManager.cached_state_filter([3, 5], gids, BLOCK)  # another position
    assert not MambaManager.cached_state_filter([5, 3], gids, 2 * BLOCK)  # another group's checkpoint
    assert MambaManager.cached_state_filter([2, 4], gids, BLOCK)  # the boundary inside the chunk
    assert not MambaManager.cached_state_filter([2, 4], gids, 3 * BLOCK)  # a block nothing wrote
    assert runner.gdn_unbacked_hits == 3
    # Block 5 goes to a new request's attention group: its page is zeroed, its checkpoint gone.
    runner.execute_model(_step(new=[_new("n", 100, 0, _block_ids(runner, [[7], [8]], [5]))], finished={"cold"},
                               scheduled={"n": 100}))
    assert 5 not in runner._gdn_checkpoints and 3 in runner._gdn_checkpoints
    assert not MambaManager.cached_state_filter([3, 5], gids, 2 * BLOCK)
    hit = _new("hit", 3 * BLOCK, 2 * BLOCK, _block_ids(runner, [[0, 3, 9], [0, 5, 10]], [1, 6, 11]))
    with pytest.raises(RuntimeError, match="GDN checkpoint was never written"):
        runner.execute_model(_step(new=[hit], scheduled={"hit": BLOCK}))


def test_a_block_id_that_held_a_checkpoint_is_zeroed_before_the_attention_group_uses_it(stepping):
    """Block ids 5 and 6 held GDN checkpoints (float32 state bytes, some NaN/Inf read as bf16) and
    were evicted; the attention group gets 5 for a new request's first chunk and 6 for its next one.
    HPU decode attention scores every row of a block and masks the rows past the context with a
    bias, which a NaN survives: each page is zeroed before the step that first uses it runs, and the
    KV the request wrote into block 5 is kept the step after."""
    runner, caches = hybrid_caches(True, num_blocks=8, gdn_groups=GROUPS, tensors=TENSORS, prefix_caching=True)
    stepping(runner)
    gen = torch.Generator().manual_seed(3)
    for t in range(TENSORS):
        k, v = caches[f"attn.{t}"][:2]
        for g, block in enumerate((5, 6)):  # the checkpoint of GDN layer (g, t), laid out as the design's
            state = [torch.empty_like(s[0]) for s in caches[f"gdn.{g}.{t}"]]
            for s in state:
                _random_bits(s, gen)
            store_checkpoint(state, k[block_rows(block, BLOCK)], v[block_rows(block, BLOCK)])
    pages = [c[block_rows(b, BLOCK)] for t in range(TENSORS) for c in caches[f"attn.{t}"][:2] for b in (5, 6)]
    assert not all(torch.isfinite(p).all() for p in pages)  # what decode attention would score

    runner.execute_model(_step(new=[_new("a", 1000, 0, _block_ids(runner, [[2], [3]], [5]))], scheduled={"a": BLOCK}))
    for t in range(TENSORS):
        for c in caches[f"attn.{t}"][:2]:
            assert torch.count_nonzero(c[block_rows(5, BLOCK)]) == 0
            _random_bits(c[block_rows(5, BLOCK)], gen)  # the chunk's forward wrote a's KV
    written = [c[block_rows(5, BLOCK)].clone() for t in range(TENSORS) for c in caches[f"attn.{t}"][:2]]

    running = _running("a", BLOCK, _block_ids(runner, [[4], [7]], [6]))
    runner.execute_model(_step(running=running, scheduled={"a": 1000 - BLOCK}))
    assert runner.requests["a"].block_ids == _block_ids(runner, [[2, 4], [3, 7]], [5, 6])
    for t in range(TENSORS):
        for c in caches[f"attn.{t}"][:2]:
            assert torch.count_nonzero(c[block_rows(6, BLOCK)]) == 0
    kept = [c[block_rows(5, BLOCK)] for t in range(TENSORS) for c in caches[f"attn.{t}"][:2]]
    assert all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(kept, written, strict=True))


def test_a_27b_checkpoint_round_trips_bit_identical_through_the_runner_copies():
    """Qwen3.5-27B's page (896 tokens, 4 KV heads x 256, bf16) and GDN state (bf16 conv, fp32 SSM
    of 48 x 128 x 128): slot -> page -> another slot, every byte back."""
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator

    geo = recipe_model()["geometry"]
    gdn = geo["gdn"]
    shapes = MambaStateShapeCalculator.gated_delta_net_state_shape(1, gdn["key_heads"], gdn["value_heads"],
                                                                 gdn["key_head_dim"], gdn["value_head_dim"],
                                                                 gdn["conv_kernel"])
    layer = SimpleNamespace(state_shapes=lambda: list(shapes))
    runner, caches = hybrid_caches(False, max_reqs=2, num_blocks=3, layer=layer, prefix_caching=True,
                                   kv_heads=geo["kv_heads"], head_size=geo["head_dim"])
    (_, _, _, segments), = runner._gdn_checkpoint_tensors
    assert [s[0] for s in segments] == [0, 0, 1]  # conv and SSM head in K rows, the SSM tail in V rows
    gen = torch.Generator().manual_seed(1)
    a, b = runner._gdn_slot_free_list.pop(), runner._gdn_slot_free_list.pop()
    states = caches["gdn.0.0"]
    for s in states:
        _random_bits(s, gen)
    sent = [s[a + 1].clone() for s in states]  # one GDN group: index base slot + 1
    runner._gdn_copy_states([(a, [2])], to_pages=True)
    runner._gdn_zero_slot(a)
    runner._gdn_copy_states([(b, [2])], to_pages=False)
    back = [s[b + 1] for s in states]
    assert all(torch.equal(x.view(torch.uint8), y.view(torch.uint8)) for x, y in zip(back, sent, strict=True))
