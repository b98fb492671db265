"""rope-cpu-cache: vLLM builds a rotary embedding's cos/sin table in RotaryEmbeddingBase.__init__ on
the default device. The model is built under the accelerator's device context, so on a Gaudi the
table is computed there, in float32, and Gaudi's fp32 cos/sin are wrong past about 1.5e5 (Qwen3.5's
interleaved MRoPE table spans 4 x 262,144 positions). Patched, the table is built on the CPU and then
moved to that device.

No Gaudi here: the `meta` device stands for the accelerator the model is built on. A dispatch mode
records where every cos/sin runs and which CPU tensors are copied onto that device. The reference is
the table vLLM's own `_compute_cos_sin_cache` gives on the CPU.
"""

import pytest
import torch
import vllm.model_executor.layers.rotary_embedding as rope_module
import vllm_gaudi.ops.hpu_rotary_embedding as hpu_rope
from torch.utils._python_dispatch import TorchDispatchMode
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.model_executor.layers.rotary_embedding import get_rope

aten = torch.ops.aten
ACCELERATOR = "meta"
MAX_POSITIONS = 262_144  # Qwen3.5's max_position_embeddings
QWEN35_ROPE = {"rope_type": "default", "rope_theta": 10_000_000, "partial_rotary_factor": 0.25,
               "mrope_section": [11, 11, 10], "mrope_interleaved": True}


class DeviceLog(TorchDispatchMode):
    """Devices of the cos/sin ops run, and the CPU tensors copied to another device."""

    def __init__(self):
        super().__init__()
        self.trig: list[str] = []
        self.moved: list[torch.Tensor] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in (aten.cos.default, aten.sin.default):
            self.trig.append(out.device.type)
        elif func is aten._to_copy.default and args[0].device.type == "cpu" and out.device.type != "cpu":
            self.moved.append(args[0])
        return out


@pytest.fixture
def fresh_ropes(monkeypatch):
    """get_rope's per-shape cache, emptied (this test's ropes are built, not reused), under a vLLM
    config, as custom ops are built while a model is."""
    monkeypatch.setattr(rope_module, "_ROPE_DICT", {})
    # One thread: torch's multithreaded CPU cos/sin can differ in the last bit from run to run (seen in
    # about one full lab run in four), and the tables are compared bit for bit.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with set_current_vllm_config(VllmConfig()):
            yield
    finally:
        torch.set_num_threads(threads)


def build_on_accelerator(layers: int, **rope_kwargs):
    with torch.device(ACCELERATOR), DeviceLog() as log:
        ropes = [get_rope(head_size=256, max_position=MAX_POSITIONS, **rope_kwargs) for _ in range(layers)]
    return ropes, log


def test_a_float32_table_is_built_on_the_cpu_and_equals_vllms_cpu_table_past_250k(fresh_ropes):
    (rope,), log = build_on_accelerator(1, rope_parameters={"rope_theta": 10_000_000, "partial_rotary_factor": 0.25},
                                        dtype=torch.float32)
    assert isinstance(rope, hpu_rope.HPURotaryEmbedding)
    assert log.trig and set(log.trig) == {"cpu"}, f"cos/sin ran on {sorted(set(log.trig))}"
    assert rope.cos_sin_cache.device.type == ACCELERATOR
    reference = rope._compute_cos_sin_cache()  # vLLM's table, on the CPU, float32
    assert reference.shape == (MAX_POSITIONS, 64) and reference.dtype == torch.float32
    (table,) = log.moved
    assert torch.equal(table[250_000:], reference[250_000:]) and torch.equal(table, reference)


def test_qwen35_interleaved_mrope_table_is_built_once_on_the_cpu_for_all_16_attention_layers(fresh_ropes):
    ropes, log = build_on_accelerator(16, rope_parameters=QWEN35_ROPE, dtype=torch.bfloat16)
    rope = ropes[0]
    assert isinstance(rope, hpu_rope.HPUMRotaryEmbedding) and rope.mrope_interleaved
    assert all(r is rope for r in ropes)
    assert log.trig == ["cpu", "cpu"], f"cos/sin ran {len(log.trig)} times, on {sorted(set(log.trig))}"
    assert rope.cos_sin_cache.device.type == ACCELERATOR
    reference = rope._compute_cos_sin_cache()
    assert reference.shape == (4 * MAX_POSITIONS, 64)  # MRoPE spans 4x the maximum position
    (table,) = log.moved
    assert table.dtype == torch.bfloat16 and torch.equal(table, reference.to(torch.bfloat16))
