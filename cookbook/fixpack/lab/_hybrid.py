"""vllm-gaudi's runner with a Qwen3.5-shaped hybrid KV cache laid out on the CPU.

`HybridRunner` runs the release's own `initialize_kv_cache` (the hybrid-cache branch, which GDN
models get by default) on a real `KVCacheConfig` of Qwen3.5-27B's geometry: one Gated DeltaNet group
ordered before one full-attention group (as vLLM orders them), sharing a KV tensor of `num_blocks`
896-token pages. One page holds 896 tokens of one attention layer's KV (4 KV heads x 256 x bf16, K
and V) = 3,670,016 B, which is also one GDN layer's state (48 x 128 x 128 fp32 SSM + conv state)
padded up. The HPU attention backend's kernel block is 128 tokens, so each KV block is split into
seven kernel blocks. Then the release's `_create_decode_input_data` lays out a decode batch for
requests added to the real `InputBatch`.

The runner is a `MagicMock(spec=HPUModelRunner)` with the release's methods bound onto it (the
pattern of vllm-gaudi's tests/unit_tests/worker/test_hpu_mm_prefill_batching.py). What stands in:
the model (no weights: the architecture check that relabels mamba groups is given none), the
attention-backend set-up (the attention group is built here with the real HPU backend class), the
KV-sharing and encoder-only hooks (this model has neither), and the decode bucket, which on a Gaudi
pads the batch to a warmed-up size: here it pads to `decode_bucket` rows.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from unittest.mock import MagicMock

import torch

HYBRID_BLOCK = 896  # tokens per KV-manager block (the hybrid page)
KERNEL_BLOCK = 128  # tokens per HPU attention kernel block
ATTN_LAYER = "language_model.model.layers.3.self_attn.attn"
GDN_LAYER = "language_model.model.layers.0.linear_attn"

BOUND = ("initialize_kv_cache", "may_reinitialize_input_batch", "_create_decode_input_data",
         "get_habana_paged_attn_buffers", "_resolve_block", "_resolve_all_blocks", "prepare_mamba_state_idxs",
         "_get_attention_group_id_for_hybrid")


def point_h2d_at_cpu(monkeypatch):
    """`async_h2d_copy` defaults to the "hpu" device; some of the runner's calls give none."""
    import vllm_gaudi.v1.worker.hpu_model_runner as hmr

    monkeypatch.setattr(hmr, "async_h2d_copy", functools.partial(hmr.async_h2d_copy, device="cpu"))


def qwen35_kv_cache_config(num_blocks: int):
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator
    from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, KVCacheTensor, MambaSpec

    attn = FullAttentionSpec(block_size=HYBRID_BLOCK, num_kv_heads=4, head_size=256, dtype=torch.bfloat16)
    shapes = MambaStateShapeCalculator.gated_delta_net_state_shape(tp_world_size=1, num_k_heads=16, num_v_heads=48,
                                                                     head_k_dim=128, head_v_dim=128,
                                                                     conv_kernel_size=4)
    gdn = MambaSpec(block_size=HYBRID_BLOCK, shapes=shapes, dtypes=(torch.bfloat16, torch.float32),
                    page_size_padded=attn.page_size_bytes, mamba_type=MambaAttentionBackendEnum.GDN_ATTN)
    assert attn.page_size_bytes == gdn.page_size_bytes == 3_670_016
    return KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[KVCacheTensor(size=num_blocks * attn.page_size_bytes, shared_by=[GDN_LAYER, ATTN_LAYER])],
        kv_cache_groups=[KVCacheGroupSpec([GDN_LAYER], gdn), KVCacheGroupSpec([ATTN_LAYER], attn)])


