"""Stand-in for `habana_frameworks.torch.hpex` (Gaudi kernels). Importable; the kernels themselves
are absent, so code that would call one on the CPU fails loudly instead of computing something else."""

from . import kernels, normalization  # noqa: F401
