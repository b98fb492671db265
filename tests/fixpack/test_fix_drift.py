"""fixes.drift: a pack carried to another vllm-gaudi release. The verdicts are made to happen on a
release the test makes itself: a git repository of the cached v0.26.0 vllm_gaudi, edited one way per
verdict, fetched into a private cache like any other ref. The real tags run where the cache has them."""

import contextlib
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cookbook.fixpack import fix_drift as drift
from cookbook.host import upstream
from cookbook.host.paths import ROOT
from cookbook.recipe import fixes

from .. import packs

pytestmark = pytest.mark.upstream

PLATFORM, RUNTIME, UTILS = "platform.py", "extension/runtime.py", "utils.py"
CONFIG = "extension/config.py"
WORKER, BUCKETING = "v1/worker/hpu_worker.py", "extension/bucketing/common.py"
CHANGED = "  # changed upstream\n"

# One fix per verdict: (name, file, def the fix edits).
EDITS = [
    ("drift-applies", UTILS, "hpu_device_string"),
    ("drift-upstream", RUNTIME, "dump"),
    ("drift-carried", CONFIG, "Config.get"),
    ("drift-conflicts", PLATFORM, "HpuPlatform.is_async_output_supported"),
    ("drift-file-gone", BUCKETING, "calc_fallback_value"),
    ("drift-moved", WORKER, "setup_step_profiler"),
]


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True).stdout


def change_first_line(text: str, qualname: str, after_mark: bool = False) -> str:
    """The text with the first statement of a def changed by a comment (after_mark: the marker, a comment,
    stands just before that statement)."""
    line = packs.find(text, qualname).body[0].lineno
    lines = text.splitlines(keepends=True)
    assert not after_mark or lines[line - 2].strip() == packs.MARK.strip()
    lines[line - 1] = lines[line - 1].rstrip("\n") + CHANGED
    return "".join(lines)


def make_release(repo: Path, gaudi: Path, pack: Path) -> None:
    """vllm_gaudi v0.26.0 as a git repository, then one commit that makes each verdict happen, tagged drift-test."""
    shutil.copytree(gaudi / "vllm_gaudi", repo / "vllm_gaudi")
    shutil.copy(gaudi / "VLLM_STABLE_COMMIT", repo)
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "v0.26.0")
    src = repo / "vllm_gaudi"
    # already upstream: the release carries the fix's edit
    (src / RUNTIME).write_text(packs.mark_in("dump")((src / RUNTIME).read_text()))
    # conflicts: the line after the fix's insertion changed
    text = (src / PLATFORM).read_text()
    (src / PLATFORM).write_text(change_first_line(text, "HpuPlatform.is_async_output_supported"))
    # fixed upstream amid other edits: the release carries the fix's line, and the line after it changed
    # (so the patch neither applies nor reverse-applies)
    (src / CONFIG).write_text(change_first_line(packs.mark_in("Config.get")((src / CONFIG).read_text()), "Config.get",
                                                 after_mark=True))
    # target gone: the file is removed
    (src / BUCKETING).unlink()
    # target moved: the function leaves hpu_worker.py for the end of utils.py (so utils.py changes too,
    # away from drift-applies' hunk)
    text = (src / WORKER).read_text()
    node = packs.find(text, "setup_step_profiler")
    lines = text.splitlines(keepends=True)
    moved = lines[node.lineno - 1:node.end_lineno]
    (src / WORKER).write_text("".join(lines[:node.lineno - 1] + lines[node.end_lineno:]))
    (src / UTILS).write_text((src / UTILS).read_text() + "\n\n" + "".join(moved))
    git(repo, "commit", "-qam", "drift")
    git(repo, "tag", "drift-test")


@pytest.fixture(scope="module")
def private_cache(tmp_path_factory, upstream_cache):
    """A cache of its own holding the pinned entries by link: the test's fetches never touch the shared one."""
    cache = tmp_path_factory.mktemp("cache")
    gaudi, vllm = upstream_cache
    for entry in (gaudi, vllm):
        link = cache / "upstream" / entry.parent.name / entry.name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(entry)
    return cache


