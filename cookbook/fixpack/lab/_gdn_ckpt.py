"""The gdn-prefix-cache design, as lab helpers: the page layout of a GDN state checkpoint inside an
attention page, the block arithmetic, and one Gated DeltaNet layer's prefill driven through the
release's own ops (`vllm_gaudi.ops.hpu_gdn_pytorch`, `vllm_gaudi.ops.causal_conv1d_pytorch`) exactly
as `HPUGatedDeltaNetAttention.forward` calls them for one prompt chunk. The design is in
fixes/gdn-prefix-cache/README.md; cookbook/fixpack/lab/test_gdn_layout.py holds it to the real math.

Layout (one KV tensor of the hybrid cache is shared by one attention layer and one GDN layer of each
GDN group; a block id belongs to one group at a time). The checkpoint of GDN layer (g, t) at a block
boundary lives in the rows of attention layer t's K and V caches that the GDN group's block id
addresses: block b is rows [b*B, (b+1)*B) of the HPU cache shape (rows, kv_heads, head_size). The
state's bytes (conv state, then SSM state, the MambaSpec order) are one stream: the K rows take its
head, the V rows the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

REPO = Path(__file__).resolve().parents[3]
RECIPE = REPO / "recipes" / "Qwen" / "Qwen3.5-27B-FP8" / "recipe.yaml"
KERNEL_BLOCK = 128  # the HPU paged-attention kernel block (platform.py's Gaudi default block size)
BLOCK_TOKENS = 896  # the hybrid KV block of Qwen3.5-27B with prefix caching (7 kernel blocks)


def recipe_model(path: Path = RECIPE) -> dict:
    """The recipe's `model` section: its geometry (config.json's text_config) and hybrid KV block."""
    return yaml.safe_load(path.read_text())["model"]


# ---- block arithmetic -----------------------------------------------------------------------------

def hybrid_block_tokens(state_bytes: int, attn_bytes_per_token: int, kernel_block: int = KERNEL_BLOCK) -> int:
    """Smallest whole number of kernel blocks whose attention page holds one GDN layer's state."""
    return math.ceil(math.ceil(state_bytes / attn_bytes_per_token) / kernel_block) * kernel_block


def block_rows(block_id: int, block_tokens: int) -> slice:
    """Rows of a HPU attention cache, shape (rows, kv_heads, head_size), that block `block_id` owns:
    vLLM maps a KV-manager block to kernel blocks block_id * k + j, j < k, and kernel block c is rows
    [c*128, (c+1)*128), so the hybrid block is one contiguous run of rows."""
    return slice(block_id * block_tokens, (block_id + 1) * block_tokens)


def checkpoint_index(num_computed_after: int, block_tokens: int) -> int | None:
    """Index (in the request's block table) of the block whose checkpoint a prefill chunk ending at
    `num_computed_after` writes; None when the chunk does not end on a block boundary."""
    if num_computed_after <= 0 or num_computed_after % block_tokens:
        return None
    return num_computed_after // block_tokens - 1


def restore_index(num_cached_tokens: int, block_tokens: int) -> int | None:
    """Index of the block whose checkpoint a hit of `num_cached_tokens` restores (None: no hit)."""
    if num_cached_tokens == 0:
        return None
    if num_cached_tokens % block_tokens:
        raise ValueError(f"a hit of {num_cached_tokens} tokens is not a multiple of the {block_tokens}-token block")
    return num_cached_tokens // block_tokens - 1


def block_aligned_chunks(start: int, end: int, budget_tokens: int, block_tokens: int) -> list[tuple[int, int]]:
    """Prefill chunks from `start` to `end`: each at most `budget_tokens`, and every chunk but the one
    reaching the prompt's end ends on a block boundary (vLLM's "align" split)."""
    if budget_tokens < block_tokens:
        raise ValueError("the token budget must hold at least one block")
    chunks, pos = [], start
    while pos < end:
        stop = min(pos + budget_tokens, end)
        if stop < end:
            stop = stop // block_tokens * block_tokens
        chunks.append((pos, stop))
        pos = stop
    return chunks


# ---- page layout ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Segment:
    half: str      # "k" or "v": which cache of the attention layer
    offset: int    # byte offset inside the block's rows of that cache
    nbytes: int
    state: int     # index of the state tensor (0 = conv, 1 = ssm)
    state_offset: int  # byte offset inside that state tensor


