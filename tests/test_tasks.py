"""The tasks as a user runs them: dry runs print commands and change nothing; errors are one clear
message, never a traceback, and exit 2 for a user's mistake (3 for the engine or network)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cookbook.host.paths import ROOT
from cookbook.image import steps
from cookbook.recipe import recipes


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
    assert out.returncode == 2
    assert out.stderr.startswith("error: ") and words in out.stderr
    assert "Traceback" not in out.stderr


def invoke_env(*args: str, **env: str) -> subprocess.CompletedProcess:
    import os

    beside = Path(sys.executable).parent / "invoke"
    return subprocess.run([str(beside), *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def one_message(out: subprocess.CompletedProcess, code: int, words: str) -> None:
    assert out.returncode == code, out.stderr
    assert len([line for line in out.stderr.splitlines() if line.startswith("error: ")]) == 1, out.stderr
    assert words in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("dry_run", [False, True])
def test_render_never_replaces_a_folder_it_did_not_make(tmp_path, dry_run):
    (tmp_path / "notes.txt").write_text("mine")
    out = invoke("render", "--recipe", "qwen3.5-27b-fp8", "--out", str(tmp_path), *(["--dry-run"] * dry_run))
    one_message(out, 2, "did not render")
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_render_replaces_what_it_rendered(tmp_path):
    for _ in range(2):
        out = invoke("render", "--recipe", "qwen3.5-27b-fp8", "--out", str(tmp_path / "ctx"))
        assert out.returncode == 0, out.stderr
    assert (tmp_path / "ctx" / ".cookbook-render").is_file()


@pytest.mark.parametrize("args,words", [
    (("render", "--recipe", "qwen3.5-27b-fp8", "--out", "/proc/1/no/such/dir"), "cannot write"),
    (("fixes.new", "prompt-order", "--edited", "/tmp", "--package", "torch"), "unknown package 'torch'"),
    (("upstream.fetch", "--from=--upload-pack=touch /tmp/cookbook-pwned", "--dry-run"), "starts with '-'"),
    (("build", "--standin", "--dry-run", "--tag", "reg/x:bad tag"), "--tag 'reg/x:bad tag' is not an image tag"),
    (("build", "--standin", "--dry-run", "--repo", "Upper/Case"), "is not a repository name"),
    (("test", "--standin", "--dry-run", "--repo", "a b"), "is not a repository name"),
    (("fixes.list", "--profile", "../../etc/passwd"), "unknown fix profile"),
])
def test_user_mistakes_exit_2_with_one_message(args, words):
    out = invoke(*args)
    one_message(out, 2, words)
    assert "would write" not in out.stdout and "build --iidfile" not in out.stdout  # refused before any work


def test_a_recipe_that_is_not_utf8(tmp_path):
    path = tmp_path / "Org" / "Model" / "recipe.yaml"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"schema: 1\ntitle: caf\xe9\n")
    one_message(invoke("validate", "--recipe", str(path)), 2, "recipe.yaml:2")


def test_engine_and_network_failures_exit_3(tmp_path):
    out = invoke_env("build", "--recipe", "qwen3.5-27b-fp8", "--standin",
                     DOCKER_HOST=f"unix://{tmp_path}/no-docker.sock")
    one_message(out, 3, "no Docker daemon answers")
    out = invoke_env("upstream.fetch", "--from", f"file://{tmp_path}/no-mirror", COOKBOOK_CACHE=str(tmp_path / "c"))
    one_message(out, 3, "could not fetch vllm-gaudi")


@pytest.mark.docker
def test_an_unpullable_base_exits_3(docker_engine):
    from cookbook.host import engine

    loaded = recipes.load("qwen3.5-27b-fp8")
    if engine.image_exists(steps.base_for(loaded, use_standin=False).from_ref):
        pytest.skip("the vault base is present here")
    # --allow-unwritten-fixes: the refusal of unwritten fixes comes before the pull otherwise
    one_message(invoke("build", "--recipe", "qwen3.5-27b-fp8", "--allow-unwritten-fixes"), 3,
                "cannot pull the base image")


def test_validate_says_which_fixes_are_not_written():
    from cookbook.recipe import fixes

    out = invoke("validate")
    assert out.returncode == 0, out.stderr
    for loaded in recipes.load_all():
        missing = fixes.select(loaded.recipe.fixes.profile, loaded.recipe.fixes.opt_in).not_written
        if missing:
            assert f"not written: {', '.join(missing)} (" in out.stdout


def test_real_base_build_dry_run_of_a_recipe_with_its_whole_pack_written():
    # Every fix qwen3.5-27b-fp8 selects is written, so the real-base build is not refused (the refusal
    # itself, on a pack that lacks a fix: tests/image/test_steps.py).
    out = invoke("build", "--recipe", "qwen3.5-27b-fp8", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "not written" not in out.stderr + out.stdout and "Traceback" not in out.stderr


def test_publish_help_shows_and_a_bad_registry_is_refused_before_any_work():
    out = invoke("publish", "--help")
    assert out.returncode == 0 and "--registry" in out.stdout and "--no-moving-tags" in out.stdout, out.stderr
    one_message(invoke("publish"), 2, "needs --registry HOST[:PORT][/NAMESPACE]")
    # Before any work: the recipe is not even read (it does not exist) and no engine is asked.
    for bad in ("--help=x", "a b", "ghcr.io/My-Org", "https://ghcr.io/x", "[::zz]:5000"):
        out = invoke_env("publish", "--registry", bad, "--recipe", "no-such-recipe",
                         DOCKER_HOST="unix:///nonexistent.sock")
        one_message(out, 2, "is not HOST[:PORT][/NAMESPACE]")


def _files(root: Path, skip=(".git", ".venv")) -> dict[str, tuple[int, int]]:
    out = {}
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if rel.parts and rel.parts[0] in skip or path.is_dir():
            continue
        stat = path.lstat()
        out[str(rel)] = (stat.st_size, stat.st_mtime_ns)
    return out


def test_hostile_option_values_never_traceback_hang_escape_or_write(tmp_path):
    """Every task's options, two hostile values each (tests/hostile_options.py): a dry run (or a task that
    only reads) answers with an exit code and printable words, within its time, and writes nothing: not in
    the checkout, not in the folder it runs in, not through a symlink out of a folder."""
    scratch, cwd = tmp_path / "scratch", tmp_path / "cwd"
    cwd.mkdir()
    before = _files(ROOT)
    run = subprocess.run([sys.executable, "-m", "tests.hostile_options", str(tmp_path / "out.json"), str(scratch)],
                         cwd=cwd, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr[-3000:]
    records = json.loads((tmp_path / "out.json").read_text())
    assert len(records) > 150 and {r["argv"][0] for r in records} >= {"serve", "chain", "k8s", "fixes.rebase"}
    bad = [f"{r['argv']}: " + ("hang" if r["hang"] else r["traceback"] or f"escape in: {r['said']!r}")
           for r in records if r["hang"] or r["traceback"] or r["escape"]]
    assert not bad, "\n".join(bad[:10])
    assert {r["code"] for r in records} <= {0, 1, 2, 3}
    assert (scratch / "outside" / "victim").read_text() == "kept\n"
    assert sorted(p.name for p in (scratch / "outside").iterdir()) == ["victim"]
    assert not list(cwd.iterdir()) and _files(ROOT) == before
