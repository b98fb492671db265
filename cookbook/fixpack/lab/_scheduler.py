"""A real vLLM engine-core scheduler on the CPU, for lab tests that drive scheduling.

`hpu_async_scheduler` builds vllm-gaudi's `HPUAsyncScheduler` (the class the HPU platform picks under
async scheduling) from a real `VllmConfig`: a tiny Llama `config.json` written locally (no Hub), one
full-attention KV group, prefix caching on. vLLM inspects a model class in a subprocess, which would
not have the lab's `torch.hpu` stub; registering the real Llama class in-process keeps the
inspection here. `step_output` is the worker's side of one step: one sampled token per request.
"""

from __future__ import annotations

from pathlib import Path

import torch

PROMPT_BLOCK = 16


def tiny_model_dir(path: Path) -> Path:
    from transformers import LlamaConfig

    LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048,
                architectures=["LlamaForCausalLM"]).save_pretrained(path)
    return path


def hpu_async_scheduler(model_dir: Path, *, max_num_batched_tokens: int = 1024, num_blocks: int = 64,
                        block_size: int = PROMPT_BLOCK):
    from vllm import ModelRegistry
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.model_executor.models.llama import LlamaForCausalLM
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager
    from vllm_gaudi.v1.core.sched.hpu_async_scheduler import HPUAsyncScheduler

    ModelRegistry.register_model("LlamaForCausalLM", LlamaForCausalLM)
    model = ModelConfig(model=str(model_dir), skip_tokenizer_init=True, max_model_len=1024)
    sched = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=max_num_batched_tokens, max_model_len=1024,
                            async_scheduling=True, is_encoder_decoder=False)
    cache = CacheConfig(block_size=block_size, enable_prefix_caching=True)
    cache.num_gpu_blocks = num_blocks
    config = VllmConfig(model_config=model, scheduler_config=sched, cache_config=cache,
                        device_config=DeviceConfig("cpu"))
    spec = FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=16, dtype=torch.bfloat16)
    kv = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                       kv_cache_groups=[KVCacheGroupSpec(["model.layers.0.self_attn.attn"], spec)])
    return HPUAsyncScheduler(vllm_config=config, kv_cache_config=kv,
                             structured_output_manager=StructuredOutputManager(config), block_size=block_size)


def request(req_id: str, prompt: list[int], max_tokens: int = 8, block_size: int = PROMPT_BLOCK):
    """vLLM's real Request, with the block hasher the engine gives it when prefix caching is on."""
    from vllm import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    init_none_hash(sha256)
    return Request(req_id, prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True), None,
                   block_hasher=get_request_block_hasher(block_size, sha256))


def step_output(scheduler_output, tokens: dict[str, int], sched=None):
    """The ModelRunnerOutput of one step: the given token for each scheduled request. With `sched`, a
    request whose prefill is still partial after the step samples nothing (the runner's row for it is
    discarded), as when the token budget chunks a prefill."""
    from vllm.v1.outputs import ModelRunnerOutput

    ids = list(scheduler_output.num_scheduled_tokens)

    def partial(r):
        return sched is not None and sched.requests[r].num_computed_tokens < sched.requests[r].num_tokens

    return ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                             sampled_token_ids=[[] if partial(r) else [tokens[r]] for r in ids])


def delivered(engine_outputs) -> dict[str, list[int]]:
    """{request id: new token ids} the engine core hands the front end for one step."""
    return {o.request_id: list(o.new_token_ids) for outs in engine_outputs.values() for o in outs.outputs}


def run_until_resumed(sched, tokens_from: int = 1000, max_steps: int = 200):
    """Step the engine (schedule, then the worker's tokens) until a preempted request is scheduled
    again; returns that step's SchedulerOutput, not yet executed."""
    for step in range(max_steps):
        out = sched.schedule()
        if out.scheduled_cached_reqs.resumed_req_ids:
            return out
        sched.update_from_output(out, step_output(out, {r: tokens_from + step for r in out.num_scheduled_tokens},
                                                  sched))
    raise AssertionError(f"no request was resumed within {max_steps} steps")
