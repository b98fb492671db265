"""Interrupts, the same for every long task: SIGTERM (a CI cancel, `timeout`, `kill`) and SIGINT (Ctrl-C)
raise KeyboardInterrupt in the main thread while an `interruptible()` block runs, so each task's own
`finally` and `with` blocks clean up (containers by id, temporary folders, the chain's summary). Without
it SIGTERM ends the process at once and nothing is cleaned up.

Child processes started with `run` or `popen` get a process group of their own (what they start in turn
is in it too) and the whole group is killed on an interrupt: a Ctrl-C at the terminal no longer reaches
them directly, and a SIGTERM to the task alone never did. The groups are killed from the signal handler
itself, because the thread waiting on a child may not be the main thread (the fix lab's pool): the
waiting thread then sees its child end. After an interrupt, a thread other than the main one may start
no new child (a pool's queued job raises KeyboardInterrupt instead); the main thread may, for its clean-up
(`docker rm -f`)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

SIGNALS = (signal.SIGTERM, signal.SIGINT)

_lock = threading.RLock()  # re-entrant: the handler runs in the main thread, which may hold it already
_groups: set[int] = set()  # process group ids of live children started here
_depth = 0  # nested interruptible() blocks; the interrupted state lasts until the outermost one ends
_interrupted = False


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def kill_children() -> list[int]:
    """SIGKILL every process group started here that is still registered; their ids."""
    with _lock:
        groups = sorted(_groups)
    for pgid in groups:
        kill_group(pgid)
    return groups


def interrupted() -> bool:
    return _interrupted


def _handler(signum, frame):
    global _interrupted
    with _lock:
        _interrupted = True
    kill_children()
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM and SIGINT raise KeyboardInterrupt in the block, after killing the children's groups.
    Outside the main thread (where Python allows no handler) the block runs as it is."""
    global _depth, _interrupted
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.signal(s, _handler) for s in SIGNALS}
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if not _depth:
            _interrupted = False
        for s, h in before.items():
            signal.signal(s, h)


@contextlib.contextmanager
def pool(workers: int) -> Iterator[ThreadPoolExecutor]:
    """A thread pool whose queued jobs are dropped when the block raises (an interrupt); the running ones
    end as their children's groups are killed, and the block waits for them."""
    with ThreadPoolExecutor(workers) as executor:
        try:
            yield executor
        except BaseException:
            executor.shutdown(wait=False, cancel_futures=True)
            raise


def _register(proc: subprocess.Popen) -> None:
    """Track the child's group; refuse it (killed at once) when an interrupt came first in a worker thread."""
    with _lock:
        refuse = _interrupted and threading.current_thread() is not threading.main_thread()
        if not refuse:
            _groups.add(proc.pid)
    if refuse:
        kill_group(proc.pid)
        proc.wait()
        raise KeyboardInterrupt("interrupted before this child could run")


def _forget(proc: subprocess.Popen) -> None:
    with _lock:
        _groups.discard(proc.pid)


class Child(subprocess.Popen):
    """subprocess.Popen in a process group of its own, registered for `kill_children`; leaving its `with`
    block on an exception (an interrupt, a timeout) kills the whole group, not only the leader."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, process_group=0, **kwargs)
        try:
            _register(self)
        except BaseException:
            self._close_pipes()
            raise

    def _close_pipes(self) -> None:
        for f in (self.stdin, self.stdout, self.stderr):
            if f:
                f.close()

    def wait(self, timeout=None):
        code = super().wait(timeout)
        _forget(self)
        return code

    def poll(self):
        code = super().poll()
        if code is not None:
            _forget(self)
        return code

    def __exit__(self, exc_type, value, traceback):
        if exc_type is not None and self.returncode is None:
            kill_group(self.pid)
        return super().__exit__(exc_type, value, traceback)


def popen(*args, **kwargs) -> Child:
    return Child(*args, **kwargs)


def run(cmd, *, input=None, capture_output: bool = False, timeout: float | None = None, check: bool = False,
        **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run with the child in its own process group: on a timeout, an error or an interrupt the
    whole group is killed (subprocess.run kills the leader only; what it started would live on)."""
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with Child(cmd, **kwargs) as proc:
        try:
            stdout, stderr = proc.communicate(input, timeout=timeout)
        except BaseException:
            kill_group(proc.pid)
            proc.wait()
            raise
    out = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    if check:
        out.check_returncode()
    return out
