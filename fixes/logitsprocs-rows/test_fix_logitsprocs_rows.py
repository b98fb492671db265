"""logitsprocs-rows: `logit_bias`, `min_p` and `min_tokens` take effect on the sampled token.

In vLLM 0.26.0 these three are built-in logits processors fed by batch updates (adds, removes,
moves) and indexed by persistent-batch row. Stock vllm-gaudi never records the updates nor hands
them over, so the processors stay empty and the parameters do nothing; and Gaudi samples subsets
of the batch (decodes, each prefill batch, padded to a bucket), whose rows are not the persistent
rows the processors index.

The tests drive vllm-gaudi's real `InputBatch` (add_request, remove_request, condense as the
runner's `_update_states` calls them, swap_states as the decodes-first reorder does, the
selective sampling metadata the runner samples with) and vLLM's real `Sampler` with the
processors `build_logitsprocs` makes, and look at the sampled tokens.
"""

import functools
from types import SimpleNamespace

import pytest
import torch

VOCAB = 64
TOP = 7  # every row's favourite token, also the stop token of the min_tokens requests
SECOND = 3  # every row's second choice
BIASED, OTHER_BIASED = 40, 41


@pytest.fixture
def batch(monkeypatch):
    """An InputBatch on the CPU with vLLM's built-in logits processors."""
    from vllm.v1.sample.logits_processor import build_logitsprocs
    from vllm_gaudi import utils
    from vllm_gaudi.v1.worker import hpu_input_batch

    monkeypatch.setattr(hpu_input_batch, "async_h2d_update", functools.partial(utils.async_h2d_update, device="cpu"))
    config = SimpleNamespace(speculative_config=None, scheduler_config=SimpleNamespace(max_num_seqs=8))
    procs = build_logitsprocs(config, torch.device("cpu"), False, False, ())
    assert {type(p).__name__ for p in procs.all} >= {"MinPLogitsProcessor", "LogitBiasLogitsProcessor",
                                                     "MinTokensLogitsProcessor"}
    return hpu_input_batch.InputBatch(max_num_reqs=8, max_model_len=32, max_num_batched_tokens=64,
                                      device=torch.device("cpu"), pin_memory=False, vocab_size=VOCAB,
                                      block_sizes=[16], kernel_block_sizes=[16], logitsprocs=procs)


def request(req_id: str, **params):
    from vllm import SamplingParams
    from vllm_gaudi.v1.worker.hpu_input_batch import CachedRequestState

    params.setdefault("temperature", 0.0)
    return CachedRequestState(req_id=req_id, prompt_token_ids=[1, 2, 3], mm_features=[],
                              sampling_params=SamplingParams(**params), generator=None, block_ids=[[0]],
                              num_computed_tokens=3, output_token_ids=[])


def step(batch, remove=(), add=()):
    """The persistent-batch part of the runner's `_update_states`: removals, adds into the lowest
    freed rows, condense, refresh."""
    removed = [batch.remove_request(r) for r in remove]
    removed = sorted((i for i in removed if i is not None), reverse=True)
    for req in add:
        batch.add_request(req, removed.pop() if removed else None)
    if removed:
        batch.condense(removed)
    batch.refresh_sampling_metadata()


def logits(rows: int) -> torch.Tensor:
    out = torch.zeros(rows, VOCAB)
    out[:, TOP], out[:, SECOND] = 5.0, 4.0
    return out


def sample(batch, req_ids: list[str], pad_to: int | None = None, row_logits=None) -> list[int]:
    """What `_run_sampling` does for one subset: metadata for these requests (padded to the
    bucket with copies of the first, as `_generate_req_id_output_token_ids_lst` pads), then the
    real sampler. Returns the tokens of the real rows."""
    from vllm.v1.sample.sampler import Sampler

    lst = [(r, batch.req_output_token_ids[batch.req_id_to_index[r]]) for r in req_ids]
    lst += [lst[0]] * ((pad_to or len(lst)) - len(lst))
    metadata = batch.make_selective_sampling_metadata(lst, skip_copy=False)
    x = logits(len(lst)) if row_logits is None else row_logits(len(lst))
    out = Sampler()(x, metadata)
    return out.sampled_token_ids.view(-1).tolist()[:len(req_ids)]


def test_logit_bias_follows_requests_through_adds_removes_and_condense(batch):
    step(batch, add=[request("a"), request("b", logit_bias={BIASED: 100.0}), request("c")])
    assert sample(batch, ["a", "b", "c"]) == [TOP, BIASED, TOP]

    step(batch, remove=["a"])  # condense moves c into row 0
    assert batch.req_ids == ["c", "b"]
    assert sample(batch, ["c", "b"]) == [TOP, BIASED]

    step(batch, remove=["b"], add=[request("d", logit_bias={OTHER_BIASED: 100.0})])  # d refills b's row
    assert batch.req_ids == ["c", "d"]
    assert sample(batch, ["c", "d"]) == [TOP, OTHER_BIASED]

    step(batch, remove=["c"], add=[request("e"), request("f", logit_bias={BIASED: 100.0})])
    assert batch.req_ids == ["e", "d", "f"]
    assert sample(batch, ["e", "d", "f"]) == [TOP, OTHER_BIASED, BIASED]