def page_segments(state_nbytes: list[int], half_bytes: int) -> list[Segment]:
    """Where each state's bytes go: one stream, K rows first, then V rows. Raises when it does not fit."""
    total = sum(state_nbytes)
    if total > 2 * half_bytes:
        raise ValueError(f"a GDN state of {total} B does not fit an attention page of {2 * half_bytes} B")
    segments, pos = [], 0
    for i, n in enumerate(state_nbytes):
        done = 0
        while done < n:
            half, off = ("k", pos) if pos < half_bytes else ("v", pos - half_bytes)
            room = half_bytes - off
            take = min(room, n - done)
            segments.append(Segment(half, off, take, i, done))
            pos += take
            done += take
    return segments


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.uint8)


def store_checkpoint(states: list[torch.Tensor], k_rows: torch.Tensor, v_rows: torch.Tensor) -> None:
    """Copy one GDN layer's state (one slot of each state tensor) into a block's K and V rows."""
    halves = {"k": _bytes(k_rows), "v": _bytes(v_rows)}
    srcs = [_bytes(s.contiguous()) for s in states]
    for seg in page_segments([s.numel() for s in srcs], halves["k"].numel()):
        halves[seg.half][seg.offset:seg.offset + seg.nbytes] = srcs[seg.state][seg.state_offset:seg.state_offset +
                                                                               seg.nbytes]


def load_checkpoint(states: list[torch.Tensor], k_rows: torch.Tensor, v_rows: torch.Tensor) -> None:
    """The inverse of store_checkpoint: a block's K and V rows back into one slot of each state tensor."""
    halves = {"k": _bytes(k_rows), "v": _bytes(v_rows)}
    dsts = [_bytes(s) for s in states]
    for seg in page_segments([d.numel() for d in dsts], halves["k"].numel()):
        dsts[seg.state][seg.state_offset:seg.state_offset + seg.nbytes] = halves[seg.half][seg.offset:seg.offset +
                                                                                          seg.nbytes]


# ---- one GDN layer through the release's ops ---------------------------------------------------------

