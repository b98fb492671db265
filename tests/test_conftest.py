"""The test harness itself: under CI=true a test that would skip for lack of the Docker engine or the
upstream cache fails instead, and the images a session tags are removed when it ends."""

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cookbook.host import engine
from cookbook.host.paths import ROOT

from . import interrupts
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


def test_the_fast_loop_leaves_out_every_test_that_reaches_a_slow_fixture(tmp_path):
    (tmp_path / "test_probe.py").write_text(textwrap.dedent('''
        import pytest

        @pytest.fixture
        def image(made_images):  # reaches docker_engine through made_images
            return made_images

        def test_engine(docker_engine): pass
        def test_image(image): pass
        def test_server(vllm_cpu): pass
        def test_lab(fix_lab_env): pass
        def test_plain(tmp_path): pass
    '''))
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
                          "--rootdir", str(tmp_path), "--collect-only", "-q", "-m", "not slow",
                          str(tmp_path / "test_probe.py")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "1/5 tests collected (4 deselected)" in out.stdout, out.stdout + out.stderr
    assert "test_probe.py::test_plain" in out.stdout


# Calls that build an image, start a container or a CPU vLLM server, or run the fix lab. A test or fixture
# that makes one must reach a fixture of conftest.SLOW_FIXTURES (or carry the `slow` mark), so that the
# fast loop cannot start one by accident.
STARTERS = {"build_recipe", "docker", "ensure", "ensure_rootfs", "lab", "cost", "recipe_server", "cpu_server",
            "tiny_model_dir", "environment"}
# Calls of those names that start nothing: each refuses its arguments before any work, or (test_fix_base's
# autouse `others`) only lists the engine's containers, and only for a test whose bases are slow already.
REFUSALS = {("test_fix_lab.py", "test_keep_never_replaces_a_folder_the_lab_did_not_lay_out"),
            ("test_standin.py", "test_refuses_an_empty_cache_with_the_command"),
            ("test_fix_base.py", "others")}


def _dry_run(call: ast.Call) -> bool:
    return any(k.arg == "dry_run" and ast.unparse(k.value) == "True" for k in call.keywords)


def _marked_slow(node) -> bool:
    return any("slow" in ast.unparse(d) for d in getattr(node, "decorator_list", []))


def test_every_test_that_starts_something_heavy_is_marked_slow():
    from .conftest import SLOW_FIXTURES

    tests = ROOT / "tests"  # every test module and helper, wherever it sits (the lab's are not here)
    modules = {p: ast.parse(p.read_text()) for p in sorted(tests.rglob("*.py"))}
    fixtures: dict[str, set[str]] = {}
    for tree in modules.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and any("fixture" in ast.unparse(d) for d in node.decorator_list):
                fixtures.setdefault(node.name, set()).update(a.arg for a in node.args.args)
    slow = set(SLOW_FIXTURES)
    while grown := {name for name, args in fixtures.items() if args & slow} - slow:
        slow |= grown
    unmarked = []
    for path, tree in modules.items():
        module_slow = any(isinstance(n, ast.Assign) and "pytestmark" in ast.unparse(n) and "slow" in ast.unparse(n)
                          for n in tree.body)
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or not (node.name.startswith("test_") or node.name in fixtures):
                continue
            calls = {c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", None)
                     for c in ast.walk(node) if isinstance(c, ast.Call) and not _dry_run(c)}
            if (calls & STARTERS and not ({node.name, *(a.arg for a in node.args.args)} & slow) and not module_slow
                    and not _marked_slow(node) and (path.name, node.name) not in REFUSALS):
                unmarked.append(f"{path.name}::{node.name} calls {sorted(calls & STARTERS)}")
    assert not unmarked, "\n".join(unmarked)


class _Item:
    """What lab_prefetch reads of a pytest item."""

    def __init__(self, name: str, fixtures: tuple[str, ...] = (), marks: tuple[str, ...] = (),
                 path: str = "tests/test_a.py"):
        self.name, self.fixturenames, self.marks, self.path = name, fixtures, marks, Path(path)

    def get_closest_marker(self, name: str):
        return name if name in self.marks else None


@pytest.mark.parametrize("items, order", [
    ([_Item("a"), _Item("b")], ["a", "b"]),
    ([_Item("lab", ("lab_report",)), _Item("a")], ["a", "lab"]),
    ([_Item("timing", marks=("quiet",)), _Item("lab", ("tmp_path", "lab_report")), _Item("a"), _Item("b")],
     ["a", "b", "lab", "timing"]),
])
def test_the_labs_readers_run_after_the_rest_and_the_quiet_tests_last(items, order):
    from . import lab_prefetch

    lab_prefetch.last_to_run(items)
    assert [i.name for i in items] == order
    assert lab_prefetch.wanted(items) == ("lab" in order)


LAB = "tests/fixpack/test_fix_lab.py"


@pytest.mark.parametrize("items, workers", [
    ([_Item("lab", ("lab_report",), path=LAB)], 2),
    ([_Item("lab", ("lab_report",), path=LAB), _Item("quick"), _Item("slow", marks=("slow",), path=LAB)], 2),
    ([_Item("lab", ("lab_report",), path=LAB), _Item("slow", marks=("slow",), path="tests/test_chain.py")], 1),
])
def test_the_lab_keeps_both_cores_unless_other_modules_slow_tests_run_beside_it(items, workers):
    from cookbook.fixpack import fix_lab

    from . import lab_prefetch

    assert fix_lab.LAB_WORKERS == 2 and lab_prefetch.workers(items) == workers


def test_a_lab_run_that_fails_is_said_by_its_reader(tmp_path, monkeypatch):
    """The background run's own failure (here: a fixes folder with no profile) reaches the test that reads
    it, with its reason, not as a missing file."""
    from . import lab_prefetch

    (tmp_path / "nofixes").mkdir()
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "tests.lab_prefetch", str(out), "1"], cwd=ROOT,
                            env={**os.environ, "COOKBOOK_FIXES_DIR": str(tmp_path / "nofixes")})
    monkeypatch.setitem(lab_prefetch._started, "run", (proc, out))
    with pytest.raises(pytest.fail.Exception, match="unknown fix profile"):
        lab_prefetch.result(None)
    assert proc.returncode == 1 and not (out / "report.pickle").exists()


def test_a_background_lab_ends_with_the_session_that_started_it(fix_lab_env, tmp_path):
    """The session's process killed outright (no sessionfinish to end the run): the background lab sees
    its parent gone and ends, its lab pytests with it. Everything it starts names `tmp` (its TMPDIR)."""
    tmp = tmp_path / "tmp"
    (tmp / "out").mkdir(parents=True)
    session = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen([sys.executable, '-m', "
         "'tests.lab_prefetch', sys.argv[1], '1']); time.sleep(600)", str(tmp / "out")],
        cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        interrupts.wait_for(lambda: any(" -m pytest " in c for c in interrupts.processes_naming(str(tmp)).values()),
                            session, 300, "a lab pytest")
        session.kill()
        session.wait()
        assert interrupts.left(str(tmp), within_s=30) == {}
        assert "KeyboardInterrupt" in (tmp / "out" / "error.txt").read_text()
    finally:
        session.kill()
        interrupts.kill_left(str(tmp))
