"""Interrupting a real task: start `invoke TASK` with a temporary folder of its own (TMPDIR), wait until
what it starts is running, signal it, then look for what it left: processes (found by that folder in
their command line: every child's names a file in it), the folder's entries, containers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from cookbook.host.paths import ROOT


def start(tmp: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    """`python -m invoke ARGS` from this checkout, its TMPDIR `tmp` (made here)."""
    tmp.mkdir(parents=True, exist_ok=True)
    environ = {**os.environ, **(env or {}), "TMPDIR": str(tmp),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-m", "invoke", *args], cwd=ROOT, env=environ, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def processes_naming(marker: str) -> dict[int, str]:
    """{pid: command line} of the live processes whose command line holds `marker`."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next(line for line in (entry / "status").read_text().splitlines() if line.startswith("State:"))
        except (OSError, StopIteration):
            continue
        if marker in cmdline and "zombie" not in state:
            out[int(entry.name)] = cmdline
    return out


def wait_for(what: Callable[[], object], proc: subprocess.Popen, timeout: float, said: str):
    """Poll `what` until it is truthy; fail when the task ends first or the time is up."""
    deadline = time.monotonic() + timeout
    while True:
        got = what()
        if got:
            return got
        if proc.poll() is not None:
            raise AssertionError(f"the task ended before {said}: {proc.stderr.read()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {said} within {timeout:.0f}s")
        time.sleep(0.1)


def interrupt(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 120) -> tuple[str, str]:
    """Send `sig` to the task alone (as `kill` or a CI cancel does, not to its group) and wait for it."""
    proc.send_signal(sig)
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"the task did not end within {timeout:.0f}s of the signal: {err[-3000:]}") from None


def left(marker: str, within_s: float = 5) -> dict[int, str]:
    """`processes_naming(marker)` once they have had `within_s` to end: SIGKILL is sent, not awaited, and a
    process tearing itself down on a busy machine is alive a moment longer (seen once in a full suite)."""
    deadline = time.monotonic() + within_s
    while (alive := processes_naming(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


def kill_left(marker: str) -> None:
    """After the assertions: a test never leaves what the code under test failed to end."""
    for pid in processes_naming(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
