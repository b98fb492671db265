"""pytest plugin of the fix lab (`-p lab_stubs`): puts `torch.hpu` in place before any test imports
vllm-gaudi. The `habana_frameworks` stubs beside this file are found on the path; `torch.hpu` is an
attribute of the real torch module, so it is set here.

`torch.hpu` stands for the HPU device module: streams and events that do nothing, `synchronize`, a
memory query, and the seed call. Tensors stay on the CPU: helpers that default to the "hpu" device
(`async_h2d_update`, `async_h2d_copy`) are pointed at the CPU by the tests that call them.
"""

import contextlib
import sys
import types

import torch


class _Stream:
    def __init__(self, *args, **kwargs):
        pass

    def wait_stream(self, other):
        pass

    def synchronize(self):
        pass


class _Event:
    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None):
        pass

    def synchronize(self):
        pass

    def query(self):
        return True


def _install():
    if getattr(torch, "hpu", None) is not None and getattr(torch.hpu, "_cookbook_stub", False):
        return
    hpu = types.ModuleType("torch.hpu")
    hpu._cookbook_stub = True
    hpu.Stream = _Stream
    hpu.Event = _Event
    hpu.current_stream = lambda *a, **k: _Stream()
    hpu.stream = lambda s=None: contextlib.nullcontext()
    hpu.synchronize = lambda *a, **k: None
    hpu.is_available = lambda: False
    hpu.device_count = lambda: 0
    hpu.current_device = lambda: 0  # an index, as the bridge gives it
    hpu.mem_get_info = lambda *a, **k: (16 << 30, 16 << 30)
    hpu.random = types.SimpleNamespace(manual_seed_all=lambda seed: None)
    torch.hpu = hpu
    sys.modules["torch.hpu"] = hpu  # for `import torch.hpu` and `from torch.hpu import …`


_install()
