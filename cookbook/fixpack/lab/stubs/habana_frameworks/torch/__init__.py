"""Stand-in for `habana_frameworks.torch`: the submodules vllm-gaudi reaches through it."""

import torch  # noqa: F401  (vllm_gaudi/extension/profiler.py imports `torch` from here)

from . import core, hpex, hpu, internal, utils  # noqa: F401


def _register_hpu_backend():
    """The bridge registers torch.compile's `hpu_backend`, which vllm-gaudi names at import time;
    on the CPU the captured graph runs as it is (the bridge's compile options, such as the release's
    `force_static_compile` with dynamic shapes, mean nothing here)."""
    from torch._dynamo import list_backends, register_backend

    if "hpu_backend" not in list_backends(exclude_tags=()):
        register_backend(lambda gm, example_inputs, **options: gm.forward, name="hpu_backend")


_register_hpu_backend()
