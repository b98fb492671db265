"""Stand-in for `habana_frameworks.torch.core`: lazy-mode graph breaks are no-ops on the CPU."""


def mark_step(*args, **kwargs):
    pass


def hpu_initialize(*args, **kwargs):
    pass


def hpu_inference_set_env(*args, **kwargs):
    pass
