"""One engine step of vllm-gaudi's runner on the CPU, for the batch-row and sampling fixes.

`Step` drives the release's own `HPUModelRunner.sample_tokens` (the reorder into decodes first,
the prompt/decode split, the sampling calls, the structured-output join, the post-processing) on
a real `InputBatch` filled with real `CachedRequestState`s and `SamplingParams`, sampled by vLLM's
real `Sampler`. The runner is a `MagicMock(spec=HPUModelRunner)` with the release's methods bound
onto it (vllm-gaudi's own tests/unit_tests/worker/test_hpu_mm_prefill_batching.py does the same).

What stands in, and why:
- the model: `_execute_model_generic` returns, for each logits row, the row the test gave for
  that row's request (a Gaudi forward pass cannot run here);
- the input preparation: `_prepare_inputs` lays out the prompts in batch order in prefill batches
  of `prefill_batch` prompts and one decode batch padded to `decode_bucket` rows, with the number
  of logits rows per prompt that the release's `_extract_prefill_batch_contents` gives (at least
  one with structured output); bucketing and attention metadata need the Gaudi bucketing manager
  and are not under test;
- the KV-connector and LoRA hooks, which these steps do not use.

The release's `_prepare_sampling` runs wrapped so that each sampler call's request ids and
`SamplingMetadata` are kept (`Step.sampled`); the stand-in model notes the requests of each forward
pass in the order they run (`Step.passes`).
"""

import functools
from dataclasses import dataclass, field
from unittest.mock import MagicMock

import numpy as np
import torch
import vllm_gaudi.v1.worker.hpu_input_batch as hpu_input_batch
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.output import GrammarOutput
from vllm.v1.sample.sampler import Sampler
from vllm_gaudi.v1.worker.hpu_input_batch import CachedRequestState, InputBatch
from vllm_gaudi.v1.worker.hpu_model_runner import DecodeInputData, HPUModelRunner, PrefillInputData

VOCAB = 64
CPU = torch.device("cpu")

# The release's methods a step runs, bound onto the spec'd runner.
REAL_METHODS = (
    "sample_tokens", "_ensure_decodes_first", "_is_prompt", "is_decoder_only",
    "_get_prompts_and_decodes", "_run_sampling", "_prepare_sampling",
    "_generate_req_id_output_token_ids_lst", "apply_grammar_bitmask", "_build_logprobs_output",
)


def point_h2d_at_cpu(monkeypatch):
    """`async_h2d_update` defaults to the "hpu" device; the input batch calls it without one."""
    monkeypatch.setattr(hpu_input_batch, "async_h2d_update",
                        functools.partial(hpu_input_batch.async_h2d_update, device="cpu"))


def drop_pinning(monkeypatch):
    """Page-locked host memory needs an accelerator's allocator, which a CPU-only torch lacks;
    `apply_grammar_bitmask` pins its row-index tensor. The copy is the same without it."""
    tensor = torch.tensor

    def unpinned(*args, pin_memory=False, **kwargs):
        return tensor(*args, **kwargs)

    monkeypatch.setattr(torch, "tensor", unpinned)


def spec_runner(methods, batch: InputBatch, max_model_len: int, async_scheduling: bool = False) -> MagicMock:
    """A spec'd HPUModelRunner with the release's `methods` bound onto it, on the CPU, holding `batch`,
    with the attributes every lab step reads (no spec decode, one data-parallel rank, no profiler)."""
    runner = MagicMock(spec=HPUModelRunner)
    for name in methods:
        setattr(runner, name, getattr(HPUModelRunner, name).__get__(runner))
    runner.input_batch = batch
    runner.requests = {}
    runner.vllm_config = MagicMock(speculative_config=None)
    runner.vllm_config.parallel_config.data_parallel_size = 1  # read by vLLM's set_forward_context
    runner.vllm_config.parallel_config.use_sequence_parallel_moe = False
    runner.speculative_config = None
    runner.use_async_scheduling = async_scheduling
    runner.use_aux_hidden_state_outputs = False
    runner.is_driver_worker = False
    runner.profiler = MagicMock(enabled=False)
    runner.kv_caches = []
    runner.device = CPU
    runner.max_model_len = max_model_len
    runner.sampler = Sampler()
    # What the patched input preparation (partial-prefill-draws) sets each step and sample_tokens
    # reads: the prompts sampled only to be thrown away. A stand-in for _prepare_inputs that chunks
    # under structured output must set it as the release does (Step does).
    runner._thrown_away_req_ids = set()
    return runner


