"""prompt-logprobs: the prompt-logprobs path gets each prompt's hidden states, whatever shape the
model returns them in.

For a multimodal model, `_get_model_mm_inputs` squeezes the batch dimension of a prefill batch of
one prompt before embedding it, so the model returns flat `[seq_len, hidden]` states (models
with `flatten_input`, such as qwen3_5_moe, return `[batch * seq_len, hidden]` for any batch).
Stock `sample_tokens` indexes the states by prompt (`states[i]`), which on flat states is one
token's vector; `_get_prompt_logprobs_dict` then slices that vector and `compute_logits` fails in
the worker: the first `prompt_logprobs` request stops the engine.

The tests run the release's `sample_tokens` for one prefill step on a MagicMock(spec=HPUModelRunner)
with the release's methods bound to it (vllm-gaudi's own test_hpu_mm_prefill_batching.py does the
same), a real InputBatch and request, vLLM's Sampler, and the release's `_get_model_mm_inputs`,
`_execute_model_generic` and `_get_prompt_logprobs_dict`. Standing in: the model (an embedding and
an output projection, returning hidden states in the shape of what it is given, as vLLM's models
do), the multimodal encoder and its embeddings (a text-only prompt, no image), and the input
preparation (`_prepare_inputs`: one prefill batch, right-padded, the bucketing is not under test).
"""

import functools
from types import SimpleNamespace
from unittest.mock import MagicMock

import pytest
import torch

VOCAB, HIDDEN = 48, 16


class Model:
    """Stands in for the HPU model adapter: hidden states are the embeddings, in the shape of the
    input (flattened first when `flatten` is set, as HpuModelAdapter does for flatten_input models)."""

    def __init__(self, flatten=False):
        gen = torch.Generator().manual_seed(0)
        self.embedding = torch.randn(VOCAB, HIDDEN, generator=gen)
        self.head = torch.randn(HIDDEN, VOCAB, generator=gen)
        self.flatten = flatten

    def embed_input_ids(self, input_ids, multimodal_embeddings=None, is_multimodal=None):
        return self.embedding[input_ids]

    def forward(self, input_ids, inputs_embeds=None, **kwargs):
        if inputs_embeds is not None:
            return inputs_embeds
        return self.embedding[input_ids.view(-1) if self.flatten else input_ids]

    def compute_logits(self, hidden_states):
        return hidden_states @ self.head


BOUND = ("sample_tokens", "_ensure_decodes_first", "_is_prompt", "is_decoder_only", "_get_prompts_and_decodes",
         "_run_sampling", "_prepare_sampling", "_generate_req_id_output_token_ids_lst", "_build_logprobs_output",
         "_get_model_mm_inputs", "_execute_model_generic", "_get_prompt_logprobs_dict",
         "_gather_prompt_logprobs_hpu")


