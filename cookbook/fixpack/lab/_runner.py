"""One engine step of vllm-gaudi's runner on the CPU: the release's `sample_tokens` on a
MagicMock(spec=HPUModelRunner) with the release's methods bound to it (vllm-gaudi's own
tests/unit_tests/worker/test_hpu_mm_prefill_batching.py does the same), a real InputBatch of real
CachedRequestStates and SamplingParams, vLLM's real Sampler, and the release's
`_get_model_mm_inputs`, `_execute_model_generic` and `_get_prompt_logprobs_dict`.

Standing in, because only a Gaudi runs them:
- the model (`Model`): an embedding and an output projection; it returns hidden states in the
  shape of what it is given, as vLLM's models do (flattened first with `flatten`, as
  HpuModelAdapter does for flatten_input models);
- the multimodal encoder and its embeddings (text-only prompts: no image, an all-text mask);
- the input preparation (`_prepare_inputs`): all prompts in one right-padded prefill batch, the
  decodes in one decode batch; bucketing and attention metadata are not under test;
- the bookkeeping `_update_states` does between steps (computed tokens advance by what was
  scheduled), and the runner's `__init__`: the batch is made as it makes it (under async scheduling
  with the flag the fix adds; stock has none) and, with `hybrid`, made again by the release's own
  `may_reinitialize_input_batch` for two KV cache groups, as `initialize_kv_cache` does for every
  hybrid model.
"""

from types import SimpleNamespace
from unittest.mock import MagicMock

import torch

VOCAB, HIDDEN = 48, 16

BOUND = ("sample_tokens", "_ensure_decodes_first", "_is_prompt", "is_decoder_only", "_get_prompts_and_decodes",
         "_run_sampling", "_prepare_sampling", "_generate_req_id_output_token_ids_lst", "_build_logprobs_output",
         "_get_model_mm_inputs", "_execute_model_generic", "_get_prompt_logprobs_dict",
         "_gather_prompt_logprobs_hpu")


class Model:
    """Stands in for the HPU model adapter. With `fixed_logits`, every position's logits are that
    row (a model whose favourite tokens do not depend on the input)."""

    def __init__(self, flatten=False, fixed_logits=None):
        gen = torch.Generator().manual_seed(0)
        self.embedding = torch.randn(VOCAB, HIDDEN, generator=gen)
        self.head = torch.randn(HIDDEN, VOCAB, generator=gen)
        self.flatten = flatten
        self.fixed_logits = fixed_logits

    def embed_input_ids(self, input_ids, multimodal_embeddings=None, is_multimodal=None):
        return self.embedding[input_ids]

    def forward(self, input_ids, inputs_embeds=None, **kwargs):
        if inputs_embeds is not None:
            return inputs_embeds
        return self.embedding[input_ids.view(-1) if self.flatten else input_ids]

    def compute_logits(self, hidden_states):
        if self.fixed_logits is not None:
            return self.fixed_logits.expand(hidden_states.shape[0], -1).clone()
        return hidden_states @ self.head