@contextlib.contextmanager
def using(cache):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COOKBOOK_CACHE", str(cache))
        yield


RECORDED = {"ref": "vllm-gaudi#1761", "url": "https://github.com/vllm-project/vllm-gaudi/pull/1761",
            "state": "merged", "says": "the same change", "fixed_in": "v0.28.0"}


@pytest.fixture(scope="module")
def drift_pack(tmp_path_factory, private_cache):
    pack = packs.build(tmp_path_factory.mktemp("driftpack"),
                       [(name, "vllm_gaudi", rel, packs.mark_in(qualname)) for name, rel, qualname in EDITS])
    spec = pack / "drift-carried" / "fix.yaml"  # fix.yaml records a release that fixes it
    data = yaml.safe_load(spec.read_text())
    spec.write_text(yaml.safe_dump({**data, "upstream": {"looked": "2026-12-06", "found": [RECORDED]}}))
    return pack


@pytest.fixture(scope="module")
def release(tmp_path_factory, upstream_cache, drift_pack):
    repo = tmp_path_factory.mktemp("release")
    make_release(repo, upstream_cache[0], drift_pack)
    return repo


def pack_digest(pack: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in pack.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(pack)).encode() + path.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def report(tmp_path_factory, release, drift_pack, private_cache):
    before = pack_digest(drift_pack)
    out = tmp_path_factory.mktemp("out")
    with using(private_cache):
        got = drift.run("drift-test", source=str(release), out=out, fixes_dir=drift_pack)
    assert pack_digest(drift_pack) == before  # the report never changes the pack
    return got, out


def by_fix(report_):
    return {v.fix: v for v in report_.verdicts}


@pytest.mark.parametrize("fix,verdict,detail,function", [
    ("drift-applies", "applies", "changed upstream", ""),
    ("drift-upstream", "fixed upstream", "reverse-applies", ""),
    ("drift-carried", "fixed upstream", "every line they add is in the release's files", ""),
    ("drift-conflicts", "conflicts", "in HpuPlatform.is_async_output_supported (now at line",
     "HpuPlatform.is_async_output_supported"),
    ("drift-file-gone", "target moved or gone", f"vllm_gaudi/{BUCKETING} is gone", ""),
    ("drift-moved", "target moved or gone", "a def of that name is at vllm_gaudi/utils.py:", "setup_step_profiler"),
    ("prompt-order", "not written", "", ""),
])
def test_each_verdict(report, fix, verdict, detail, function):
    v = by_fix(report[0])[fix]
    assert (v.verdict, v.function) == (verdict, function), v
    assert detail in v.detail


def test_only_the_carried_fixes_are_fixed_upstream(report):
    """The conflicting fix adds the same marker line to a file the release changed without it: not fixed upstream."""
    assert [v.fix for v in report[0].verdicts if v.verdict == "fixed upstream"] == ["drift-upstream", "drift-carried"]
    assert "to retire on drift-test (out of that release's profile): drift-upstream, drift-carried." in \
        drift.markdown(report[0])


def test_the_row_says_what_fix_yaml_records(report):
    got = {v.fix: v.upstream for v in report[0].verdicts}
    assert got["drift-carried"] == "fix.yaml: vllm-gaudi#1761 fixes it in v0.28.0"  # drift-test is no release tag
    assert got["drift-applies"] == "" and got["prompt-order"] == ""
    assert "| fixed upstream | its patches do not apply, but" in drift.markdown(report[0])


@pytest.mark.parametrize("ref,said", [
    ("v0.28.0", " (v0.28.0 is that release or later)"),
    ("v0.28.1", " (v0.28.1 is that release or later)"),
    ("v0.27.0rc0", " (v0.27.0rc0 is earlier)"),
    ("v0.28.0rc1", " (v0.28.0rc1 is earlier)"),
    ("main", ""),
    ("1915c8a9475661711b6261ba0f62f7bc5575ade3", ""),
])
def test_recorded_fix(ref, said):
    upstream = fixes.Upstream.model_validate({"looked": "2026-12-06", "found": [
        RECORDED, {**RECORDED, "ref": "vllm#1", "url": "https://github.com/vllm-project/vllm/issues/1", "state": "open",
                   "fixed_in": None}]})
    assert drift.recorded_fix(upstream, ref) == "fix.yaml: vllm-gaudi#1761 fixes it in v0.28.0" + said