def make_runner(monkeypatch, prompts: dict[str, list[int]], model: Model, multimodal: bool):
    from vllm import SamplingParams
    from vllm.v1.sample.sampler import Sampler
    from vllm_gaudi import utils
    from vllm_gaudi.v1.worker import hpu_input_batch
    from vllm_gaudi.v1.worker.hpu_input_batch import CachedRequestState, InputBatch
    from vllm_gaudi.v1.worker.hpu_model_runner import HPUModelRunner, PrefillInputData

    monkeypatch.setattr(hpu_input_batch, "async_h2d_update", functools.partial(utils.async_h2d_update, device="cpu"))
    cpu = torch.device("cpu")
    runner = MagicMock(spec=HPUModelRunner)
    for name in BOUND:
        setattr(runner, name, getattr(HPUModelRunner, name).__get__(runner))
    runner.input_batch = InputBatch(max_num_reqs=4, max_model_len=64, max_num_batched_tokens=64, device=cpu,
                                    pin_memory=False, vocab_size=VOCAB, block_sizes=[128], kernel_block_sizes=[128])
    runner.requests = {}
    for rid, prompt in prompts.items():
        state = CachedRequestState(req_id=rid, prompt_token_ids=prompt, mm_features=[],
                                   sampling_params=SamplingParams(temperature=0.0, prompt_logprobs=2),
                                   generator=None, block_ids=[[0]], num_computed_tokens=0, output_token_ids=[])
        runner.requests[rid] = state
        runner.input_batch.add_request(state)
    runner.input_batch.refresh_sampling_metadata()

    runner.vllm_config = MagicMock(speculative_config=None)
    runner.vllm_config.parallel_config.data_parallel_size = 1  # read by vLLM's set_forward_context
    runner.vllm_config.parallel_config.use_sequence_parallel_moe = False
    runner.speculative_config = None
    runner.model = model
    runner.sampler = Sampler()
    runner.device = cpu
    runner.max_model_len = 64
    runner.use_async_scheduling = False
    runner.use_aux_hidden_state_outputs = False
    runner.model_has_chunked_attention = False
    runner.is_driver_worker = False
    runner.profiler = MagicMock(enabled=False)
    runner.kv_caches = []
    runner.batch_changed = True
    runner.warmup_mode = False
    runner.supports_mm_inputs = multimodal
    runner.attn_backend_name = "HPUAttentionBackendV1"
    runner._configure_lora = lambda *a, **k: (None, None)
    runner._extract_mm_kwargs = lambda *a, **k: {}
    runner.get_finished_kv_transfers = lambda *a, **k: (set(), set())
    # The encoder has no image to run; every position is text.
    runner._gather_mm_embeddings = lambda scheduler_output, req_ids, total_num_scheduled_tokens, padded_seq_len: (
        [], torch.zeros(total_num_scheduled_tokens, dtype=torch.bool))

    seq_len = max(len(p) for p in prompts.values())
    token_ids = torch.zeros((len(prompts), seq_len), dtype=torch.long)  # right-padded prefill batch
    for row, prompt in enumerate(prompts.values()):
        token_ids[row, :len(prompt)] = torch.tensor(prompt)
    last = torch.tensor([row * seq_len + len(p) - 1 for row, p in enumerate(prompts.values())])
    prefill = PrefillInputData(request_ids=[list(prompts)], prompt_lens=[None], token_ids=[token_ids],
                               position_ids=[torch.arange(seq_len).expand_as(token_ids)],
                               attn_metadata=[MagicMock(is_prompt=True)], logits_indices=[last],
                               logits_requests=[list(prompts)])
    runner._prepare_inputs = lambda *a, **k: ((prefill, None), (None, None))
    runner.scheduler_output = SimpleNamespace(num_scheduled_tokens={r: len(p) for r, p in prompts.items()},
                                              total_num_scheduled_tokens=sum(map(len, prompts.values())),
                                              scheduled_spec_decode_tokens={}, kv_connector_metadata=None)
    return runner


def expected(model: Model, prompt: list[int]):
    """Prompt logprobs by hand: [target, top-2] ids and logprobs for positions 0..len-2."""
    logprobs = torch.log_softmax(model.embedding[prompt[:-1]] @ model.head, dim=-1)
    top_lp, top_ids = torch.topk(logprobs, 2, dim=-1)
    targets = torch.tensor(prompt[1:])
    ids = torch.cat((targets.unsqueeze(-1), top_ids), dim=1)
    lps = torch.cat((logprobs.gather(-1, targets.unsqueeze(-1)), top_lp), dim=1)
    return ids, lps


def check(runner, model, prompts):
    out = runner.sample_tokens(None)
    for rid, prompt in prompts.items():
        got = out.prompt_logprobs_dict[rid]
        ids, lps = expected(model, prompt)
        assert got.logprob_token_ids.shape == (len(prompt) - 1, 3)
        assert got.logprob_token_ids.tolist() == ids.tolist()
        torch.testing.assert_close(got.logprobs, lps)
        # The sampled token is the greedy pick at the prompt's last position.
        greedy = int((model.embedding[prompt[-1]] @ model.head).argmax())
        assert out.sampled_token_ids[out.req_id_to_index[rid]] == [greedy]


def test_one_prompt_of_a_multimodal_model_gets_its_prompt_logprobs(monkeypatch):
    model = Model()
    prompts = {"mm": [3, 17, 5, 40, 11, 29, 8]}
    check(make_runner(monkeypatch, prompts, model, multimodal=True), model, prompts)


@pytest.mark.parametrize("lengths", [(7,), (7, 5)], ids=["one-prompt", "two-prompts"])
def test_prompts_of_a_flatten_input_model_get_their_prompt_logprobs(monkeypatch, lengths):
    model = Model(flatten=True)
    prompts = {f"p{i}": [(7 * i + 3 * j + 1) % VOCAB for j in range(n)] for i, n in enumerate(lengths)}
    check(make_runner(monkeypatch, prompts, model, multimodal=False), model, prompts)
