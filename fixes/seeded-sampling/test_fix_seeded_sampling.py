"""seeded-sampling: a seeded request's tokens depend on its seed only (not on what else is in the
batch nor on the decode bucket's padding), and its generator sits on the host only in lazy mode.

The stock runner makes each seeded request's generator on the runner's device (the HPU, where the
generator crashes in lazy mode: a Gaudi-only symptom). And decode padding rows repeat the batch's
first request, generator included, so vLLM's `random_sample` advances that generator once more per
padding row: the step's token is unchanged, the following ones change with the bucket size.

A host generator is not free: each seeded row's noise (a vocabulary-wide row) is then drawn on the
CPU, about 3 to 6 ms a row on this machine's CPU, and copied to the device, on every step; on a
Gaudi in compile mode the stock device generator has neither cost, so the host draw is kept to
lazy mode, where it is needed.
"""

import types

import torch
import vllm_gaudi.v1.worker.hpu_model_runner as hpu_model_runner
from _step import VOCAB, Step, point_h2d_at_cpu, request
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput

SEED = 7
STEPS = 4
HOST_GENERATOR = torch.Generator


def _seeded():
    params = SamplingParams(temperature=1.0, seed=SEED)
    generator = torch.Generator()
    generator.manual_seed(SEED)
    return params, generator


def _tokens(monkeypatch, others=(), bucket=1, seeded=("S",)):
    """Decode STEPS tokens from flat logits for the seeded requests (and unseeded `others` before
    them); the tokens of each seeded request."""
    point_h2d_at_cpu(monkeypatch)
    step = Step(decode_bucket=bucket)
    for rid in others:
        step.add(request(rid, SamplingParams(temperature=1.0), prompt_len=4, computed=4, output=[9]),
                 torch.zeros(VOCAB))
    for rid in seeded:
        params, generator = _seeded()
        step.add(request(rid, params, prompt_len=4, computed=4, output=[9], generator=generator), torch.zeros(VOCAB))
    step.refresh()
    scheduled = {rid: 1 for rid in (*others, *seeded)}
    for i in range(STEPS):
        step.run(scheduled, batch_changed=(i == 0))
    return {rid: step.runner.requests[rid].output_token_ids[1:] for rid in seeded}


def test_seeded_tokens_do_not_depend_on_the_decode_bucket(monkeypatch):
    alone = _tokens(monkeypatch, bucket=1)["S"]
    assert _tokens(monkeypatch, bucket=4)["S"] == alone  # stock: the 2nd token on differ
    assert _tokens(monkeypatch, others=("U",), bucket=4)["S"] == alone


def test_two_identical_seeded_requests_in_one_batch_give_the_same_tokens(monkeypatch):
    tokens = _tokens(monkeypatch, bucket=4, seeded=("S1", "S2"))
    assert tokens["S1"] == tokens["S2"]


def _generator_device_for_a_new_seeded_request(monkeypatch, lazy: bool) -> torch.device:
    """The device `_update_states` asks for the generator of a new seeded request, on a runner whose
    device is the HPU, in lazy or compile mode."""
    import habana_frameworks.torch.utils.internal as hpu_internal

    point_h2d_at_cpu(monkeypatch)
    monkeypatch.setattr(hpu_internal, "is_lazy", lambda: lazy)
    # One pipeline stage: this rank is the last (vLLM's PP group needs torch.distributed set up).
    monkeypatch.setattr(hpu_model_runner, "get_pp_group", lambda: types.SimpleNamespace(is_last_rank=True))
    asked = []

    def generator(device="cpu"):
        asked.append(torch.device(device))
        return HOST_GENERATOR()  # a CPU-only torch cannot make an HPU generator: a host one stands in

    monkeypatch.setattr(torch, "Generator", generator)
    step = Step()
    runner = step.runner
    runner._update_states = hpu_model_runner.HPUModelRunner._update_states.__get__(runner)
    runner.device = torch.device("hpu")  # the runner's device on a Gaudi
    runner.encoder_cache = {}
    runner._compact_gdn_group_ids = []
    runner.uses_mrope = False
    params = SamplingParams(temperature=1.0, seed=SEED)
    new = NewRequestData(req_id="S", prompt_token_ids=[1, 2, 3, 4], mm_features=[], sampling_params=params,
                         pooling_params=None, block_ids=([0], ), num_computed_tokens=0, lora_request=None)
    scheduler_output = SchedulerOutput(scheduled_new_reqs=[new], scheduled_cached_reqs=CachedRequestData.make_empty(),
                                       num_scheduled_tokens={"S": 4}, total_num_scheduled_tokens=4,
                                       scheduled_spec_decode_tokens={}, scheduled_encoder_inputs={},
                                       num_common_prefix_blocks=[0], finished_req_ids=set(), free_encoder_mm_hashes=[])

    assert runner._update_states(scheduler_output)

    generator = runner.requests["S"].generator
    assert generator.initial_seed() == SEED
    assert step.batch.generators == {0: generator}
    assert len(asked) == 1
    return asked[0]


def test_a_new_seeded_request_draws_on_the_host_in_lazy_mode_only(monkeypatch):
    """Stock: the HPU in both modes (lazy mode crashes). A host generator in compile mode would draw
    every seeded row on the CPU and copy it over, each step, for nothing."""
    devices = {mode: _generator_device_for_a_new_seeded_request(monkeypatch, lazy=(mode == "lazy")).type
               for mode in ("lazy", "compile")}
    assert devices == {"lazy": "cpu", "compile": "hpu"}


def _random_sample_ops(probs, generators):
    """The aten ops vLLM's random_sample runs, by name."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from vllm.v1.sample.ops.topk_topp_sampler import random_sample

    ops = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ops.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    with Record():
        random_sample(probs, generators)
    return ops


def test_seeded_rows_draw_on_their_generators_device_and_in_place_on_the_batchs(monkeypatch):
    """A host generator serves a batch on another device (the meta device stands in for the HPU:
    drawing into the batch's own tensor with a host generator fails there, as on the HPU); a
    generator on the batch's device draws into the batch's noise in place, with no row copied."""
    from vllm.v1.sample.ops.topk_topp_sampler import random_sample

    generator = torch.Generator().manual_seed(SEED)
    random_sample(torch.full((2, VOCAB), 1.0 / VOCAB, device="meta"), {0: generator})  # stock: raises

    probs = torch.full((2, VOCAB), 1.0 / VOCAB)
    assert "copy_" not in _random_sample_ops(probs, {0: torch.Generator().manual_seed(SEED)})
