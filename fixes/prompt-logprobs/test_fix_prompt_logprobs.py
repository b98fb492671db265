"""prompt-logprobs: the prompt-logprobs path gets each prompt's hidden states, whatever shape the
model returns them in.

For a multimodal model, `_get_model_mm_inputs` squeezes the batch dimension of a prefill batch of
one prompt before embedding it, so the model returns flat `[seq_len, hidden]` states (models
with `flatten_input`, such as qwen3_5_moe, return `[batch * seq_len, hidden]` for any batch).
Stock `sample_tokens` indexes the states by prompt (`states[i]`), which on flat states is one
token's vector; `_get_prompt_logprobs_dict` then slices that vector and `compute_logits` fails in
the worker: the first `prompt_logprobs` request stops the engine.

The tests run the release's `sample_tokens` for one prefill step through `_get_model_mm_inputs`,
`_execute_model_generic` and `_get_prompt_logprobs_dict` (see _runner.py for what stands in).
"""

import pytest
import torch
from _runner import VOCAB, Model, Runner


def expected(model: Model, prompt: list[int]):
    """Prompt logprobs by hand: [target, top-2] ids and logprobs for positions 0..len-2."""
    logprobs = torch.log_softmax(model.embedding[prompt[:-1]] @ model.head, dim=-1)
    top_lp, top_ids = torch.topk(logprobs, 2, dim=-1)
    targets = torch.tensor(prompt[1:])
    ids = torch.cat((targets.unsqueeze(-1), top_ids), dim=1)
    lps = torch.cat((logprobs.gather(-1, targets.unsqueeze(-1)), top_lp), dim=1)
    return ids, lps


def check(runner: Runner, prompts: dict[str, list[int]]):
    for rid, prompt in prompts.items():
        runner.add(rid, prompt, prompt_logprobs=2)
    out = runner.run({rid: len(p) for rid, p in prompts.items()})
    model = runner.model
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
    check(Runner(monkeypatch, Model(), multimodal=True), {"mm": [3, 17, 5, 40, 11, 29, 8]})


@pytest.mark.parametrize("lengths", [(7,), (7, 5)], ids=["one-prompt", "two-prompts"])
def test_prompts_of_a_flatten_input_model_get_their_prompt_logprobs(monkeypatch, lengths):
    prompts = {f"p{i}": [(7 * i + 3 * j + 1) % VOCAB for j in range(n)] for i, n in enumerate(lengths)}
    check(Runner(monkeypatch, Model(flatten=True)), prompts)
