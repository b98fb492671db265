"""Stand-in for `habana_frameworks.torch.utils`."""

from . import experimental, internal  # noqa: F401
