"""Stand-in for Intel's Gaudi PyTorch bridge (`habana_frameworks`), for the fix lab only.

The real package ships with the Gaudi software and needs a Gaudi card. vllm-gaudi imports it at the
top of its runner, input batch, platform and ops modules; these stubs give those imports just what
they touch at import time and on the CPU paths the lab drives. Nothing here computes on a device.
"""