@pytest.mark.parametrize("text,lines,held", [
    ("a\n  b\nc\n", ["a", "c"], True),
    ("a\n  b\nc\n", ["b"], True),  # indentation aside
    ("a\nb\nc\n", ["c", "a"], False),  # not in order
    ("a\nb\n", ["a", "a"], False),  # once each
    ("a\n", [], True),
])
def test_holds_in_order(text, lines, held):
    assert drift.holds_in_order(text, lines) is held


def test_added_lines_leave_out_blank_and_removed_ones():
    assert drift.added_lines(DIFF + "--- a/y.py\n+++ b/y.py\n@@ -1 +1,2 @@\n-x\n+\n+ y\n") == {
        "v1/x.py": ["++ c", "f"], "y.py": ["y"]}


def test_conflict_shows_the_failing_hunk(report):
    v = by_fix(report[0])["drift-conflicts"]
    assert v.hunk.startswith("@@ -") and f"+        {packs.MARK}" in v.hunk


def test_vllm_comes_from_the_refs_stable_commit(report, private_cache):
    r = report[0]
    assert r.vllm == "0.26.0" and "VLLM_STABLE_COMMIT" in r.vllm_note
    with using(private_cache):
        assert len(r.commit) == 40 and upstream.cached_ref("drift-test").name == r.commit
    assert upstream.cached_ref("drift-test") is None  # the shared cache never saw it


def test_report_files_agree(report):
    r, out = report
    doc = json.loads((out / "drift.json").read_text())
    assert doc["ports_as_is"] is False and doc["ref"] == "drift-test"
    assert [v["verdict"] for v in doc["verdicts"]] == [v.verdict for v in r.verdicts]
    md = (out / "drift.md").read_text()
    assert "| 4 | drift-conflicts | conflicts |" in md and "```diff" in md
    assert md == drift.markdown(r)


def run_task(*args, env_extra):
    import os

    invoke = Path(sys.executable).parent / "invoke"
    env = {**os.environ, **env_extra}
    return subprocess.run([str(invoke), *args], cwd=ROOT, capture_output=True, text=True, env=env)


def test_task_exit_status_says_the_pack_does_not_port(report, release, drift_pack, private_cache, tmp_path):
    env = {"COOKBOOK_CACHE": str(private_cache), "COOKBOOK_FIXES_DIR": str(drift_pack)}
    out = run_task("fixes.drift", "--to", "drift-test", "--out", str(tmp_path / "r"), env_extra=env)
    assert out.returncode == 1 and "does not port to drift-test" in out.stderr
    assert "| 2 | drift-upstream | fixed upstream |" in out.stdout
    dry = run_task("fixes.drift", "--to", "other-tag", "--from", str(release), "--dry-run",
                   "--out", str(tmp_path / "dry"), env_extra=env)
    assert dry.returncode == 0, dry.stderr
    assert "git" in dry.stdout and "refs/tags/other-tag" in dry.stdout
    with using(private_cache):
        assert not (tmp_path / "dry").exists() and upstream.cached_ref("other-tag") is None


def test_real_v0_26_0_everything_applies(testpack, upstream_cache, tmp_path):
    r = drift.run("v0.26.0", out=tmp_path, fixes_dir=testpack)
    assert [(v.fix, v.verdict) for v in r.verdicts[:2]] == [("selftest-runner", "applies"),
                                                              ("selftest-request", "applies")]
    assert r.ports and r.commit == upstream_cache[0].name


def test_real_v0_27_0rc0_with_the_real_pack(tmp_path):
    """What is true of the real pack on the next tag, whatever it holds; skipped where it is not cached."""
    if upstream.cached_ref("v0.27.0rc0") is None or not upstream.is_complete(upstream.vllm_dir("0.27.0")):
        pytest.skip("v0.27.0rc0 and vLLM 0.27.0 are not in the upstream cache; fill it with: invoke fixes.drift "
                    "--to v0.27.0rc0 --from /path/to/vllm-gaudi/mirror")
    r = drift.run("v0.27.0rc0", out=tmp_path)
    profile = fixes.load_profile("v0.26.0")
    assert [v.fix for v in r.verdicts] == profile.order
    written = set(fixes.fix_names())
    assert all((v.verdict == "not written") == (v.fix not in written) for v in r.verdicts)
    assert r.vllm == "0.27.0" and "no VLLM_STABLE_COMMIT" in r.vllm_note