class Runner:
    """The release's runner methods on a spec'd mock, with a real input batch."""

    def __init__(self, monkeypatch, model: Model, multimodal=False, async_scheduling=False, hybrid=False):
        from _step import CPU, point_h2d_at_cpu, spec_runner
        from vllm_gaudi.v1.worker.hpu_input_batch import InputBatch

        point_h2d_at_cpu(monkeypatch)
        self.batch = InputBatch(
            max_num_reqs=4, max_model_len=64, max_num_batched_tokens=64, device=CPU, pin_memory=False,
            vocab_size=VOCAB, block_sizes=[128], kernel_block_sizes=[128],
            logitsprocs=_builtin_logitsprocs(CPU), **({"async_scheduling": True} if async_scheduling else {}))
        bound = BOUND + (("may_reinitialize_input_batch",) if hybrid else ())
        runner = spec_runner(bound, self.batch, max_model_len=64, async_scheduling=async_scheduling)
        runner.model = self.model = model
        if async_scheduling:  # what the runner's __init__ sets up for async scheduling
            runner.async_output_copy_stream = torch.hpu.Stream()
        if hybrid:
            self.batch = _reinitialize_for_two_groups(runner)
        runner.model_has_chunked_attention = False
        runner.warmup_mode = False
        runner.supports_mm_inputs = multimodal
        runner.attn_backend_name = "HPUAttentionBackendV1"
        runner._configure_lora = lambda *a, **k: (None, None)
        runner._extract_mm_kwargs = lambda *a, **k: {}
        runner.get_finished_kv_transfers = lambda *a, **k: (set(), set())
        runner._gather_mm_embeddings = lambda scheduler_output, req_ids, total_num_scheduled_tokens, padded_seq_len: (
            [], torch.zeros(total_num_scheduled_tokens, dtype=torch.bool))
        runner._prepare_inputs = self._prepare_inputs
        self.runner = runner
        self.scheduled: dict[str, int] = {}

    def add(self, req_id: str, prompt: list[int], **params):
        from vllm import SamplingParams
        from vllm_gaudi.v1.worker.hpu_input_batch import CachedRequestState

        params.setdefault("temperature", 0.0)
        state = CachedRequestState(req_id=req_id, prompt_token_ids=prompt, mm_features=[],
                                   sampling_params=SamplingParams(**params), generator=None,
                                   block_ids=[[0] for _ in self.batch.block_table.block_tables],
                                   num_computed_tokens=0, output_token_ids=[])
        self.runner.requests[req_id] = state
        self.batch.add_request(state)
        self.batch.refresh_sampling_metadata()
        return state

    def run(self, scheduled: dict[str, int]):
        """One step; returns the ModelRunnerOutput (waited for under async scheduling)."""
        self.scheduled = scheduled
        self.runner.batch_changed = True
        self.runner.scheduler_output = SimpleNamespace(num_scheduled_tokens=dict(scheduled),
                                                       total_num_scheduled_tokens=sum(scheduled.values()),
                                                       scheduled_spec_decode_tokens={}, kv_connector_metadata=None)
        out = self.runner.sample_tokens(None)
        for req_id, n in scheduled.items():
            self.batch.num_computed_tokens_cpu[self.batch.req_id_to_index[req_id]] += n
        return out.get_output() if self.runner.use_async_scheduling else out

    def _prepare_inputs(self, scheduler_output, num_prefills, num_decodes, warmup=False):
        from vllm_gaudi.v1.worker.hpu_model_runner import DecodeInputData, PrefillInputData

        b = self.batch
        prefill = PrefillInputData()
        if num_prefills:
            req_ids = list(b.req_ids[num_decodes:num_decodes + num_prefills])
            prompts = [self.runner.requests[r].prompt_token_ids for r in req_ids]
            seq_len = max(len(p) for p in prompts)
            token_ids = torch.zeros((len(prompts), seq_len), dtype=torch.long)  # right-padded
            for row, prompt in enumerate(prompts):
                token_ids[row, :len(prompt)] = torch.tensor(prompt)
            last = torch.tensor([row * seq_len + len(p) - 1 for row, p in enumerate(prompts)])
            prefill = PrefillInputData(request_ids=[req_ids], prompt_lens=[None], token_ids=[token_ids],
                                       position_ids=[torch.arange(seq_len).expand_as(token_ids)],
                                       attn_metadata=[MagicMock(is_prompt=True)], logits_indices=[last],
                                       logits_requests=[req_ids])
        decode = None
        if num_decodes:
            decode = DecodeInputData(num_decodes=num_decodes,
                                     token_ids=torch.zeros((num_decodes, 1), dtype=torch.long),
                                     position_ids=torch.zeros((num_decodes, 1), dtype=torch.long),
                                     attn_metadata=MagicMock(is_prompt=False),
                                     logits_indices=torch.arange(num_decodes))
        return (prefill, None), (decode, None)


def _reinitialize_for_two_groups(runner):
    """The release's `may_reinitialize_input_batch` for a hybrid model's KV cache groups (an attention
    and a linear-attention group of 256-token blocks, kernel blocks of 128); returns the new batch."""
    group = SimpleNamespace(kv_cache_spec=SimpleNamespace(block_size=256))
    runner.cache_config = SimpleNamespace(block_size=128)
    runner.vllm_config.offload_config.uva.cpu_offload_gb = 0
    runner.max_num_reqs, runner.max_encoder_len, runner.max_num_tokens = 4, 0, 64
    runner.pin_memory = runner.is_pooling_model = False
    runner.model_config = SimpleNamespace(get_vocab_size=lambda: VOCAB)
    before = runner.input_batch
    runner.may_reinitialize_input_batch(SimpleNamespace(kv_cache_groups=[group, group]), [128, 128])
    assert runner.input_batch is not before and runner.input_batch.logitsprocs is before.logitsprocs
    return runner.input_batch


def _builtin_logitsprocs(device):
    from vllm.v1.sample.logits_processor import build_logitsprocs

    config = SimpleNamespace(speculative_config=None, scheduler_config=SimpleNamespace(max_num_seqs=4))
    return build_logitsprocs(config, device, False, False, ())
