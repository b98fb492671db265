"""The tasks as a user runs them: dry runs print commands and change nothing; errors are one clear
message and exit 1, never a traceback."""

import subprocess
import sys
from pathlib import Path

import pytest

from cookbook.paths import ROOT


def invoke(*args: str) -> subprocess.CompletedProcess:
    beside = Path(sys.executable).parent / "invoke"
    cmd = [str(beside)] if beside.exists() else [sys.executable, "-m", "invoke"]
    return subprocess.run([*cmd, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_render_dry_run_writes_nothing(tmp_path):
    out = invoke("render", "--recipe", "qwen3.6-27b-fp8", "--out", str(tmp_path / "ctx"), "--dry-run")
    assert out.returncode == 0, out.stderr
    assert f"would write {tmp_path / 'ctx' / 'Dockerfile'}" in out.stdout
    assert not (tmp_path / "ctx").exists()


def test_build_dry_run_prints_the_engine_commands():
    out = invoke("build", "--recipe", "qwen3.5-27b-fp8", "--standin", "--dry-run", "--tag", "reg/x:y")
    assert out.returncode == 0, out.stderr
    assert "build --iidfile" in out.stdout
    assert "tag <image-id> reg/x:y-standin" in out.stdout  # a stand-in never takes a Gaudi tag


def test_upstream_fetch_dry_run_names_the_source_without_credentials():
    out = invoke("upstream.fetch", "--from", "https://me:secret@example.invalid/vllm-gaudi.git", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "secret" not in out.stdout + out.stderr


def test_image_check_dry_run():
    out = invoke("test", "--recipe", "qwen3.5-27b-fp8", "--standin", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "--entrypoint sleep" in out.stdout and "pytest" in out.stdout


@pytest.mark.parametrize("args,words", [
    (("render", "--recipe", "nope"), "unknown recipe 'nope'"),
    (("validate", "--recipe", "nope"), "qwen3.5-27b-fp8, qwen3.6-27b-fp8"),
    (("fixes.list", "--profile", "v9"), "unknown fix profile 'v9'"),
    (("fixes.new", "prompt-order", "--edited", "/nonexistent", "--profile", "v9"), "unknown fix profile"),
])
def test_errors_are_one_message_not_a_traceback(args, words):
    out = invoke(*args)
    assert out.returncode == 1
    assert out.stderr.startswith("error: ") and words in out.stderr
    assert "Traceback" not in out.stderr


def test_validate_says_which_fixes_are_not_written():
    out = invoke("validate")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("not written: prompt-order") == 2


def test_real_base_build_with_unwritten_fixes_is_refused():
    out = invoke("build", "--recipe", "qwen3.5-27b-fp8", "--dry-run")
    assert out.returncode == 1 and out.stderr.startswith("error: ") and "not written yet" in out.stderr
    assert "--allow-unwritten-fixes" in out.stderr and "Traceback" not in out.stderr
