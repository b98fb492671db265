"""Bounds on work that reads from outside: an overall deadline and a size bound, each set from the
environment, and a child process held to both.

A download tool's own timeouts are per read (pip's socket timeout, git's low-speed limit), so a server
that trickles a byte at a time keeps it alive forever, and a server that floods fills the disk before
any size is known. `run_bounded` watches the child from outside: the bytes under the folder it writes to
and the clock, and kills its whole process group at either bound.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import signals
from .errors import UpstreamError, UsageError, printable
from .progress import say

POLL_S = 0.25
PROGRESS_S = 30.0  # a line of progress this often while a child downloads


def env_number(name: str, default: float, unit: str, what: str, below: float = 1e7) -> float:
    """A number in (0, below) from the environment variable `name`, else `default`; a clear refusal else."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value < below:
        raise UsageError(f"{name}={printable(raw)[:40]} is not a number of {unit} (0 to {below:g})",
                         hint=f"export {name}={unit.upper()} ({what}; default {default:g})")
    return value


@dataclass
class Deadline:
    seconds: float
    env: str  # the variable that sets it, for the hint
    started: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.started)


def bytes_under(path: Path) -> int:
    """Bytes of the regular files under path (links not followed); files that vanish meanwhile count 0."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            total += st.st_size
    return total


def run_bounded(cmd: list[str], *, watch: Path, max_bytes: int, max_env: str, deadline: Deadline, what: str,
                env: dict | None = None) -> subprocess.CompletedProcess:
    """Run cmd (its output captured) until it ends, its files under `watch` pass max_bytes, or the deadline
    passes; at a bound its process group is killed and UpstreamError (exit 3, a broken remote) raised."""
    child = signals.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    said_at = time.monotonic()
    try:
        while True:
            try:
                out, err = child.communicate(timeout=POLL_S)
                return subprocess.CompletedProcess(cmd, child.returncode, out, err)
            except subprocess.TimeoutExpired:
                pass
            size = bytes_under(watch)
            if size > max_bytes:
                raise UpstreamError(f"{what}: more than {max_bytes >> 20} MB written, the bound; "
                                    "a source that floods, or a bound too low",
                                    hint=f"check the source; raise {max_env} (MB) if it is right")
            if deadline.left() <= 0:
                raise UpstreamError(f"{what}: not done within the deadline of {deadline.seconds:.0f}s",
                                    hint=f"a slow or stalled source: raise {deadline.env} (seconds) and run again")
            if time.monotonic() - said_at >= PROGRESS_S:
                said_at = time.monotonic()
                say(f"{what}: {size >> 20} MB so far, {max(deadline.left(), 0):.0f}s left")
    finally:
        if child.poll() is None:
            signals.kill_group(child.pid)
            child.communicate()
