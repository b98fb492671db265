"""Stand-in for `habana_frameworks.torch.utils.internal`: the lab runs in compile mode, never lazy."""


def is_lazy():
    return False
