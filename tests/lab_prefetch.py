"""The fix lab's whole run for tests/fixpack/test_fix_lab.py (both trees, each fix alone, upstream's unit
tests: about ten minutes of two busy cores, the suite's largest single cost) started in a process of its
own as soon as the session's collection ends, on one core while the rest of the suite runs on the other
(on both when no other module's slow test was selected). The tests that read it are moved to the
session's end (tests/conftest.py), where `lab_report` waits.

A process, not a thread: the lab's pytest processes are registered with cookbook.host.signals, and a test
of that module that raises SIGTERM in the session's process would kill them. The process ends its lab
(its own SIGTERM handler kills the lab's process groups) when the session ends first or its parent dies.

Run as `python -m tests.lab_prefetch OUT_DIR WORKERS`: writes OUT_DIR/report.pickle (the fix_lab.Report),
its progress to OUT_DIR/lab.log, and on a failure OUT_DIR/error.txt."""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import pytest

from cookbook.host import signals
from cookbook.host.paths import ROOT

FIXTURE = "lab_report"
WAIT_S = 7200  # twice the lab's own bound on one pytest run (fix_lab.run's timeout)
_started: dict[str, tuple[subprocess.Popen, Path]] = {}


def lab(keep: Path, **workers):
    from cookbook.fixpack import fix_lab

    return fix_lab.lab(keep=keep, with_upstream=True, alone=True, **workers)


def reads(item) -> bool:
    return FIXTURE in getattr(item, "fixturenames", ())


def wanted(items) -> bool:
    return any(reads(item) for item in items)


def available() -> bool:
    """The lab's environment and the upstream cache are there (else the fixture skips or fails as it says)."""
    from cookbook.fixpack import fix_lab
    from cookbook.host import upstream
    from cookbook.recipe import recipes

    try:
        fix_lab.environment()
        upstream.require(recipes.load("qwen3.5-27b-fp8").release.pins())
    except Exception:
        return False
    return True


def last_to_run(items: list) -> None:
    """The lab's readers after every other test, so that the run is done, or nearly, when they need it;
    after them the tests marked `quiet` (a timing compared between two clients), which the lab's busy core
    would skew (a 24% gap in tokens/s measured while it ran)."""
    def rank(item) -> int:
        if item.get_closest_marker("quiet"):
            return 2
        return 1 if reads(item) else 0

    items.sort(key=rank)


def workers(items) -> int:
    """One lab pytest at a time when slow tests of other modules run beside it (the other core is theirs),
    else the lab's own number (test_fix_lab.py run alone)."""
    from cookbook.fixpack import fix_lab

    own = {item.path for item in items if reads(item)}
    beside = any(item.get_closest_marker("slow") and item.path not in own for item in items)
    return 1 if beside else fix_lab.LAB_WORKERS


def start(config, items) -> None:
    """Start the run when this session will read it (not in an xdist worker: each would run its own; not for
    --collect-only, which reads nothing)."""
    if hasattr(config, "workerinput") or config.option.collectonly or not available():
        return
    out = Path(tempfile.mkdtemp(prefix="cookbook-lab-prefetch."))
    log = (out / "lab.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "tests.lab_prefetch", str(out), str(workers(items))], cwd=ROOT,
                            stdout=log,
                            stderr=subprocess.STDOUT, process_group=0)
    log.close()
    _started["run"] = (proc, out)


def stop() -> None:
    """At the session's end: a run still going (the session stopped early) is ended, and cleans up; its
    folder (the kept trees) is removed."""
    if "run" not in _started:
        return
    proc, out = _started.pop("run")
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            signals.kill_group(proc.pid)
            proc.wait()
    shutil.rmtree(out, ignore_errors=True)


def result(tmp_path_factory):
    """The report of the run started at collection's end (waited for), or of one run now."""
    if "run" not in _started:
        return lab(tmp_path_factory.mktemp("lab"))
    proc, out = _started["run"]
    try:
        proc.wait(WAIT_S)
    except subprocess.TimeoutExpired:
        stop()
        pytest.fail(f"the fix lab's run did not end within {WAIT_S}s")
    if (out / "report.pickle").is_file():
        return pickle.loads((out / "report.pickle").read_bytes())
    # Said here, not pointed to: the folder goes at the session's end.
    said = next((f.read_text()[-3000:] for f in (out / "error.txt", out / "lab.log") if f.is_file()), "")
    pytest.fail(f"the fix lab's run ended {proc.returncode} with no report:\n{said}")


def _end_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1)
    os.kill(os.getpid(), signal.SIGTERM)  # the lab's handler, in the main thread, kills its pytests


def main(out: Path, workers: int) -> int:
    threading.Thread(target=_end_with_parent, args=(os.getppid(),), daemon=True).start()
    (out / "lab").mkdir()
    try:
        report = lab(out / "lab", workers=workers)
    except BaseException:
        (out / "error.txt").write_text(traceback.format_exc())
        return 1
    partial = out / "report.pickle.partial"
    partial.write_bytes(pickle.dumps(report))
    partial.rename(out / "report.pickle")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), int(sys.argv[2])))