def test_logit_bias_follows_requests_through_swaps_after_the_refresh(batch):
    step(batch, add=[request("a", logit_bias={BIASED: 100.0}), request("b"),
                     request("c", logit_bias={OTHER_BIASED: 100.0})])
    # The decodes-first reorder swaps rows after the step's refresh, right before sampling.
    batch.swap_states(0, 2)
    batch.swap_states(1, 2)
    assert batch.req_ids == ["c", "a", "b"]
    assert sample(batch, ["c", "a", "b"]) == [OTHER_BIASED, BIASED, TOP]


def test_min_tokens_bans_the_stop_token_until_the_minimum(batch):
    a = request("a", min_tokens=2, stop_token_ids=[TOP])
    step(batch, add=[request("x"), a])
    assert sample(batch, ["x", "a"]) == [TOP, SECOND]
    a.output_token_ids.append(SECOND)  # the runner extends the request's list in place
    assert sample(batch, ["x", "a"]) == [TOP, SECOND]
    a.output_token_ids.append(SECOND)
    assert sample(batch, ["x", "a"]) == [TOP, TOP]


def spread_logits(rows: int) -> torch.Tensor:
    """TOP has probability ~0.24, every other token ~0.012: min_p 0.5 leaves only TOP."""
    out = torch.zeros(rows, VOCAB)
    out[:, TOP] = 3.0
    return out


def test_min_p_keeps_only_tokens_above_the_threshold_when_sampling(batch):
    step(batch, add=[request("plain", temperature=1.0), request("min_p", temperature=1.0, min_p=0.5)])
    torch.manual_seed(0)
    draws = [sample(batch, ["plain", "min_p"], row_logits=spread_logits) for _ in range(20)]
    assert [d[1] for d in draws] == [TOP] * 20
    assert sum(d[0] != TOP for d in draws) >= 5  # the other row keeps its whole distribution


def distinct_logits(rows: int) -> torch.Tensor:
    """Row k's favourite token is 10 + k."""
    out = logits(rows)
    for k in range(rows):
        out[k, 10 + k] = 6.0
    return out


def test_processors_apply_to_the_right_rows_of_sampled_subsets(batch):
    step(batch, add=[request("d0", logit_bias={BIASED: 100.0}), request("d1"),
                     request("p2", logit_bias={OTHER_BIASED: 100.0}),
                     request("p3", min_tokens=5, stop_token_ids=[TOP])])
    # One prefill's rows alone, and two prompts prompts-first out of batch order.
    assert sample(batch, ["p2"]) == [OTHER_BIASED]
    assert sample(batch, ["p3"]) == [SECOND]
    assert sample(batch, ["p3", "d1", "p2"]) == [SECOND, TOP, OTHER_BIASED]
    # A request owning several logits rows: each row keeps its own logits.
    assert sample(batch, ["d1", "d0", "d1", "p2"], row_logits=distinct_logits) == [10, BIASED, 12, OTHER_BIASED]
    # Decodes padded to a bucket smaller and larger than the batch.
    assert sample(batch, ["d0", "d1"]) == [BIASED, TOP]
    assert sample(batch, ["d0", "d1"], pad_to=3) == [BIASED, TOP]
    assert sample(batch, ["d0", "d1"], pad_to=8) == [BIASED, TOP]
    assert sample(batch, ["d1"], pad_to=4) == [TOP]


def test_min_p_on_a_padded_subset(batch):
    step(batch, add=[request("d0", temperature=1.0), request("d1", temperature=1.0, min_p=0.5),
                     request("p2", temperature=1.0)])
    torch.manual_seed(0)
    draws = [sample(batch, ["d1", "d0"], pad_to=4, row_logits=spread_logits) for _ in range(20)]
    assert [d[0] for d in draws] == [TOP] * 20
    assert sum(d[1] != TOP for d in draws) >= 5


@pytest.mark.parametrize("async_scheduling, hybrid", [(False, False), (True, False), (False, True), (True, True)],
                         ids=["sync", "async", "sync-hybrid", "async-hybrid"])
def test_min_tokens_through_the_runner_steps(monkeypatch, async_scheduling, hybrid):
    """Three steps of the release's sample_tokens (a prefill, two decodes; see _runner.py). Under
    async scheduling the sampled tokens stay on the device and the requests' output lists do not
    grow, yet min_tokens must count them: the stop token is banned for exactly two tokens. For a
    hybrid model the runner makes its batch again when the KV cache is set up
    (`may_reinitialize_input_batch`); the count must live on in that batch."""
    from _runner import VOCAB, Model, Runner

    row = torch.zeros(VOCAB)
    row[TOP], row[SECOND] = 5.0, 4.0
    runner = Runner(monkeypatch, Model(fixed_logits=row), async_scheduling=async_scheduling, hybrid=hybrid)
    runner.add("a", [1, 2, 3], min_tokens=2, stop_token_ids=[TOP])
    runner.add("x", [4, 5, 6])
    tokens = {"a": [], "x": []}
    for scheduled in ({"a": 3, "x": 3}, {"a": 1, "x": 1}, {"a": 1, "x": 1}):
        out = runner.run(scheduled)
        for rid in tokens:
            tokens[rid] += out.sampled_token_ids[out.req_id_to_index[rid]]
    assert tokens == {"a": [SECOND, SECOND, TOP], "x": [TOP, TOP, TOP]}
