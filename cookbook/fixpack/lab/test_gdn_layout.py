"""The gdn-prefix-cache design on the release's real code (fixes/gdn-prefix-cache/README.md): the KV cache
groups and tensors vLLM builds for the Qwen3.5-27B geometry, a GDN checkpoint in its block's attention
page, the block arithmetic, and the request lifecycle driven through the release's own GDN ops on CPU.
Not a fix module: it holds the design to the release's math, on either tree."""

import types

import pytest
import torch
from _gdn_ckpt import (
    KERNEL_BLOCK,
    Pool,
    TinyGDN,
    block_aligned_chunks,
    block_rows,
    checkpoint_index,
    hybrid_block_tokens,
    hybrid_caches,
    load_checkpoint,
    page_segments,
    recipe_model,
    restore_index,
    store_checkpoint,
)

MODEL = recipe_model()
GEO = MODEL["geometry"]
GDN = GEO["gdn"]
BLOCK = 896


def _gdn_shapes():
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator
    return MambaStateShapeCalculator.gated_delta_net_state_shape(1, GDN["key_heads"], GDN["value_heads"],
                                                                 GDN["key_head_dim"], GDN["value_head_dim"],
                                                                 GDN["conv_kernel"])


def _dtype(nbytes):
    return {2: torch.bfloat16, 4: torch.float32}[nbytes]


def _state_dtypes():
    return (_dtype(GDN["conv_dtype_bytes"]), _dtype(GDN["ssm_dtype_bytes"]))


def _attn_spec(block_size):
    from vllm.v1.kv_cache_interface import FullAttentionSpec
    return FullAttentionSpec(block_size=block_size, num_kv_heads=GEO["kv_heads"], head_size=GEO["head_dim"],
                             dtype=_dtype(GEO["kv_cache_dtype_bytes"]))


def _state_bytes():
    from vllm.v1.kv_cache_interface import MambaSpec
    return MambaSpec(shapes=_gdn_shapes(), dtypes=_state_dtypes(), block_size=BLOCK).page_size_bytes


