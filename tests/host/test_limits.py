"""Bounds on outside work: numbers from the environment, and a child held to a deadline and a size bound
(real processes; the whole process group ends at a bound)."""

import os
import subprocess
import sys
import time

import pytest

from cookbook.host import limits
from cookbook.host.errors import UpstreamError, UsageError


@pytest.mark.parametrize("raw,expect", [(None, 30.0), ("", 30.0), ("  ", 30.0), ("5", 5.0), ("0.5", 0.5),
                                        ("1e6", 1e6)])
def test_env_number_reads_or_defaults(monkeypatch, raw, expect):
    if raw is None:
        monkeypatch.delenv("COOKBOOK_X", raising=False)
    else:
        monkeypatch.setenv("COOKBOOK_X", raw)
    assert limits.env_number("COOKBOOK_X", 30.0, "seconds", "x") == expect


@pytest.mark.parametrize("raw", ["0", "-3", "nan", "inf", "1e7", "soon", "5s", "\x1b[2J"])
def test_env_number_refuses_what_is_not_a_bound(monkeypatch, raw):
    monkeypatch.setenv("COOKBOOK_X", raw)
    with pytest.raises(UsageError) as err:
        limits.env_number("COOKBOOK_X", 30.0, "seconds", "x")
    assert "COOKBOOK_X=" in str(err.value) and "\x1b" not in str(err.value)


def test_bytes_under_counts_files_not_what_links_point_at(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 1000)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b").write_bytes(b"y" * 24)
    big = tmp_path.parent / f"{tmp_path.name}-outside"
    big.write_bytes(b"z" * 10_000)
    (tmp_path / "link").symlink_to(big)
    assert limits.bytes_under(tmp_path) == 1024 + len(str(big))
    big.unlink()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is dead too
        return f.read().split(")")[-1].split()[0] != "Z"


def test_a_child_that_floods_is_killed_with_its_group(tmp_path):
    pidfile = tmp_path / "grandchild"
    script = ("import subprocess, sys, time\n"
              f"g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
              f"open({str(pidfile)!r}, 'w').write(str(g.pid))\n"
              f"f = open({str(tmp_path / 'out')!r}, 'wb')\n"
              "while True:\n    f.write(b'a' * 65536); f.flush(); time.sleep(0.001)\n")
    started = time.monotonic()
    with pytest.raises(UpstreamError, match="more than 2 MB written"):
        limits.run_bounded([sys.executable, "-c", script], watch=tmp_path, max_bytes=2 << 20, max_env="COOKBOOK_X",
                           deadline=limits.Deadline(60, "COOKBOOK_T"), what="flood")
    assert time.monotonic() - started < 30
    deadline = time.monotonic() + 5
    while alive(int(pidfile.read_text())) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(int(pidfile.read_text()))


def test_a_child_that_stalls_ends_at_the_deadline(tmp_path):
    started = time.monotonic()
    with pytest.raises(UpstreamError, match="deadline of 1s") as err:
        limits.run_bounded([sys.executable, "-c", "import time; time.sleep(60)"], watch=tmp_path, max_bytes=1 << 20,
                           max_env="COOKBOOK_X", deadline=limits.Deadline(1, "COOKBOOK_T"), what="stall")
    assert time.monotonic() - started < 10 and "COOKBOOK_T" in err.value.hint


def test_a_child_that_ends_gives_its_output(tmp_path):
    got = limits.run_bounded([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); "
                              "sys.exit(3)"], watch=tmp_path, max_bytes=1 << 20, max_env="COOKBOOK_X",
                             deadline=limits.Deadline(60, "COOKBOOK_T"), what="ok")
    assert (got.returncode, got.stdout, got.stderr) == (3, "out\n", "err\n")
    assert isinstance(got, subprocess.CompletedProcess)