@dataclass
class TinyGDN:
    """The recurrent core of one Gated DeltaNet layer (what carries state between chunks). The token-local
    projections around it (in_proj, norm, out_proj) do not touch the state and are left out."""
    key_heads: int = 2
    value_heads: int = 4
    head_k: int = 16
    head_v: int = 16
    conv_kernel: int = 4
    chunk: int = 128  # HPUGatedDeltaNetAttention's default mamba_chunk_size
    seed: int = 0

    def __post_init__(self):
        gen = torch.Generator().manual_seed(self.seed)
        self.conv_dim = 2 * self.key_heads * self.head_k + self.value_heads * self.head_v
        self.conv_weight = (torch.randn(self.conv_dim, self.conv_kernel, generator=gen) * 0.5).to(torch.bfloat16)
        self.conv_bias = (torch.randn(self.conv_dim, generator=gen) * 0.1).to(torch.bfloat16)
        # Slow decays (A from 1e-3 to 1e-1 per token): the state remembers thousands of tokens, as the
        # long-context heads of the real model do, so a wrong initial state shows in the outputs.
        self.A_log = (torch.rand(self.value_heads, generator=gen) * -4.6 - 2.3)
        self.dt_bias = torch.randn(self.value_heads, generator=gen) * 0.1

    def state_shapes(self) -> list[tuple[int, ...]]:
        """vLLM's per-slot shapes: conv (state_len, dim) in the SD layout the HPU conv op indexes, SSM
        (value heads, head_v, head_k)."""
        return [(self.conv_kernel - 1, self.conv_dim), (self.value_heads, self.head_v, self.head_k)]

    def new_states(self, slots: int) -> list[torch.Tensor]:
        """Compact state tensors: bf16 conv, float32 SSM (Qwen3.5's mamba_ssm_dtype)."""
        conv, ssm = self.state_shapes()
        return [torch.zeros(slots, *conv, dtype=torch.bfloat16), torch.zeros(slots, *ssm, dtype=torch.float32)]

    def tokens(self, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-token inputs of the layer (mixed_qkv, a, b) for a prompt; the same seed, the same prompt."""
        gen = torch.Generator().manual_seed(seed)
        mixed = torch.randn(n, self.conv_dim, generator=gen).to(torch.bfloat16)
        a = torch.randn(n, self.value_heads, generator=gen).to(torch.bfloat16)
        b = torch.randn(n, self.value_heads, generator=gen).to(torch.bfloat16)
        return mixed, a, b

    def prefill(self, states: list[torch.Tensor], slot: int, inputs, has_initial_state: bool) -> torch.Tensor:
        """One prompt chunk of one request, batch of one, as HPUGatedDeltaNetAttention.forward's prefill
        branch runs it: gating, causal conv (reads and writes the conv slot), the chunked delta rule
        from the masked slot state, the final state saved into the slot."""
        from vllm_gaudi.ops.causal_conv1d_pytorch import hpu_causal_conv1d_fn
        from vllm_gaudi.ops.hpu_gdn_pytorch import hpu_chunk_gated_delta_rule, hpu_fused_gdn_gating

        conv_state, ssm_state = states
        mixed, a, b = inputs
        n = mixed.shape[0]
        idx = torch.tensor([slot], dtype=torch.int32)
        his = torch.tensor([has_initial_state])
        g, beta = hpu_fused_gdn_gating(self.A_log, a, b, self.dt_bias)
        x = hpu_causal_conv1d_fn(x=mixed.transpose(0, 1), weight=self.conv_weight, bias=self.conv_bias,
                                 activation="silu", conv_states=conv_state, has_initial_state=his,
                                 cache_indices=idx, query_start_loc=torch.tensor([0, n], dtype=torch.int32),
                                 is_prompt=True).transpose(0, 1)
        kd, vd = self.key_heads * self.head_k, self.value_heads * self.head_v
        q, k, v = torch.split(x, [kd, kd, vd], dim=-1)
        q = q.reshape(1, n, self.key_heads, self.head_k).contiguous()
        k = k.reshape(1, n, self.key_heads, self.head_k).contiguous()
        v = v.reshape(1, n, self.value_heads, self.head_v).contiguous()
        init = ssm_state[idx.long()].contiguous() * his.view(-1, 1, 1, 1).to(ssm_state.dtype)
        out, final = hpu_chunk_gated_delta_rule(q=q, k=k, v=v, g=g, beta=beta, initial_state=init,
                                                output_final_state=True, use_qk_l2norm_in_kernel=True,
                                                chunk_size=self.chunk, prefill_num_seqs=1, prefill_seq_len=n)
        ssm_state.index_copy_(0, idx.long(), final.to(ssm_state.dtype))
        return out.squeeze(0)


# ---- the request lifecycle: stock versus the design --------------------------------------------------

class Pool:
    """One attention layer's HPU K and V caches (the KV pool as the hybrid set-up allocates it) and the
    compact GDN slots of one GDN layer sharing its KV tensor."""

    def __init__(self, layer: TinyGDN, num_blocks: int, block_tokens: int, kv_heads: int, head_size: int,
                 slots: int, design: bool):
        rows = (num_blocks + 1) * block_tokens
        self.k = torch.zeros(rows, kv_heads, head_size, dtype=torch.bfloat16)
        self.v = torch.zeros(rows, kv_heads, head_size, dtype=torch.bfloat16)
        self.layer, self.block_tokens, self.design = layer, block_tokens, design
        self.states = layer.new_states(slots + 2)
        self.free = list(range(slots - 1, -1, -1))  # the runner's stack of free base slots
        self.slot_of: dict[str, int] = {}

    def slot_states(self, slot: int) -> list[torch.Tensor]:
        return [s[slot] for s in self.states]

    def assign(self, req: str) -> int:
        """A new request takes a free slot; the design zeroes it (stock leaves the last owner's state)."""
        slot = self.free.pop()
        self.slot_of[req] = slot
        if self.design:
            for s in self.slot_states(slot):
                s.zero_()
        return slot

    def finish(self, req: str) -> None:
        self.free.append(self.slot_of.pop(req))

    def run(self, req: str, inputs, block_ids: list[int], num_cached: int, budget_tokens: int) -> torch.Tensor:
        """Prefill the request's prompt from `num_cached` (a prefix-cache hit) in block-aligned chunks;
        returns the outputs of the tokens it computed. `block_ids` is the GDN group's block table."""
        slot = self.slot_of[req]
        if self.design and (k := restore_index(num_cached, self.block_tokens)) is not None:
            rows = block_rows(block_ids[k], self.block_tokens)
            load_checkpoint(self.slot_states(slot), self.k[rows], self.v[rows])
        outs = []
        n = inputs[0].shape[0]
        for start, stop in block_aligned_chunks(num_cached, n, budget_tokens, self.block_tokens):
            chunk = tuple(t[start:stop] for t in inputs)
            outs.append(self.layer.prefill(self.states, slot, chunk, has_initial_state=start > 0))
            if self.design and (k := checkpoint_index(stop, self.block_tokens)) is not None:
                rows = block_rows(block_ids[k], self.block_tokens)
                store_checkpoint(self.slot_states(slot), self.k[rows], self.v[rows])
        return torch.cat(outs)


# ---- the runner's hybrid cache set-up, driven on CPU -----------------------------------------------

def hybrid_caches(gdn_first: bool, max_reqs: int = 3, num_blocks: int = 4, block_tokens: int = BLOCK_TOKENS,
                  layer: TinyGDN | None = None, gdn_groups: int = 1, tensors: int = 1, prefix_caching: bool = False,
                  kv_heads: int = 1, head_size: int = 8, prefix_match_unit: int | None = None):
    """Run the tree's real `HPUModelRunner.initialize_kv_cache` (hybrid cache, compact GDN) for
    `tensors` KV tensors, each shared by one GDN layer of each of `gdn_groups` GDN groups
    (`gdn.<g>.<t>`) and one attention layer (`attn.<t>`), the GDN groups listed first (vLLM's order
    for Qwen3.5) or after the attention group. Only the set-up around the allocation stands in (no
    model, no attention groups, no input batch). Returns the runner and the caches each layer was
    bound to."""
    import types

    import vllm_gaudi.v1.worker.hpu_model_runner as hmr
    from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, KVCacheTensor, MambaSpec
    from vllm_gaudi.attention.backends.hpu_attn import HPUAttentionBackend

    attn = FullAttentionSpec(block_size=block_tokens, num_kv_heads=kv_heads, head_size=head_size,
                             dtype=torch.bfloat16)
    shapes = tuple(layer.state_shapes()) if layer else ((3, 16), (2, 4, 4))
    gdn = MambaSpec(shapes=shapes, dtypes=(torch.bfloat16, torch.float32), block_size=block_tokens,
                    page_size_padded=attn.page_size_bytes, mamba_type=MambaAttentionBackendEnum.GDN_ATTN,
                    mamba_cache_mode="align")
    groups = [KVCacheGroupSpec([f"gdn.{g}.{t}" for t in range(tensors)], gdn) for g in range(gdn_groups)]
    attn_group = KVCacheGroupSpec([f"attn.{t}" for t in range(tensors)], attn)
    groups = groups + [attn_group] if gdn_first else [attn_group] + groups
    config = KVCacheConfig(num_blocks=num_blocks, kv_cache_groups=groups,
                           kv_cache_tensors=[KVCacheTensor(size=attn.page_size_bytes * num_blocks,
                                                           shared_by=[g.layer_names[t] for g in groups])
                                             for t in range(tensors)])
    runner = object.__new__(hmr.HPUModelRunner)
    bound: dict = {}
    noop = lambda *a, **k: None  # noqa: E731
    runner.__dict__.update(
        _compact_gdn_group_ids=set(), _compact_gdn_group_offset={}, _compact_gdn_enabled=True,
        _num_gdn_groups=0, _gdn_slot_free_list=[], _gdn_req_to_base_slot={}, _original_max_num_seqs=max_reqs,
        _gdn_checkpoints={}, gdn_unbacked_hits=0,
        mamba_chunk_size=KERNEL_BLOCK, max_num_tokens=2 * block_tokens,  # the recipe's 2-block chunks
        num_mamba_like_layers=gdn_groups * tensors, num_gdn=gdn_groups * tensors, use_hybrid_cache=True,
        use_naive_mamba_cache_sharing=False, use_prefix_caching=prefix_caching,
        attn_backend=HPUAttentionBackend, device="cpu", attn_groups=[], model=None, kv_caches=[],
        shared_kv_cache_layers={}, runner_only_attn_layers=set(), enable_bucketing=False,
        attn_block_size=KERNEL_BLOCK, block_size=KERNEL_BLOCK, is_encoder_only_attn=False,
        maybe_add_kv_sharing_layers_to_kv_cache_groups=noop, may_add_encoder_only_layers_to_kv_cache_config=noop,
        initialize_attn_backend=noop, may_reinitialize_input_batch=noop,
        vllm_config=types.SimpleNamespace(compilation_config=types.SimpleNamespace(static_forward_context={}),
                                          cache_config=types.SimpleNamespace(prefix_match_unit=prefix_match_unit)))
    kernel = [KERNEL_BLOCK if isinstance(g.kv_cache_spec, FullAttentionSpec) else g.kv_cache_spec.block_size
              for g in groups]
    saved = {n: getattr(hmr, n) for n in ("prepare_kernel_block_sizes", "maybe_set_mamba_kv_cache_groups_ids",
                                          "bind_kv_cache", "has_kv_transfer_group")}
    hmr.prepare_kernel_block_sizes = lambda *a, **k: kernel
    hmr.maybe_set_mamba_kv_cache_groups_ids = noop
    hmr.bind_kv_cache = lambda caches, *a, **k: bound.update(caches)
    hmr.has_kv_transfer_group = lambda: False
    try:
        runner.initialize_kv_cache(config)
    finally:
        for n, f in saved.items():
            setattr(hmr, n, f)
    return runner, bound