class HybridRunner:
    """The release's runner methods on a spec'd runner, its KV cache initialised for Qwen3.5."""

    def __init__(self, monkeypatch, num_blocks: int = 8, max_num_seqs: int = 4, decode_bucket: int = 4):
        from vllm.v1.worker.utils import AttentionGroup
        from vllm_gaudi.v1.attention.backends.hpu_attn import HPUAttentionBackendV1
        from vllm_gaudi.v1.worker.hpu_input_batch import InputBatch
        from vllm_gaudi.v1.worker.hpu_model_runner import HPUModelRunner

        point_h2d_at_cpu(monkeypatch)
        for var in ("VLLM_PROFILE_PROMPT", "VLLM_PROFILE_DECODE"):
            monkeypatch.delenv(var, raising=False)
        cpu = torch.device("cpu")
        r = MagicMock(spec=HPUModelRunner)
        for name in BOUND:
            setattr(r, name, getattr(HPUModelRunner, name).__get__(r))
        if hasattr(HPUModelRunner, "_gdn_checkpoint_backed"):  # gdn-prefix-cache's record: vLLM's hit search asks it
            r._gdn_checkpoint_backed = HPUModelRunner._gdn_checkpoint_backed.__get__(r)
        kv_config = qwen35_kv_cache_config(num_blocks)
        r.device, r.pin_memory = cpu, False
        r.model = SimpleNamespace(config=SimpleNamespace(architectures=[]))
        r.model_config = MagicMock(dtype=torch.bfloat16)
        r.model_config.get_vocab_size.return_value = 1024
        r.vllm_config = MagicMock(speculative_config=None)
        r.vllm_config.offload_config.uva.cpu_offload_gb = 0
        r.vllm_config.compilation_config.static_forward_context = {
            name: SimpleNamespace() for name in (GDN_LAYER, ATTN_LAYER)}
        r.cache_config = SimpleNamespace(block_size=HYBRID_BLOCK, mamba_block_size=HYBRID_BLOCK)
        r.max_num_reqs = r._original_max_num_seqs = max_num_seqs
        r.max_model_len, r.max_encoder_len, r.max_num_tokens = 8192, 0, 8192
        r.is_pooling_model = False
        r.input_batch = InputBatch(max_num_reqs=max_num_seqs, max_model_len=8192, max_num_batched_tokens=8192,
                                   device=cpu, pin_memory=False, vocab_size=1024, block_sizes=[HYBRID_BLOCK],
                                   kernel_block_sizes=[HYBRID_BLOCK])
        r.num_mamba_like_layers, r.num_gdn = 1, 1
        r.use_hybrid_cache, r.use_naive_mamba_cache_sharing, r._compact_gdn_enabled = True, False, True
        r._compact_gdn_group_ids, r._compact_gdn_group_offset = set(), {}
        r._gdn_slot_free_list, r._gdn_req_to_base_slot = [], {}
        r._gdn_checkpoints, r.gdn_unbacked_hits = {}, 0  # gdn-prefix-cache's record, when the tree has it
        r.attn_backend = HPUAttentionBackendV1
        attn_spec = kv_config.kv_cache_groups[1].kv_cache_spec
        r.attn_groups = [[], [AttentionGroup(HPUAttentionBackendV1, [ATTN_LAYER], attn_spec, 1)]]
        r.runner_only_attn_layers, r.shared_kv_cache_layers = set(), {}
        r.kv_caches = []
        r.enable_bucketing = False
        r.get_dp_padding = lambda n: 0
        r.bucketing_manager = MagicMock()
        r.bucketing_manager.find_decode_bucket.side_effect = lambda bs, blocks, *a: (max(bs, decode_bucket), 1, blocks)
        r.uses_mrope = r.interleaved_sliding_window = r.model_has_chunked_attention = False
        r.use_contiguous_pa = r.use_prefix_caching = r.use_async_scheduling = False
        r.defragmenter = None
        self.runner = r
        r.initialize_kv_cache(kv_config)

    @property
    def key_cache(self) -> torch.Tensor:
        return self.runner.kv_caches[-1][0]  # the attention layer's K cache (layer 3 binds last)

    def add_decode(self, req_id: str, gdn_block: int, attn_blocks: list[int], context_len: int) -> None:
        """A request decoding after `context_len` tokens, its attention KV in the given 896-token blocks
        (block ids are per group, from the one pool the groups share)."""
        from vllm.sampling_params import SamplingParams
        from vllm_gaudi.v1.worker.hpu_input_batch import CachedRequestState

        r = self.runner
        state = CachedRequestState(req_id=req_id, prompt_token_ids=[1] * context_len, mm_features=[],
                                   sampling_params=SamplingParams(), generator=None,
                                   block_ids=[[gdn_block], attn_blocks],
                                   num_computed_tokens=context_len, output_token_ids=[])
        r.input_batch.add_request(state)
        r._gdn_req_to_base_slot[req_id] = r._gdn_slot_free_list.pop()  # as _update_states allocates it

    def decode(self):
        """The release's decode input data for every request added, one token each."""
        r = self.runner
        n = r.input_batch.num_reqs
        context = r.input_batch.num_computed_tokens_cpu[:n]
        r.positions_cpu = torch.tensor(context, dtype=torch.int64)
        r.input_ids_cpu = torch.ones(n, dtype=torch.int32)
        table = r.input_batch.block_table[r._get_attention_group_id_for_hybrid()].get_cpu_tensor()
        return r._create_decode_input_data(n, [1] * n, context, table)
