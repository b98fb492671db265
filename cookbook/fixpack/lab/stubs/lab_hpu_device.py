"""The "hpu" device as the CPU, for the fix lab: the torch function mode the lab's engine runs the
release under (cookbook/fixpack/lab/_engine.py), and a pytest plugin (`-p lab_hpu_device`, after `-p lab_stubs`)
that puts vllm-gaudi's own unit tests under the same mode for their whole session.

Those unit tests put tensors on `torch.device("hpu")` (or `current_platform.device_type`) by name; CPU
torch knows the name but has no HPU kernels. Under the mode every "hpu" device argument is mapped to
the CPU before the call runs, so their arithmetic runs as on a card with one memory. What stays
different: a tensor's `.device` reads "cpu", so a test that asserts the device type, or that needs an
HPU kernel (TPC ops, FP8 casts), still fails here and is listed with its reason in
cookbook/fixpack/lab/upstream-excluded.txt. The plugin also gives the one Hub model their runner tests configure
(facebook/opt-125m) as a config file in an offline Hub cache.

Our own lab tests do not load the plugin (the mode costs a Python call per torch call); the engine
enters the mode only while it starts and generates.
"""

import contextlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import torch


def _cpu(x):
    if isinstance(x, int) and not isinstance(x, bool):  # a bare index: the current device, the HPU
        return torch.device("cpu")
    if isinstance(x, torch.device) and x.type == "hpu":
        return torch.device("cpu")
    if isinstance(x, str) and x.split(":")[0] == "hpu":
        return "cpu"
    return x


# Gathers the release feeds padding indices of -1 (padded positions into the rotary cos/sin cache,
# padded token ids into the embedding): Gaudi does not bounds-check them and the padded rows are never
# read; the CPU raises. {op: (argument of the source, of the index, gathered dimension)}
UNCHECKED_GATHERS = {torch.index_select: (0, 2, None), torch.Tensor.index_select: (0, 2, None),
                     torch.nn.functional.embedding: (1, 0, 0)}
# Scatters with padding slots of -1 (padded tokens' KV into the cache): their writes are dropped here,
# never wrapped onto the last row, which belongs to a live block.
UNCHECKED_SCATTERS = {torch.Tensor.index_copy_, torch.index_copy, torch.Tensor.index_copy}


class HpuOnCpu(torch.overrides.TorchFunctionMode):
    """Tensors the release puts on "hpu" (its device, literal in the worker, the runner and the cache
    set-up) are made on the CPU: the device argument of every torch call is mapped, and host memory
    asked for pinned (the structured-output path) is plain. And negative padding indices of the
    gathers above wrap, as Gaudi tolerates them. With a `counter` (_hostsync.HostSyncs, off by
    default) every call is also counted for the host synchronisations it would make on a Gaudi, from
    its original device arguments."""

    def __init__(self, counter=None):
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.counter is not None:
            return self.counter.observe(func, args, kwargs, lambda: self._call(func, args, dict(kwargs)))
        return self._call(func, args, kwargs)

    def _call(self, func, args, kwargs):
        if "device" in kwargs:
            kwargs["device"] = _cpu(kwargs["device"])
        if func is torch.Tensor.pin_memory:  # pinned host memory needs an accelerator's allocator
            return args[0]
        if kwargs.get("pin_memory"):
            kwargs["pin_memory"] = False
        args = tuple(a if isinstance(a, int) else _cpu(a) for a in args)
        if func in UNCHECKED_GATHERS:
            src, idx, dim = UNCHECKED_GATHERS[func]
            index, dim = args[idx], args[1] if dim is None else dim
            if index.numel() and index.min() < 0:
                args = tuple(index.remainder(args[src].shape[dim]) if i == idx else a for i, a in enumerate(args))
        if func in UNCHECKED_SCATTERS:
            dest, dim, index, source = args[:4]
            keep = index >= 0
            if not bool(keep.all()):
                args = (dest, dim, index[keep], source.index_select(dim, keep.nonzero().flatten()), *args[4:])
        return func(*args, **kwargs)


class HostGenerator(torch.Generator):
    """`torch.Generator(device="hpu")` (the seeded generators of compile mode) made on the CPU: the
    constructor is no torch function, so HpuOnCpu does not see its device."""

    def __new__(cls, device="cpu"):
        return super().__new__(cls, _cpu(device))

    def __init__(self, device="cpu"):
        pass


@contextlib.contextmanager
def hpu_generators():
    saved, torch.Generator = torch.Generator, HostGenerator
    try:
        yield
    finally:
        torch.Generator = saved


# OPT-125m's published architecture: the runner tests build a ModelConfig from it and never load
# weights or a tokenizer, so the config is all they read. Written here, not downloaded (no Hub).
OPT_125M = {
    "architectures": ["OPTForCausalLM"], "model_type": "opt", "vocab_size": 50272, "hidden_size": 768,
    "num_hidden_layers": 12, "num_attention_heads": 12, "ffn_dim": 3072, "max_position_embeddings": 2048,
    "word_embed_proj_dim": 768, "do_layer_norm_before": True, "activation_function": "relu",
    "torch_dtype": "float16", "bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1,
}


def offline_hub(root: Path) -> Path:
    snapshot = root / "models--facebook--opt-125m" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(OPT_125M))
    (root / "models--facebook--opt-125m" / "refs").mkdir()
    (root / "models--facebook--opt-125m" / "refs" / "main").write_text("0" * 40)
    return root


@pytest.fixture(autouse=True)
def _forget_ropes():
    """vLLM's get_rope keeps every rope it built; the rotary tests build one of 131,072 positions per
    case (352 cases): kept, they took this 24 GB machine out of memory. Each case builds its own."""
    yield
    rotary = sys.modules.get("vllm.model_executor.layers.rotary_embedding")
    if rotary is not None:
        rotary._ROPE_DICT.clear()


def _in_process(fn):
    return fn()


_session = contextlib.ExitStack()


def pytest_load_initial_conftests(early_config, parser, args):
    # huggingface_hub reads its cache path once, when it is first imported (pytest-asyncio's and
    # the conftests' imports come after this hook).
    hub = Path(tempfile.mkdtemp(prefix="cookbook-lab-hub."))
    _session.callback(shutil.rmtree, hub, ignore_errors=True)
    os.environ["HF_HUB_CACHE"] = str(offline_hub(hub))


def pytest_configure(config):
    # vLLM inspects a model class named by architecture in a subprocess, which would lack the
    # `torch.hpu` stub (lab_stubs sets it in this process): inspect it here.
    from vllm.model_executor.models import registry

    saved, registry._run_in_subprocess = registry._run_in_subprocess, _in_process
    _session.callback(setattr, registry, "_run_in_subprocess", saved)
    _session.enter_context(hpu_generators())
    _session.enter_context(HpuOnCpu())


def pytest_unconfigure(config):
    _session.close()