@pytest.fixture(scope="module")
def groups_27b():
    """vLLM's own page unification and grouping for the 27B layer pattern (3 GDN layers, then one
    attention layer, 16 times), the Mamba page padded to whole 128-token attention pages as the
    Gaudi platform pads it."""
    from vllm.v1.core import kv_cache_utils
    from vllm.v1.kv_cache_interface import MambaSpec

    attn_page_128 = _attn_spec(KERNEL_BLOCK).page_size_bytes
    padded = -(-_state_bytes() // attn_page_128) * attn_page_128
    specs = {}
    for i in range(GEO["layers"]):
        if i % 4 == 3:
            specs[f"model.layers.{i}.self_attn.attn"] = _attn_spec(KERNEL_BLOCK)
        else:
            specs[f"model.layers.{i}.linear_attn"] = MambaSpec(shapes=_gdn_shapes(), dtypes=_state_dtypes(),
                                                               block_size=BLOCK, page_size_padded=padded,
                                                               mamba_type="gdn_attention", mamba_cache_mode="align")
    groups = kv_cache_utils._get_kv_cache_groups_uniform_page_size(kv_cache_utils.unify_kv_cache_spec_page_size(specs))
    cfg = types.SimpleNamespace(cache_config=types.SimpleNamespace(num_gpu_blocks_override=None),
                                kv_transfer_config=None)
    return kv_cache_utils.get_kv_cache_config_from_groups(cfg, groups, 40 << 30)


def test_vllm_gives_the_27b_three_gdn_groups_and_an_896_token_attention_group_sharing_16_tensors(groups_27b):
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec

    kinds = [type(g.kv_cache_spec) for g in groups_27b.kv_cache_groups]
    # GDN groups first: layer 0 is a GDN layer. The stock compact allocation depends on this order.
    assert kinds == [MambaSpec, MambaSpec, MambaSpec, FullAttentionSpec]
    assert groups_27b.kv_cache_groups[3].kv_cache_spec.block_size == BLOCK == MODEL["hybrid_kv_block"]
    assert len(groups_27b.kv_cache_tensors) == GEO["attention_layers"] == 16
    for t in groups_27b.kv_cache_tensors:
        # Each tensor: one layer of each GDN group and exactly one attention layer, so GDN layer (g, t)
        # has exactly one attention page per block id to hold its checkpoint.
        assert len(t.shared_by) == 4 and sum(n.endswith("self_attn.attn") for n in t.shared_by) == 1


def test_a_27b_gdn_state_fits_the_attention_page_of_its_896_token_block_and_not_of_768():
    state = _state_bytes()
    assert state == 3_207_168
    per_token = _attn_spec(1).page_size_bytes
    assert hybrid_block_tokens(state, per_token) == BLOCK
    assert _attn_spec(BLOCK).page_size_bytes == 3_670_016
    from vllm_gaudi.attention.ops.hpu_paged_attn import HPUPagedAttention
    rows, kv_heads, head = HPUPagedAttention.get_kv_cache_shape(BLOCK // KERNEL_BLOCK, KERNEL_BLOCK,
                                                                GEO["kv_heads"], GEO["head_dim"])
    half = BLOCK * kv_heads * head * GEO["kv_cache_dtype_bytes"]  # one block's K rows (and V rows) in bytes
    assert rows == BLOCK and 2 * half == _attn_spec(BLOCK).page_size_bytes
    conv, ssm = 3 * 10240 * 2, 48 * 128 * 128 * 4
    assert page_segments([conv, ssm], half) == page_segments([conv, ssm], 1_835_008)
    segs = page_segments([conv, ssm], half)
    assert [(s.half, s.offset, s.nbytes, s.state, s.state_offset) for s in segs] == [
        ("k", 0, 61_440, 0, 0),
        ("k", 61_440, 1_773_568, 1, 0),
        ("v", 0, 1_372_160, 1, 1_773_568),
    ]
    with pytest.raises(ValueError, match="does not fit"):
        page_segments([conv, ssm], 768 * kv_heads * head * 2)


def test_checkpoints_live_in_the_attention_caches_the_pool_already_allocates(groups_27b):
    """The hybrid set-up allocates each attention layer's K and V for every block id of the pool (the
    HPU shape, plus one pad kernel block); checkpoints use the rows of block ids the GDN groups own, so
    they add no byte to the pool and take no block from attention beyond the blocks vLLM already counts."""
    from vllm_gaudi.attention.ops.hpu_paged_attn import HPUPagedAttention
    num_blocks = groups_27b.num_blocks
    kernel_blocks = num_blocks * BLOCK // KERNEL_BLOCK
    shape = HPUPagedAttention.get_kv_cache_shape(kernel_blocks + 1, KERNEL_BLOCK, GEO["kv_heads"], GEO["head_dim"])
    kv_bytes = 2 * shape[0] * shape[1] * shape[2] * GEO["kv_cache_dtype_bytes"]
    pad = 2 * KERNEL_BLOCK * GEO["kv_heads"] * GEO["head_dim"] * GEO["kv_cache_dtype_bytes"]
    assert kv_bytes - pad == groups_27b.kv_cache_tensors[0].size
    # One cached boundary costs one block per GDN group (3), holding all 48 layers' states.
    assert len(groups_27b.kv_cache_groups) - 1 == GEO["gdn_layers"] // GEO["attention_layers"] == 3
    last = block_rows(num_blocks - 1, BLOCK)
    assert last.stop <= shape[0] - KERNEL_BLOCK  # the last block's rows stop before the pad block


def test_a_real_size_checkpoint_round_trips_bit_exact_and_leaves_the_neighbour_blocks_alone():
    gen = torch.Generator().manual_seed(3)
    k = torch.randn(3 * BLOCK, GEO["kv_heads"], GEO["head_dim"], generator=gen).to(torch.bfloat16)
    v = torch.randn(3 * BLOCK, GEO["kv_heads"], GEO["head_dim"], generator=gen).to(torch.bfloat16)
    k0, v0 = k.clone(), v.clone()
    conv_shape, ssm_shape = _gdn_shapes()
    conv = torch.randn(conv_shape, generator=gen).to(torch.bfloat16)
    ssm = torch.randn(ssm_shape, generator=gen)
    rows = block_rows(1, BLOCK)
    store_checkpoint([conv, ssm], k[rows], v[rows])
    back = [torch.full_like(conv, 7), torch.full_like(ssm, 7)]
    load_checkpoint(back, k[rows], v[rows])
    assert torch.equal(back[0], conv) and torch.equal(back[1], ssm)
    for other in (block_rows(0, BLOCK), block_rows(2, BLOCK)):
        assert torch.equal(k[other], k0[other]) and torch.equal(v[other], v0[other])


@pytest.mark.parametrize("done, expected", [(0, None), (895, None), (896, 0), (1792, 1), (2000, None), (8 * 896, 7)])
def test_a_chunk_ending_on_a_block_boundary_checkpoints_that_block(done, expected):
    assert checkpoint_index(done, BLOCK) == expected


@pytest.mark.parametrize("cached, expected", [(0, None), (896, 0), (3 * 896, 2)])
def test_a_hit_restores_the_checkpoint_of_its_last_cached_block(cached, expected):
    assert restore_index(cached, BLOCK) == expected


def test_a_hit_that_is_not_a_whole_number_of_blocks_is_refused():
    with pytest.raises(ValueError, match="not a multiple"):
        restore_index(1000, BLOCK)


@pytest.mark.parametrize("start, end, budget, chunks", [
    (0, 4000, 1792, [(0, 1792), (1792, 3584), (3584, 4000)]),
    (896, 4000, 1792, [(896, 2688), (2688, 4000)]),
    (0, 1000, 1792, [(0, 1000)]),
    (0, 2000, 1000, [(0, 896), (896, 1792), (1792, 2000)]),
])
def test_prefill_chunks_end_on_block_boundaries_until_the_prompt_ends(start, end, budget, chunks):
    got = block_aligned_chunks(start, end, budget, BLOCK)
    assert got == chunks
    assert all(stop % BLOCK == 0 for _, stop in got[:-1])


# ---- the lifecycle through the release's GDN ops -------------------------------------------------------

LAYER = TinyGDN()
PROMPT = 3 * BLOCK + 100
ATTN_BLOCKS = [1, 2, 3, 4]       # the attention group's block ids for the shared prompt
GDN_BLOCKS_A = [5, 6, 7, 8]      # GDN group block table of the cold request
GDN_BLOCKS_HIT = [0, 6, 9, 10]   # a hit on 2 blocks: the GDN group reuses A's block 6 (vLLM nulls 0)


def _pool(design: bool) -> Pool:
    return Pool(LAYER, num_blocks=12, block_tokens=BLOCK, kv_heads=1, head_size=8, slots=3, design=design)


def _scenario(design: bool, cached_blocks: int = 2):
    """Cold request A, then B (another prompt) dirties the slot A left, then C shares A's first blocks."""
    pool = _pool(design)
    gen = torch.Generator().manual_seed(11)
    for b in ATTN_BLOCKS:  # attention KV of A's prompt, which checkpoints must not touch
        pool.k[block_rows(b, BLOCK)] = torch.randn(BLOCK, 1, 8, generator=gen).to(torch.bfloat16)
    attn_before = pool.k.clone()
    prompt = LAYER.tokens(PROMPT, seed=1)
    pool.assign("A")
    cold = pool.run("A", prompt, GDN_BLOCKS_A, 0, BLOCK)
    cold_state = [s.clone() for s in pool.slot_states(pool.slot_of["A"])]
    pool.finish("A")
    pool.assign("B")
    pool.run("B", LAYER.tokens(BLOCK + 50, seed=2), [9, 10], 0, BLOCK)
    pool.finish("B")
    pool.assign("C")
    blocks = GDN_BLOCKS_HIT if cached_blocks == 2 else [5, 9, 10, 11]
    hit = pool.run("C", prompt, blocks, cached_blocks * BLOCK, BLOCK)
    hit_state = pool.slot_states(pool.slot_of["C"])
    attn_kept = all(torch.equal(pool.k[block_rows(b, BLOCK)], attn_before[block_rows(b, BLOCK)]) for b in ATTN_BLOCKS)
    return cold[cached_blocks * BLOCK:], cold_state, hit, hit_state, attn_kept


@pytest.mark.parametrize("cached_blocks", [1, 2])
def test_a_hit_restored_from_its_checkpoint_equals_the_cold_run_bit_for_bit(cached_blocks):
    cold, cold_state, hit, hit_state, attn_kept = _scenario(design=True, cached_blocks=cached_blocks)
    assert torch.equal(hit, cold)
    assert all(torch.equal(a, b) for a, b in zip(hit_state, cold_state, strict=True))
    assert attn_kept


def test_the_stock_lifecycle_resumes_a_hit_from_the_last_owner_of_the_slot():
    """Stock compact mode: no restore, no zeroing; has_initial_states is num_computed_tokens > 0, so the
    hit reads the state request B left in the slot."""
    cold, cold_state, hit, hit_state, _ = _scenario(design=False)
    assert (hit.float() - cold.float()).abs().max() > 1e-2
    assert not torch.equal(hit_state[1], cold_state[1])


def test_a_slot_reused_after_a_finished_request_starts_from_zeros():
    pool = _pool(design=True)
    slot = pool.assign("A")
    pool.run("A", LAYER.tokens(BLOCK, seed=4), [5], 0, BLOCK)
    assert any(s.abs().sum() > 0 for s in pool.slot_states(slot))
    pool.finish("A")
    assert pool.assign("B") == slot
    assert all(torch.count_nonzero(s) == 0 for s in pool.slot_states(slot))


def test_a_checkpoint_written_under_one_chunk_budget_serves_a_hit_under_another():
    """The delta rule runs in 128-token chunks whatever the prefill chunk, so a hit restored from a
    checkpoint written with 896-token chunks agrees with a cold run in 1792-token chunks (bit for bit
    on this CPU; the tolerance leaves room for another BLAS's blocking)."""
    pool = _pool(design=True)
    prompt = LAYER.tokens(PROMPT, seed=1)
    pool.assign("A")
    cold = pool.run("A", prompt, GDN_BLOCKS_A, 0, 2 * BLOCK)
    pool.finish("A")
    other = _pool(design=True)
    other.assign("W")
    other.run("W", prompt, GDN_BLOCKS_A, 0, BLOCK)  # writes checkpoints at every block
    other.finish("W")
    other.assign("C")
    hit = other.run("C", prompt, GDN_BLOCKS_HIT, 2 * BLOCK, 2 * BLOCK)
    torch.testing.assert_close(hit.float(), cold[2 * BLOCK:].float(), rtol=2e-2, atol=2e-2)


def test_in_vllms_group_order_the_set_up_gives_the_attention_layer_its_own_kv_for_every_block_id():
    """The release's own initialize_kv_cache (hybrid cache, compact GDN), GDN group first as vLLM lists it
    for Qwen3.5: the attention layer's K and V cover every block id (checkpoint pages included) and the GDN
    layer gets max_reqs * groups + 2 compact slots. With the attention group listed first, the stock
    set-up binds the attention layer to the GDN slots instead (fixes/gdn-prefix-cache/README.md, item 3): the fix
    must not depend on the order, and its own lab module tests both."""
    runner, caches = hybrid_caches(gdn_first=True, max_reqs=3, num_blocks=4)
    k, v, *_ = caches["attn.0"]
    assert k.shape == v.shape == ((4 * BLOCK // 128 + 1) * 128, 1, 8)
    conv, ssm = caches["gdn.0.0"]
    assert conv.shape[0] == ssm.shape[0] == 3 * 1 + 2
    assert runner._gdn_slot_free_list == [2, 1, 0]
