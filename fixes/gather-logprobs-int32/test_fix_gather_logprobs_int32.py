"""gather-logprobs-int32: the logprob ids are joined in int32, in the sample path (vllm-gaudi's
replacement for `Sampler.gather_logprobs`, installed the way its plugin hook installs it) and in
the prompt path (`HPUModelRunner._get_prompt_logprobs_dict`).

Stock already returns int32 ids, but joins the sampled/prompt id and the top-k ids as int64 on the
device and casts afterwards; in lazy mode on a Gaudi that int64 join corrupts ids. On the CPU the
values come out right either way, so the tests check the contract the fix gives: every join of ids
happens in int32 (recorded at the ATen level while the real functions run), and the ids, logprobs
and ranks equal a plain reference computation.
"""

from types import SimpleNamespace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

VOCAB = 248_320  # Qwen3.5's vocabulary: ids near its top must come through unchanged


class IdJoins(TorchDispatchMode):
    """Records the dtypes of every `aten.cat` over integer tensors (the id joins)."""

    def __init__(self):
        super().__init__()
        self.dtypes: list[tuple[torch.dtype, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket is torch.ops.aten.cat:
            tensors = args[0]
            if any(not t.is_floating_point() for t in tensors):
                self.dtypes.append(tuple(t.dtype for t in tensors) + (out.dtype,))
        return out


def reference(logprobs: torch.Tensor, k: int, token_ids: torch.Tensor):
    """What the gather must give: [token id, top-k ids], their logprobs, the token's rank."""
    top_lp, top_ids = torch.topk(logprobs, k, dim=-1)
    tok_lp = logprobs.gather(-1, token_ids.long().unsqueeze(-1))
    ids = [[int(t)] + row for t, row in zip(token_ids.tolist(), top_ids.tolist(), strict=True)]
    lps = torch.cat((tok_lp, top_lp), dim=1)
    ranks = (logprobs >= tok_lp).sum(-1)
    return ids, lps, ranks


def assert_joined_in_int32(joins: IdJoins):
    assert joins.dtypes, "no id join recorded: the path under test did not run"
    assert all(d == torch.int32 for dt in joins.dtypes for d in dt), \
        f"ids joined as {joins.dtypes} (every input and output of the join must be int32)"


@pytest.fixture
def plugin_patches(monkeypatch):
    """vllm-gaudi's sampler patches, installed as its `load_general_plugins` hook does, and undone
    after the test (they replace attributes of vLLM's modules)."""
    import vllm.v1.sample.ops.logprobs as logprobs_mod
    import vllm.v1.sample.sampler as sampler_mod
    from vllm_gaudi import patches

    monkeypatch.setattr(sampler_mod.Sampler, "gather_logprobs", sampler_mod.Sampler.__dict__["gather_logprobs"])
    monkeypatch.setattr(sampler_mod, "batched_count_greater_than", sampler_mod.batched_count_greater_than)
    monkeypatch.setattr(logprobs_mod, "batched_count_greater_than", logprobs_mod.batched_count_greater_than)
    patches._patch_batched_count_greater_than()
    patches._patch_gather_logprobs()
    assert sampler_mod.Sampler.gather_logprobs is patches._hpu_gather_logprobs
    return sampler_mod.Sampler


def greedy_metadata(num_logprobs: int):
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata

    return SamplingMetadata(
        temperature=None, all_greedy=True, all_random=False, top_p=None, top_k=None, generators={},
        max_num_logprobs=num_logprobs, no_penalties=True, prompt_token_ids=None,
        frequency_penalties=torch.zeros(0), presence_penalties=torch.zeros(0),
        repetition_penalties=torch.zeros(0), output_token_ids=[[], [], []], allowed_token_ids_mask=None,
        bad_words_token_ids={}, logitsprocs=LogitsProcessors())


def test_sample_path_joins_ids_in_int32_through_the_real_sampler(plugin_patches):
    torch.manual_seed(0)
    logits = torch.randn(3, VOCAB)
    logits[0, VOCAB - 1] = 50.0  # the greedy token is the vocabulary's last id
    sampler = plugin_patches()
    with IdJoins() as joins:
        out = sampler(logits, greedy_metadata(num_logprobs=4))
    assert_joined_in_int32(joins)

    lp = out.logprobs_tensors
    sampled = out.sampled_token_ids.view(-1)
    assert sampled[0] == VOCAB - 1
    ids, lps, ranks = reference(torch.log_softmax(logits, dim=-1), 4, sampled)
    assert lp.logprob_token_ids.dtype == torch.int32
    assert lp.logprob_token_ids.tolist() == ids
    torch.testing.assert_close(lp.logprobs, lps)
    assert lp.selected_token_ranks.tolist() == ranks.tolist() == [1, 1, 1]


def prompt_runner(prompt: list[int], num_prompt_logprobs: int, weight: torch.Tensor):
    """A runner with what `_get_prompt_logprobs_dict` reads: the input batch's prompt-logprobs
    bookkeeping, the request, a model whose `compute_logits` is a projection, vLLM's real sampler."""
    from vllm.v1.sample.sampler import Sampler
    from vllm_gaudi.v1.worker.hpu_model_runner import HPUModelRunner

    runner = SimpleNamespace(
        input_batch=SimpleNamespace(num_prompt_logprobs={"r": num_prompt_logprobs},
                                    in_progress_prompt_logprobs_cpu={}),
        requests={"r": SimpleNamespace(prompt_token_ids=prompt, num_computed_tokens=0)},
        model=SimpleNamespace(compute_logits=lambda hs: hs @ weight),
        sampler=Sampler(),
        device=torch.device("cpu"),
    )
    runner._gather_prompt_logprobs_hpu = HPUModelRunner._gather_prompt_logprobs_hpu.__get__(runner)
    runner.get_prompt_logprobs = HPUModelRunner._get_prompt_logprobs_dict.__get__(runner)
    return runner


def test_prompt_path_joins_ids_in_int32_through_get_prompt_logprobs_dict():
    torch.manual_seed(1)
    hidden, prompt = 16, [5, VOCAB - 1, 17, 0, VOCAB - 2, 9]
    weight = torch.randn(hidden, VOCAB)
    hs = torch.randn(1, len(prompt), hidden)  # one prefill: [1, seq_len, hidden]
    runner = prompt_runner(prompt, 3, weight)
    scheduled = SimpleNamespace(num_scheduled_tokens={"r": len(prompt)})
    with IdJoins() as joins:
        result = runner.get_prompt_logprobs({"r": hs}, scheduled)
    assert_joined_in_int32(joins)

    got = result["r"]
    targets = torch.tensor(prompt[1:])
    ids, lps, ranks = reference(torch.log_softmax(hs[0, :-1] @ weight, dim=-1), 3, targets)
    assert got.logprob_token_ids.tolist() == ids
    torch.testing.assert_close(got.logprobs, lps)
    assert got.selected_token_ranks.tolist() == ranks.tolist()