def new_batch(max_num_reqs=8) -> InputBatch:
    return InputBatch(max_num_reqs=max_num_reqs, max_model_len=256, max_num_batched_tokens=256, device=CPU,
                      pin_memory=False, vocab_size=VOCAB, block_sizes=[128], kernel_block_sizes=[128])


def request(req_id, params: SamplingParams, prompt_len=8, computed=0, output=(), generator=None):
    """A request as the runner caches it: `computed` prompt tokens done and `output` generated."""
    return CachedRequestState(req_id=req_id, prompt_token_ids=[1 + i % (VOCAB - 1) for i in range(prompt_len)],
                              mm_features=[], sampling_params=params, generator=generator, block_ids=[[0]],
                              num_computed_tokens=computed, output_token_ids=list(output))


def peaked(token, high=8.0):
    """A logits row whose greedy pick is `token`, flat elsewhere."""
    row = torch.zeros(VOCAB)
    row[token] = high
    return row


@dataclass
class Step:
    """The runner with its batch; `schedule` then `run` is one engine step."""
    batch: InputBatch = field(default_factory=new_batch)
    decode_bucket: int = 0  # pad the decode batch to this many rows (the Gaudi decode bucket)
    prefill_batch: int = 1  # prompts per prefill batch (the release merges prompts up to a limit)
    logits: dict = field(default_factory=dict)  # req_id -> logits row the "model" gives it
    sampled: list = field(default_factory=list)  # (request ids asked for, SamplingMetadata) per sampler call
    passes: list = field(default_factory=list)  # request ids of each forward pass, in the order they ran

    def __post_init__(self):
        runner = spec_runner(REAL_METHODS, self.batch, max_model_len=256)
        runner.batch_changed = False
        runner._get_model_mm_inputs = lambda *a, **k: (None, None)
        runner._configure_lora = lambda *a, **k: (None, None)
        runner._get_prompt_logprobs_dict = lambda *a, **k: {}
        runner.get_finished_kv_transfers = lambda *a, **k: (set(), set())
        runner._prepare_inputs = self._prepare_inputs
        runner._execute_model_generic = self._execute_model_generic
        real_prepare = runner._prepare_sampling

        def recording_prepare(batch_changed, request_ids=None, pad_to=None, logits_reqs=None):
            metadata = real_prepare(batch_changed, request_ids, pad_to, logits_reqs)
            self.sampled.append((list(request_ids or []), metadata))
            return metadata

        runner._prepare_sampling = recording_prepare
        self.runner = runner
        self.scheduled = {}

    def add(self, state: CachedRequestState, logits_row=None):
        """Add a request to the persistent batch as `_update_states` does."""
        self.runner.requests[state.req_id] = state
        self.batch.add_request(state)
        if logits_row is not None:
            self.logits[state.req_id] = logits_row

    def refresh(self):
        """What `_update_states` does after adds and removes: copy the sampling rows to the device."""
        self.batch.refresh_sampling_metadata()

    def run(self, scheduled: dict, batch_changed=False, grammar: GrammarOutput | None = None):
        """One step: `scheduled` maps each request id to its number of scheduled tokens. Returns the
        ModelRunnerOutput's sampled tokens by request id."""
        self.scheduled = scheduled
        self.sampled.clear()
        self.passes.clear()
        self.runner.scheduler_output = MagicMock(num_scheduled_tokens=dict(scheduled),
                                                 total_num_scheduled_tokens=sum(scheduled.values()),
                                                 scheduled_spec_decode_tokens={}, kv_connector_metadata=None)
        self.runner.warmup_mode = False
        self.runner.batch_changed = batch_changed
        # The release reads this flag while preparing inputs, before sample_tokens sets it for the
        # step: it is the previous step's. Runs here are steady state (the previous step alike).
        self.runner.use_structured_output = grammar is not None
        out = self.runner.sample_tokens(grammar)
        return {rid: out.sampled_token_ids[idx] for rid, idx in out.req_id_to_index.items()}

    # ------------------------------------------------------------------ stand-ins for the Gaudi parts

    def _logits_rows(self, batch_idx):
        """Logits rows of the prompt at `batch_idx`, by the release's formula."""
        b = self.batch
        rows = self._formula_rows(batch_idx)
        rows = max(1, rows) if self.runner.use_structured_output else max(0, rows)
        return min(rows, self.scheduled[b.req_ids[batch_idx]])

    def _formula_rows(self, batch_idx):
        """Tokens past the prompt's end after this chunk, plus one: below 1, the chunk ends short of it."""
        b = self.batch
        scheduled = self.scheduled[b.req_ids[batch_idx]]
        return int(b.num_computed_tokens_cpu[batch_idx]) + scheduled - int(b.num_prompt_tokens[batch_idx]) + 1

    def _prepare_inputs(self, scheduler_output, num_prefills, num_decodes, warmup=False):
        prefill = PrefillInputData()
        # The release's input preparation names the prompts whose one logits row is sampled only to be
        # thrown away (a chunk short of the prompt's end, under structured output); the patched
        # sample_tokens reads that set. Set on the pristine runner too, where nothing reads it.
        self.runner._thrown_away_req_ids = {
            self.batch.req_ids[i] for i in range(num_decodes, num_decodes + num_prefills)
            if self.runner.use_structured_output and self._formula_rows(i) < 1}
        for start in range(num_decodes, num_decodes + num_prefills, self.prefill_batch):
            indices = range(start, min(start + self.prefill_batch, num_decodes + num_prefills))
            req_ids = [self.batch.req_ids[i] for i in indices]
            rows = [rid for i, rid in zip(indices, req_ids, strict=True) for _ in range(self._logits_rows(i))]
            prefill.request_ids.append(req_ids)
            prefill.prompt_lens.append(None)
            prefill.token_ids.append(torch.zeros((len(req_ids), max(self.scheduled[r] for r in req_ids)),
                                                 dtype=torch.int32))
            prefill.position_ids.append(None)
            prefill.attn_metadata.append(_Pass(req_ids, rows))
            prefill.logits_indices.append(None)
            prefill.logits_requests.append(rows)
        decode = None
        if num_decodes:
            req_ids = list(self.batch.req_ids[:num_decodes])
            rows = req_ids + [None] * max(0, self.decode_bucket - num_decodes)
            decode = DecodeInputData(num_decodes=num_decodes, token_ids=torch.zeros((len(rows), 1), dtype=torch.int32),
                                     attn_metadata=_Pass(req_ids, rows))
        return (prefill, None), (decode, None)

    def _execute_model_generic(self, token_ids, position_ids, attn_metadata, *args, **kwargs):
        self.passes.append(attn_metadata.req_ids)
        rows = [self.logits[rid] if rid is not None else torch.zeros(VOCAB) for rid in attn_metadata.rows]
        logits = torch.stack(rows) if rows else torch.zeros((0, VOCAB))
        return None, None, None, logits


@dataclass
class _Pass:
    """What the stand-in model needs of a forward pass (in place of its attention metadata): the
    requests it runs and the owner of each logits row (None for a padding row)."""
    req_ids: list
    rows: list


def bitmask(allowed_by_request: dict) -> GrammarOutput:
    """A GrammarOutput whose grammar for each request allows only the given token ids."""
    words = (VOCAB + 31) // 32
    mask = np.zeros((len(allowed_by_request), words), dtype=np.int32)
    for row, allowed in enumerate(allowed_by_request.values()):
        for token in allowed:
            mask[row, token // 32] |= np.int32(np.uint32(1 << (token % 32)).view(np.int32))
    return GrammarOutput(structured_output_request_ids=list(allowed_by_request), grammar_bitmask=mask)
