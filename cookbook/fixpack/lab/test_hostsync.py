"""The host-sync counter (cookbook/fixpack/lab/_hostsync.py) on calls whose cost on a Gaudi is known: what it counts
as a sync, what it does not, and where it says the call is. No engine: the release's own helpers and
plain torch calls under `_engine.HpuOnCpu`. Holds on either tree (no fix's module)."""

import _engine
import _hostsync
import pytest
import torch


@pytest.fixture
def counter(tree):
    return _hostsync.HostSyncs(tree)


def counted(counter) -> dict[str, int]:
    out: dict[str, int] = {}
    for (kind, _), n in counter.outside.items():
        out[kind] = out.get(kind, 0) + n
    return out


def test_device_tensors_are_told_from_host_ones(counter):
    with _engine.HpuOnCpu(counter):
        with torch.device("hpu"):  # how vLLM builds the model: its weights are on the device
            layer = torch.nn.Linear(4, 4)
        dev = torch.zeros(4, device="hpu")
        kv = torch.empty(2, 4, device=torch.device("hpu"))
        out = layer(dev)
        host = out.cpu()
        like = torch.zeros(3, device=out.device)  # a device tensor's .device is the device
        pinned = torch.zeros(4, device="cpu")
    assert all(counter.on_device(t) for t in (layer.weight, dev, kv, out, like))
    assert not any(counter.on_device(t) for t in (host, pinned))


def test_reads_of_device_values_and_blocking_copies_count_asynchronous_ones_do_not(counter):
    with _engine.HpuOnCpu(counter):
        dev = torch.arange(4, device="hpu")
        host = torch.arange(4)
        host.tolist(), host.numpy(), host.cpu(), int(host[0])  # host values: free
        dev[0].item(), dev.tolist(), dev.cpu(), dev.to("cpu"), bool(dev[1]), dev.numpy()
        dev.to("cpu", non_blocking=True)  # waits only at the event that follows it
        host.to("hpu"), host.to("hpu", non_blocking=True)
        torch.tensor([1, 2, 3], device="hpu")
        dev.copy_(host), dev.copy_(host, non_blocking=True), host.copy_(dev)
        dev[[0, 2]], dev[host]  # a list or a host tensor as an index is copied to the device first
        dev.nonzero(), dev[dev > 1]
    assert counted(counter) == {
        "item()": 1, "tolist()": 1, "d2h cpu()": 1, "d2h to(cpu)": 1, "bool()": 1, "numpy()": 1, "d2h async": 1,
        "h2d to(hpu)": 1, "h2d async": 2, "h2d torch.tensor(device=hpu)": 1, "h2d copy_": 1, "d2h copy_": 1,
        "h2d list index": 1, "h2d host index": 1, "d2h nonzero()": 1, "d2h boolean mask": 1}
    assert not any(_hostsync.is_sync(k) for k in ("d2h async", "h2d async", _hostsync.MIXED + " mul"))


def test_a_host_to_device_move_is_a_copy_while_counting(counter):
    # On the CPU `.to("cpu")` of a CPU tensor is the tensor itself; on a Gaudi the host copy is another
    # tensor, and reading it later costs nothing.
    with _engine.HpuOnCpu(counter):
        dev = torch.arange(4, device="hpu")
        host = dev.to("cpu", non_blocking=True)
        host.tolist()
    assert host is not dev and counter.on_device(dev) and not counter.on_device(host)
    assert counted(counter) == {"d2h async": 1}


def test_a_call_site_is_the_release_file_and_function_and_a_helper_names_its_caller(counter, tree):
    from vllm_gaudi import utils

    with _engine.HpuOnCpu(counter):
        dest = torch.zeros(4, 2, device="hpu")
        utils.async_h2d_update(torch.ones(4, 2), dest, [0, 3], device="hpu")  # its index: a blocking copy
        utils.async_h2d_copy([1, 2], dtype=torch.long, device="hpu")  # the release's asynchronous copy
    sites = {(kind, counter.sites[key].file, counter.sites[key].function): n
             for (kind, key), n in counter.outside.items()}
    assert sites == {("h2d torch.tensor(device=hpu)", "vllm_gaudi/utils.py", "async_h2d_update"): 1,
                     ("h2d async", "vllm_gaudi/utils.py", "async_h2d_update"): 1,
                     ("h2d async", "vllm_gaudi/utils.py", "async_h2d_copy"): 1}
    assert all(counter.sites[key].line > 0 for _, key in counter.outside)


def test_the_counter_is_off_by_default():
    assert _engine.HpuOnCpu().counter is None
