"""The test harness itself: under CI=true a test that would skip for lack of the Docker engine or the
upstream cache fails instead, and the images a session tags are removed when it ends."""

import os
import subprocess
import sys

import pytest

from cookbook import engine
from cookbook.paths import ROOT

from .conftest import TEST_REPO

PROBE = '''
import pathlib, subprocess
from tests.conftest import TEST_REPO

def test_engine(docker_engine):
    pass

def test_cache(upstream_cache):
    pass

def test_tags_one(made_images, tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM scratch\\nLABEL cookbook.test=probe\\n")
    tag = f"{TEST_REPO}/probe:made"
    subprocess.run(["docker", "build", "-q", "-t", tag, str(tmp_path)], check=True, capture_output=True)
    made_images.append(tag)
    pathlib.Path(__file__).with_name("tag.txt").write_text(tag)
'''


def run_probe(tmp_path, *args: str, **env) -> subprocess.CompletedProcess:
    """Run PROBE as its own pytest session, with this repository's fixtures (tests/conftest.py)."""
    (tmp_path / "test_probe.py").write_text(PROBE)
    environ = {k: v for k, v in os.environ.items() if k not in ("CI", "DOCKER_HOST", "COOKBOOK_CACHE")}
    environ.update(env)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), "-rfEs", *args, str(tmp_path / "test_probe.py")],
                          cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("ci,outcome", [("true", "2 errors"), (None, "2 skipped")])
def test_missing_engine_and_cache_fail_under_ci(tmp_path, ci, outcome):
    env = {"DOCKER_HOST": "unix:///nonexistent/docker.sock", "COOKBOOK_CACHE": str(tmp_path / "empty")}
    if ci:
        env["CI"] = ci
    out = run_probe(tmp_path, "-k", "engine or cache", **env)
    assert outcome in out.stdout, out.stdout + out.stderr
    assert out.returncode == (1 if ci else 0)
    if ci:
        assert "CI=true" in out.stdout and "no Docker daemon answers" in out.stdout


def test_a_session_removes_the_images_it_tagged(tmp_path, docker_engine, upstream_cache):
    out = run_probe(tmp_path, "-k", "tags")
    assert "1 passed" in out.stdout, out.stdout + out.stderr
    tag = (tmp_path / "tag.txt").read_text()
    assert tag.startswith("cookbook-test/session-") and not tag.startswith(TEST_REPO)  # its own repository
    assert not engine.image_exists(tag)
