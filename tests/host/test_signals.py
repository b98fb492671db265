"""cookbook/host/signals.py, on real processes: SIGTERM and SIGINT raise KeyboardInterrupt in an
interruptible block and kill the process groups of the children started through it (what those started
too), also when the thread waiting on the child is not the main one; after an interrupt a worker thread
starts no new child, the main thread still may (its clean-up); the handlers before the block come back."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from cookbook.host import signals
from cookbook.host.paths import ROOT

from .. import interrupts

# A task in miniature: a pool's worker waits on a child that started a grandchild; the main thread
# waits on the worker. Each sleeper names MARKER in its own command line (a shell comment would not:
# sh drops it, or execs a plain `sleep`), so whatever is left is found afterwards.
TASK = textwrap.dedent("""
    import subprocess, sys, time
    from concurrent.futures import ThreadPoolExecutor
    from cookbook.host import signals

    marker = sys.argv[1]
    sleeper = f"{sys.executable} -c 'import time; time.sleep(300)' {marker}"  # a sleep that names MARKER
    script = f"{sleeper}-grandchild & {sleeper}-child; wait"
    with signals.interruptible():
        with ThreadPoolExecutor(2) as pool:
            try:
                running = pool.submit(signals.run, ["sh", "-c", script])
                print("ready", flush=True)
                running.result()
            except KeyboardInterrupt:
                later = pool.submit(signals.run, ["sleep", "300", marker])  # a queued job, after the interrupt
                try:
                    later.result()
                    print("a worker started a child after the interrupt", flush=True)
                except KeyboardInterrupt:
                    print("refused", flush=True)
                # the main thread's clean-up may still run a child
                signals.run(["true"], check=True)
                print("interrupted", flush=True)
                sys.exit(1)
""")


def sleepers(marker: str) -> set[str]:
    """Which of the task's sleepers (`MARKER-child`, `MARKER-grandchild`) are alive."""
    return {cmd.rsplit(f"{marker}-", 1)[1].strip() for cmd in interrupts.processes_naming(marker).values()
            if f"{marker}-" in cmd and "time.sleep" in cmd and "&" not in cmd}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_an_interrupt_kills_the_childs_whole_group_from_any_thread(sig):
    marker = uuid.uuid4().hex
    proc = subprocess.Popen([sys.executable, "-c", TASK, marker], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        interrupts.wait_for(lambda: sleepers(marker) == {"child", "grandchild"}, proc, 20, "child and grandchild")
        stdout, stderr = interrupts.interrupt(proc, sig, timeout=20)
        assert proc.returncode == 1, stderr
        assert stdout.splitlines() == ["refused", "interrupted"]
        assert interrupts.left(marker) == {}
    finally:
        proc.kill()
        interrupts.kill_left(marker)


def test_the_handlers_before_the_block_come_back_and_the_interrupted_state_ends():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with signals.interruptible():
        with signals.interruptible():
            assert signal.getsignal(signal.SIGTERM) is signals._handler
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGTERM)
        assert signals.interrupted()
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    assert not signals.interrupted()


def test_a_timeout_kills_the_whole_group():
    marker = uuid.uuid4().hex
    with pytest.raises(subprocess.TimeoutExpired):
        sleeper = f"{sys.executable} -c 'import time; time.sleep(300)' {marker}"
        signals.run(["sh", "-c", f"{sleeper}-grandchild & {sleeper}-child; wait"], timeout=1)
    try:
        assert interrupts.left(marker) == {}
    finally:
        interrupts.kill_left(marker)


def test_run_returns_what_subprocess_run_returns():
    out = signals.run(["sh", "-c", "echo out; echo err >&2; exit 3"], capture_output=True, text=True)
    assert (out.returncode, out.stdout, out.stderr) == (3, "out\n", "err\n")
    with pytest.raises(subprocess.CalledProcessError):
        signals.run(["false"], check=True)
    assert signals.run(["cat"], input=b"in", capture_output=True).stdout == b"in"


def test_a_pool_drops_its_queued_jobs_when_the_block_raises():
    ran = []
    with pytest.raises(RuntimeError):
        with signals.pool(1) as pool:
            pool.submit(time.sleep, 0.5)
            later = pool.submit(ran.append, 1)
            raise RuntimeError("interrupted")
    assert later.cancelled() and ran == []