@pytest.mark.parametrize("ref,stable,override,version,note", [
    ("v0.26.0", "568afb3a13806beb53bb2e6bd518269357b237c0", None, "0.26.0", "VLLM_STABLE_COMMIT"),
    ("v0.27.0rc0", None, None, "0.27.0", "no VLLM_STABLE_COMMIT"),
    ("v0.27.1.post1", "a" * 40, None, "0.27.1", "no profile maps"),
    ("deadbeef" * 5, None, "0.30.0", "0.30.0", "as given"),
])
def test_vllm_version(ref, stable, override, version, note):
    known = {"568afb3a13806beb53bb2e6bd518269357b237c0": "0.26.0"}
    got, said = drift.vllm_version(ref, stable, known, override)
    assert got == version and note in said


def test_vllm_version_refuses_an_unknown_commit():
    from cookbook.host.errors import UpstreamError

    with pytest.raises(UpstreamError, match="cannot tell") as err:
        drift.vllm_version("deadbeef" * 5, None, {}, None)
    assert "--vllm" in str(err.value)


SOURCE = '''x = 1


class A:
    def f(self):
        a = 1
        return a

    async def g(self):
        def inner():
            return 2
        return inner()
'''


@pytest.mark.parametrize("line,qualname", [(1, None), (4, "A"), (6, "A.f"), (11, "A.g.inner"), (12, "A.g")])
def test_enclosing_def(line, qualname):
    assert drift.enclosing_def(SOURCE, line) == qualname


def test_find_def():
    assert drift.find_def(SOURCE, "A.g.inner") == 10 and drift.find_def(SOURCE, "A.h") is None


DIFF = """--- a/v1/x.py
+++ b/v1/x.py
@@ -3,3 +3,4 @@
 a
 b
+++ c
 d
@@ -20,3 +21,4 @@
 e
+f
 g
 h
"""


@pytest.mark.parametrize("said,start", [
    ("error: patch failed: v1/x.py:20\nerror: v1/x.py: patch does not apply", 20),
    ("checking file v1/x.py\nHunk #1 FAILED at 3.\n1 out of 2 hunks FAILED", 3),
    ("patching file v1/x.py\nHunk #2 FAILED at 20.", 20),
    ("something else", None),
])
def test_failing_hunk_from_either_tool(said, start):
    got = drift.failing_hunk(DIFF, said)
    assert (got[1].old_start if got else None) == start


def test_hunks_read_an_added_line_that_looks_like_a_header():
    (p1, h1), (p2, h2) = drift.hunks(DIFF)
    assert p1 == p2 == "v1/x.py" and "+++ c" in h1.text
    assert (h1.first_change, h2.first_change) == (5, 21)


@pytest.mark.parametrize("ref", ["--help", "-h"])
def test_a_flag_taken_for_the_ref_is_refused_before_any_fetch(ref, tmp_path):
    """`invoke fixes.drift --help`: invoke hands the flag to the positional ref. Refused (exit 2, one message
    that says where the help is), before anything is fetched or printed as a plan."""
    env = {**__import__("os").environ, "COOKBOOK_CACHE": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-m", "invoke", "fixes.drift", ref, "--dry-run"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith(f"error: fixes.drift '{ref}': a ref does not start with '-'"), out.stderr
    assert "invoke --help fixes.drift" in out.stderr and "git" not in out.stdout and "Traceback" not in out.stderr


@pytest.mark.parametrize("ref, ok", [("v0.27.0", True), ("0" * 40, True), ("main", True), ("-x", False),
                                     ("", False), ("v1 v2", False), ("v1\x1b[2J", False)])
def test_ref_problem(ref, ok):
    assert (drift.ref_problem(ref) is None) == ok
