"""Stand-in for `habana_frameworks.torch.utils.experimental`: the device type query (a Gaudi 2)."""

import enum


class synDeviceType(enum.IntEnum):  # noqa: N801  (the bridge's own name)
    synDeviceGaudi = 1
    synDeviceGaudi2 = 2
    synDeviceGaudi3 = 3


def _get_device_type():
    return synDeviceType.synDeviceGaudi2
