"""Stand-in for `habana_frameworks.torch.internal`."""

from . import bridge_config  # noqa: F401
