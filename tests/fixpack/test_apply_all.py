"""fixes/apply_all.py, run as the image runs it (a subprocess with sys.executable) on package trees
made in tmp_path, with a small synthetic profile whose patches are generated from edited copies."""

from __future__ import annotations

import ast
import copy
import difflib
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "fixes" / "apply_all.py"
PLAN = SCRIPT.with_name("fixplan.py")  # the selection rules apply_all.py imports, shipped beside it
PROFILE = "v0.26.0"
RUNNER = "v1/worker/hpu_model_runner.py"

VERSION_PY = "__version__ = version = '0.26.0'\n__commit_id__ = commit_id = '{}'\n"
COMMITS = {"vllm_gaudi": "gb059f9c9", "vllm": "gffd46bfab"}

PRISTINE = {
    ("vllm_gaudi", "__init__.py"): "",
    ("vllm_gaudi", "_version.py"): VERSION_PY.format(COMMITS["vllm_gaudi"]),
    ("vllm_gaudi", RUNNER): """\
\"\"\"HPU model runner (test stand-in).\"\"\"

import os


class HPUModelRunner:
    def __init__(self, config):
        self.config = config
        self.pad_id = 0
        self.block_size = 128
        self.rope_cache = None

    def prepare_decode(self, batch):
        ids = [r.id for r in batch]
        return ids

    def warmup(self):
        return os.environ.get("VLLM_SKIP_WARMUP")
""",
    ("vllm_gaudi", "ops/hpu_gdn.py"): """\
def gdn_state(cache, block):
    # one state per request
    state = cache[block]
    return state
""",
    ("vllm", "__init__.py"): "",
    ("vllm", "_version.py"): VERSION_PY.format(COMMITS["vllm"]),
    ("vllm", "v1/sample/sampler.py"): """\
class Sampler:
    def forward(self, logits):
        rows = None
        return logits, rows
""",
    ("vllm", "reasoning/think.py"): """\
def think_end(text):
    return text.endswith("</think>")
""",
}

ORDER = [
    "prompt-order",  # not in the pack
    "sampling-rows-refresh",
    "hybrid-decode-pad",
    "rope-cpu-cache",
    "gdn-prefix-cache",
    "strict-think-end",
    "whitespace-free-forced-tool-calls",  # not in the pack
]
OPT_IN = ["gdn-prefix-cache", "strict-think-end", "whitespace-free-forced-tool-calls"]

# Each fix: its pack fields and its edits (package, path, old text, new text), made on the tree
# with every earlier fix of the order applied.
FIXES = {
    "sampling-rows-refresh": {
        "modes": ["compile"],
        "edits": [("vllm", "v1/sample/sampler.py", "rows = None", "rows = self.refresh_rows()")],
    },
    "hybrid-decode-pad": {
        "edits": [("vllm_gaudi", RUNNER, "self.pad_id = 0", "self.pad_id = -1")],
    },
    "rope-cpu-cache": {
        # its hunk's context holds hybrid-decode-pad's line: it applies only after that fix
        "edits": [("vllm_gaudi", RUNNER, "self.rope_cache = None", "self.rope_cache = {}")],
    },
    "gdn-prefix-cache": {
        "opt_in": True,
        "requires": ["hybrid-decode-pad"],
        "env": {"VLLM_COMPACT_GDN": "1"},
        "edits": [
            ("vllm_gaudi", "ops/hpu_gdn.py", "state = cache[block]", "state = cache.compact(block)"),
            ("vllm_gaudi", RUNNER, 'return os.environ.get("VLLM_SKIP_WARMUP")', "return None"),
        ],
    },
    "strict-think-end": {
        "opt_in": True,
        "modes": ["compile"],
        "edits": [("vllm", "reasoning/think.py", 'text.endswith("</think>")', 'text.rstrip() == "</think>"')],
    },
}


def sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def unified_diff(path: str, old: str, new: str) -> str:
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}")
    return "".join(lines)


def load_module():
    spec = importlib.util.spec_from_file_location("apply_all", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Result:
    code: int
    out: str


class Cookbook:
    """A site dir with the two packages, a pack dir (apply_all.py + pack.json + patches), a record."""

    def __init__(self, root: Path):
        self.root = root
        self.site = root / "site"
        self.pack_dir = root / "pack"
        self.record = root / "opt" / "cookbook" / "fix-record.json"
        self.fixes = copy.deepcopy(FIXES)
        self.write_site()
        self.write_pack()

    # the installed packages
    def write_site(self):
        shutil.rmtree(self.site, ignore_errors=True)
        for (package, path), text in PRISTINE.items():
            self.write(package, path, text)
        for package in COMMITS:
            self.set_version(package, "0.26.0")

    def write(self, package: str, path: str, text: str):
        full = self.site / package / path
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(text)

    def read(self, package: str, path: str) -> str:
        return (self.site / package / path).read_text()

    def set_commit(self, package: str, commit: str):
        self.write(package, "_version.py", VERSION_PY.format(commit))

    def set_version(self, package: str, version: str):
        meta = self.site / f"{package}-0.26.0.dist-info" / "METADATA"
        meta.parent.mkdir(parents=True, exist_ok=True)
        meta.write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")

    def snapshot(self) -> dict[str, bytes]:
        """Every file under the site (hidden ones too), as bytes."""
        return {str(p.relative_to(self.site)): p.read_bytes() for p in sorted(self.site.rglob("*")) if p.is_file()}

    def mtimes(self) -> dict[str, int]:
        return {str(p.relative_to(self.site)): p.stat().st_mtime_ns for p in self.site.rglob("*") if p.is_file()}

    # the pack
    def write_pack(self):
        shutil.rmtree(self.pack_dir, ignore_errors=True)
        self.pack_dir.mkdir(parents=True)
        shutil.copy2(SCRIPT, self.pack_dir / "apply_all.py")
        shutil.copy2(PLAN, self.pack_dir / "fixplan.py")
        state = dict(PRISTINE)
        fixes = {}
        for name in ORDER:
            spec = self.fixes.get(name)
            if spec is None:
                continue
            new_state = dict(state)
            for package, path, old, new in spec["edits"]:
                assert old in new_state[(package, path)], f"{name}: {old!r} not in {path}"
                new_state[(package, path)] = new_state[(package, path)].replace(old, new, 1)
            edited = list(dict.fromkeys((package, path) for package, path, _, _ in spec["edits"]))
            patches = []
            for package in dict.fromkeys(package for package, _ in edited):
                text = "".join(
                    unified_diff(path, state[(package, path)], new_state[(package, path)])
                    for pkg, path in edited
                    if pkg == package
                )
                file = f"{name}/{len(patches) + 1:04d}-{package}.patch"
                (self.pack_dir / file).parent.mkdir(parents=True, exist_ok=True)
                (self.pack_dir / file).write_text(text)
                patches.append({"package": package, "file": file, "sha256": sha(text)})
            fixes[name] = {
                "title": f"{name} (test fix)",
                "requires": spec.get("requires", []),
                "env": spec.get("env", {}),
                "modes": spec.get("modes", ["compile", "lazy"]),
                "opt_in": spec.get("opt_in", False),
                "targets": [{"package": p, "path": f, "sha256": sha(PRISTINE[(p, f)])} for p, f in edited],
                "patches": patches,
            }
            state = new_state
        self.expected = state  # the tree with every fix of the pack applied
        pack = {
            "_generated": "DO NOT EDIT: generated by the tests",
            "format": 1,
            "profiles": {
                PROFILE: {
                    "packages": {
                        "vllm_gaudi": {
                            "dist": "vllm_gaudi",
                            "version": "0.26.0",
                            "commit": "b059f9c95d6a07f19eb00aa06d1ec8b87b296437",
                            "accepted_commits": {},
                        },
                        "vllm": {
                            "dist": "vllm",
                            "version": "0.26.0",
                            "commit": "568afb3a13806beb53bb2e6bd518269357b237c0",
                            "accepted_commits": {"ffd46bfab": "the PyPI wheel's build revision"},
                        },
                    },
                    "gaudi_sw": "1.24.1",
                    "order": ORDER,
                    "opt_in": OPT_IN,
                }
            },
            "fixes": fixes,
        }
        self.pack_path.write_text(json.dumps(pack, indent=2))

    @property
    def pack_path(self) -> Path:
        return self.pack_dir / "pack.json"

    def edit_pack(self, change):
        pack = json.loads(self.pack_path.read_text())
        change(pack)
        self.pack_path.write_text(json.dumps(pack, indent=2))

    def patch_file(self, fix: str, index: int = 0) -> Path:
        return self.pack_dir / json.loads(self.pack_path.read_text())["fixes"][fix]["patches"][index]["file"]

    def rewrite_patch(self, fix: str, change, index: int = 0):
        """Change a patch's text and list its new sha256, so only its content is wrong."""
        path = self.patch_file(fix, index)
        path.write_text(change(path.read_text()))
        self.edit_pack(lambda pack: pack["fixes"][fix]["patches"][index].update(sha256=sha(path.read_bytes())))

    # running it
    def run(
        self,
        *args: str,
        env: dict | None = None,
        path: str | None = None,
        record: Path | None = None,
        site: bool = True,
    ) -> Result:
        cmd = [sys.executable, str(self.pack_dir / "apply_all.py"), *args, "--record", str(record or self.record)]
        if site:
            cmd += ["--site", str(self.site)]
        environ = {k: v for k, v in os.environ.items() if k not in ("VLLM_COMPACT_GDN", "PT_HPU_LAZY_MODE")}
        environ.update(env or {})
        if path is not None:
            environ["PATH"] = path
        proc = subprocess.run(cmd, capture_output=True, text=True, env=environ, timeout=60)
        return Result(proc.returncode, proc.stdout + proc.stderr)

    def apply(self, *opt_in: str, **kw) -> Result:
        return self.run("--profile", PROFILE, *opt_in, **kw)

    def record_json(self) -> dict:
        return json.loads(self.record.read_text())


GDN_ENV = {"VLLM_COMPACT_GDN": "1"}
ALL_PACKED = ["sampling-rows-refresh", "hybrid-decode-pad", "rope-cpu-cache", "gdn-prefix-cache", "strict-think-end"]


@pytest.fixture
def cb(tmp_path) -> Cookbook:
    return Cookbook(tmp_path)


def refused(cb: Cookbook, before: dict[str, bytes], result: Result, *phrases: str):
    """Exit 1, every phrase in the output, the tree byte-identical, and no record written."""
    assert result.code == 1, result.out
    for phrase in phrases:
        assert phrase in result.out, f"{phrase!r} not in:\n{result.out}"
    assert cb.snapshot() == before
    assert not cb.record.exists()


# ---------------------------------------------------------------------------------------- applying


def test_applies_in_profile_order_two_fixes_on_one_file(cb):
    result = cb.apply()
    assert result.code == 0, result.out
    runner = cb.read("vllm_gaudi", RUNNER)
    assert "self.pad_id = -1" in runner and "self.rope_cache = {}" in runner
    record = cb.record_json()
    assert record["fixes"] == ["sampling-rows-refresh", "hybrid-decode-pad", "rope-cpu-cache"]
    [entry] = [f for f in record["files"] if f["path"] == RUNNER]
    assert entry["fixes"] == ["hybrid-decode-pad", "rope-cpu-cache"]
    assert "applied 3 fixes to 2 files" in result.out


def test_opt_ins_apply_only_when_named(cb):
    assert cb.apply().code == 0
    assert cb.read("vllm_gaudi", "ops/hpu_gdn.py") == PRISTINE[("vllm_gaudi", "ops/hpu_gdn.py")]
    assert cb.read("vllm", "reasoning/think.py") == PRISTINE[("vllm", "reasoning/think.py")]
    assert "strict-think-end" not in cb.record_json()["fixes"]

    assert cb.run("--revert").code == 0
    result = cb.apply("strict-think-end", "hybrid-decode-pad")  # naming a profile fix is allowed
    assert result.code == 0, result.out
    assert 'text.rstrip() == "</think>"' in cb.read("vllm", "reasoning/think.py")
    assert "gdn-prefix-cache" not in cb.record_json()["fixes"]
    assert cb.record_json()["fixes"][-1] == "strict-think-end"


def test_all_fixes_give_the_expected_tree(cb):
    result = cb.apply("gdn-prefix-cache", "strict-think-end", env=GDN_ENV)
    assert result.code == 0, result.out
    for (package, path), text in cb.expected.items():
        assert cb.read(package, path) == text, path
    assert cb.record_json()["fixes"] == ALL_PACKED


def test_requirement_not_in_pack_refused(cb):
    del cb.fixes["hybrid-decode-pad"]
    cb.fixes["rope-cpu-cache"]["edits"] = [("vllm_gaudi", RUNNER, "self.rope_cache = None", "self.rope_cache = {}")]
    cb.write_pack()
    before = cb.snapshot()
    result = cb.apply("gdn-prefix-cache", env=GDN_ENV)
    refused(cb, before, result, "gdn-prefix-cache requires hybrid-decode-pad, which is not in this pack")


def test_requirement_later_in_order_refused(cb):
    cb.edit_pack(lambda p: p["fixes"]["hybrid-decode-pad"].update(requires=["rope-cpu-cache"]))
    before = cb.snapshot()
    result = cb.apply()
    refused(cb, before, result, "hybrid-decode-pad requires rope-cpu-cache, which comes later in the order")


def test_requires_cycle_refused(cb):
    cb.edit_pack(lambda p: p["fixes"]["hybrid-decode-pad"].update(requires=["gdn-prefix-cache"]))
    before = cb.snapshot()
    result = cb.apply("gdn-prefix-cache", env=GDN_ENV)
    refused(cb, before, result, "requires cycle: hybrid-decode-pad -> gdn-prefix-cache -> hybrid-decode-pad")


def test_unknown_name_lists_known_names(cb):
    before = cb.snapshot()
    result = cb.apply("no-such-fix")
    refused(cb, before, result, "unknown fix no-such-fix for profile v0.26.0", "known: " + ", ".join(ORDER))


def test_named_fix_not_in_pack_refused(cb):
    before = cb.snapshot()
    result = cb.apply("whitespace-free-forced-tool-calls")
    refused(cb, before, result, "whitespace-free-forced-tool-calls: in profile v0.26.0's order but not in this pack")


@pytest.mark.parametrize(
    ("env", "found"), [({}, "VLLM_COMPACT_GDN unset"), ({"VLLM_COMPACT_GDN": "0"}, "VLLM_COMPACT_GDN=0")]
)
def test_env_guard_refused(cb, env, found):
    before = cb.snapshot()
    result = cb.apply("gdn-prefix-cache", env=env)
    refused(cb, before, result, f"gdn-prefix-cache needs VLLM_COMPACT_GDN=1, found {found}")


def test_lazy_mode_skips_and_records_compile_only_profile_fix(cb):
    result = cb.apply(env={"PT_HPU_LAZY_MODE": "1"})
    assert result.code == 0, result.out
    assert cb.read("vllm", "v1/sample/sampler.py") == PRISTINE[("vllm", "v1/sample/sampler.py")]
    record = cb.record_json()
    assert record["fixes"] == ["hybrid-decode-pad", "rope-cpu-cache"]
    assert "lazy mode" in record["skipped"]["sampling-rows-refresh"]
    assert "skipped sampling-rows-refresh" in result.out


def test_lazy_mode_refuses_named_compile_only_opt_in(cb):
    before = cb.snapshot()
    result = cb.apply("strict-think-end", env={"PT_HPU_LAZY_MODE": "1"})
    refused(cb, before, result, "strict-think-end runs only in compile mode, but this build is lazy mode")


# A made-up distribution (never on this Python's path): a fix's dependency, installed in the test site.
DEP = "cookbook-test-dep"


def needs(cb: Cookbook, fix: str, dists: dict[str, str], installed: str | None = None):
    """The pack says `fix` needs `dists`; with `installed`, DEP at that version is in the site."""
    cb.edit_pack(lambda pack: pack["fixes"][fix].update(dists=dists))
    if installed:
        meta = cb.site / f"{DEP.replace('-', '_')}-{installed}.dist-info" / "METADATA"
        meta.parent.mkdir(parents=True)
        meta.write_text(f"Metadata-Version: 2.1\nName: {DEP}\nVersion: {installed}\n")


@pytest.mark.parametrize("installed", ["0.2.4", "0.2.9", "0.2.4.post1", "0.2.10+cpu", "0.3"])
def test_dependency_in_range_applies_and_is_recorded(cb, installed):
    needs(cb, "hybrid-decode-pad", {DEP: ">=0.2.4,<1.0"}, installed)
    result = cb.apply()
    assert result.code == 0, result.out
    assert cb.record_json()["dists"] == {DEP: installed}


@pytest.mark.parametrize("installed", ["0.2.1", "0.2.4rc1", "0.2.4.dev3", "1.0.0"])
def test_dependency_out_of_range_refused(cb, installed):
    needs(cb, "hybrid-decode-pad", {DEP: ">=0.2.4,<1.0"}, installed)
    before = cb.snapshot()
    result = cb.apply()
    refused(cb, before, result, f"hybrid-decode-pad needs {DEP}>=0.2.4,<1.0, found {DEP} {installed}: install")


def test_dependency_not_installed_refused(cb):
    needs(cb, "strict-think-end", {DEP: ">=0.2.4"})
    before = cb.snapshot()
    assert cb.apply().code == 0 and cb.run("--revert").code == 0  # not selected: not checked
    result = cb.apply("strict-think-end")
    refused(cb, before, result, f"strict-think-end needs {DEP}>=0.2.4, which is not installed in {cb.site}")


def test_dependency_found_on_the_running_pythons_path(cb):
    # With --site, what is not in DIR is looked for where the running Python imports from (the lab's case:
    # the release tree in DIR, its dependencies in the lab's environment).
    import importlib.metadata

    needs(cb, "hybrid-decode-pad", {"pytest": ">=1"})
    result = cb.apply()
    assert result.code == 0, result.out
    assert cb.record_json()["dists"] == {"pytest": importlib.metadata.version("pytest")}


@pytest.mark.parametrize("spec", [">0.2", "0.2.4", ">=", ">=0.2.4,", "~=0.2.4", ">=x.y"])
def test_a_pack_with_a_malformed_dependency_range_is_refused(cb, spec):
    needs(cb, "hybrid-decode-pad", {DEP: spec}, "0.2.9")
    before = cb.snapshot()
    result = cb.apply()
    if spec == ">0.2":  # a well-formed range: the control
        assert result.code == 0, result.out
        return
    refused(cb, before, result, f"fix hybrid-decode-pad: 'dists' {DEP}: {spec!r} is not a version range")


@pytest.mark.parametrize(("version", "spec", "inside"), [
    ("0.2.4", ">=0.2.4", True), ("0.2.3", ">=0.2.4", False), ("0.2.10", ">=0.2.4", True),
    ("0.2.4rc1", ">=0.2.4", False), ("0.2.4rc1", ">=0.2.3", True), ("0.2.4.0", "==0.2.4", True),
    ("0.2.4.post2", "<=0.2.4", True), ("1.0.0", "<1.0", False), ("0.9.9", "<1", True),
    ("0.2.9", "!=0.2.9", False), ("0.2.9", ">0.2.8,<0.3", True), ("v0.2.9", ">=0.2.4", True),
    ("unknown", ">=0", False),
])
def test_version_ranges_compare_releases(version, spec, inside):
    assert load_module().in_range(version, spec) is inside


# ------------------------------------------------------------------------------------- image match


def test_version_mismatch_refused(cb):
    cb.set_version("vllm_gaudi", "0.25.1")
    before = cb.snapshot()
    result = cb.apply()
    refused(cb, before, result, "vllm_gaudi: installed version 0.25.1, profile v0.26.0 is for 0.26.0")


def test_unaccepted_commit_refused(cb):
    cb.set_commit("vllm", "gdeadbeef0")
    before = cb.snapshot()
    result = cb.apply()
    refused(cb, before, result, "vllm: installed commit deadbeef0", "nor an accepted one (ffd46bfab)")


def test_accepted_commit_reported_and_applied(cb):
    result = cb.apply("--quiet")
    assert result.code == 0, result.out
    assert "note: vllm: installed commit ffd46bfab is not the profile's 568afb3a1380," in result.out
    assert "accepted: the PyPI wheel's build revision" in result.out
    assert "self.pad_id = -1" in cb.read("vllm_gaudi", RUNNER)


def test_missing_commit_is_not_recorded_but_fine(cb):
    cb.write("vllm_gaudi", "_version.py", "__version__ = version = '0.26.0'\n")
    result = cb.apply()
    assert result.code == 0, result.out
    assert cb.record_json()["packages"]["vllm_gaudi"]["commit"] is None


def test_wrong_file_hashes_all_listed_together(cb):
    edited, edited_too = "edited\n", "edited too\n"
    cb.write("vllm", "v1/sample/sampler.py", edited)
    cb.write("vllm_gaudi", RUNNER, edited_too)
    cb.set_version("vllm", "0.26.1")
    before = cb.snapshot()
    result = cb.apply()
    refused(
        cb,
        before,
        result,
        "(3 problems)",
        "vllm: installed version 0.26.1",
        f"vllm/v1/sample/sampler.py (target of sampling-rows-refresh): sha256 {sha(edited)}, "
        f"the pristine release file has {sha(PRISTINE[('vllm', 'v1/sample/sampler.py')])}",
        f"vllm_gaudi/{RUNNER} (target of hybrid-decode-pad, rope-cpu-cache): sha256 {sha(edited_too)}",
    )


def test_missing_target_file_refused(cb):
    (cb.site / "vllm" / "v1" / "sample" / "sampler.py").unlink()
    before = cb.snapshot()
    result = cb.apply()
    refused(cb, before, result, "vllm/v1/sample/sampler.py (target of sampling-rows-refresh) is missing")


def test_missing_package_refused(cb):
    shutil.rmtree(cb.site / "vllm")
    before = cb.snapshot()
    result = cb.apply()
    refused(cb, before, result, "package vllm is not installed in")


# ----------------------------------------------------------------------------------------- patches


def test_corrupt_patch_refused_tree_untouched(cb):
    cb.rewrite_patch("hybrid-decode-pad", lambda text: "".join(text.splitlines(keepends=True)[:-3]))
    before = cb.snapshot()
    result = cb.apply()
    # Caught while reading the diffs, before anything is staged.
    refused(cb, before, result, "hybrid-decode-pad: patch hybrid-decode-pad/0001-vllm_gaudi.patch is not a usable "
            "-p1 unified diff: the last hunk is cut short")


def test_patch_touching_undeclared_file_refused(cb):
    cb.edit_pack(lambda p: p["fixes"]["gdn-prefix-cache"].update(targets=p["fixes"]["gdn-prefix-cache"]["targets"][:1]))
    before = cb.snapshot()
    result = cb.apply("gdn-prefix-cache", env=GDN_ENV)
    refused(
        cb,
        before,
        result,
        f"gdn-prefix-cache: patch gdn-prefix-cache/0001-vllm_gaudi.patch touches vllm_gaudi/{RUNNER}, "
        "which gdn-prefix-cache does not list in its targets",
    )


def test_patch_file_sha_mismatch_refused(cb):
    patch = cb.patch_file("rope-cpu-cache")
    patch.write_text(patch.read_text() + " \n")
    before = cb.snapshot()
    result = cb.apply()
    refused(
        cb,
        before,
        result,
        f"rope-cpu-cache: patch rope-cpu-cache/0001-vllm_gaudi.patch has sha256 {sha(patch.read_bytes())}",
    )


def test_second_fix_failing_leaves_tree_byte_identical(cb):
    # rope-cpu-cache's context no longer matches what hybrid-decode-pad produced
    cb.rewrite_patch("rope-cpu-cache", lambda text: text.replace(" self.block_size = 128", " self.block_size = 256"))
    before = cb.snapshot()
    result = cb.apply()
    refused(cb, before, result, "rope-cpu-cache: patch rope-cpu-cache/0001-vllm_gaudi.patch does not apply", RUNNER)
    assert "self.pad_id = 0" in cb.read("vllm_gaudi", RUNNER)


def test_failure_while_replacing_files_rolls_back(cb, monkeypatch, capsys):
    module = load_module()
    monkeypatch.delenv("VLLM_COMPACT_GDN", raising=False)
    monkeypatch.delenv("PT_HPU_LAZY_MODE", raising=False)
    real_replace, calls = os.replace, []

    def flaky_replace(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(module.os, "replace", flaky_replace)
    before = cb.snapshot()
    args = ["--profile", PROFILE, "--site", str(cb.site), "--record", str(cb.record), "--pack", str(cb.pack_path)]
    code = module.main(args)
    out = capsys.readouterr()
    refused(cb, before, Result(code, out.out + out.err), "No space left on device", "every file was restored")
    assert len(calls) > 2  # the first replaced file was put back


def test_unwritable_record_rolls_back(cb):
    blocker = cb.root / "not-a-dir"
    blocker.write_text("")
    before = cb.snapshot()
    result = cb.run("--profile", PROFILE, record=blocker / "fix-record.json")
    assert result.code == 1, result.out
    assert "could not write the record" in result.out and "every file was restored" in result.out
    assert cb.snapshot() == before


def test_falls_back_to_patch_without_git(cb, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "patch").symlink_to(shutil.which("patch"))
    result = cb.apply("gdn-prefix-cache", env=GDN_ENV, path=str(bin_dir))
    assert result.code == 0, result.out
    assert "with patch" in result.out
    assert cb.read("vllm_gaudi", RUNNER) == cb.expected[("vllm_gaudi", RUNNER)]
    assert cb.run("--revert", path=str(bin_dir)).code == 0
    assert cb.read("vllm_gaudi", RUNNER) == PRISTINE[("vllm_gaudi", RUNNER)]


# ----------------------------------------------------------------------------------- record, reruns


def test_second_run_is_already_applied_and_changes_nothing(cb):
    assert cb.apply().code == 0
    before, mtimes, record_mtime = cb.snapshot(), cb.mtimes(), cb.record.stat().st_mtime_ns
    result = cb.apply()
    assert result.code == 0, result.out
    assert "already applied: 3 fixes, 2 files match the record" in result.out
    assert cb.snapshot() == before and cb.mtimes() == mtimes
    assert cb.record.stat().st_mtime_ns == record_mtime


def test_different_selection_on_applied_tree_refused(cb):
    assert cb.apply().code == 0
    before, record = cb.snapshot(), cb.record.read_bytes()
    result = cb.apply("gdn-prefix-cache", env=GDN_ENV)
    assert result.code == 1
    assert "but this run selects profile v0.26.0 with" in result.out and "revert first" in result.out
    assert cb.snapshot() == before and cb.record.read_bytes() == record


def test_edited_tree_with_record_refused(cb):
    assert cb.apply().code == 0
    cb.write("vllm", "v1/sample/sampler.py", "edited\n")
    before = cb.snapshot()
    result = cb.apply()
    assert result.code == 1
    assert "tree changed since" in result.out and "vllm/v1/sample/sampler.py" in result.out
    assert cb.snapshot() == before


def test_dry_run_changes_nothing(cb):
    before, mtimes = cb.snapshot(), cb.mtimes()
    result = cb.apply("--dry-run")
    assert result.code == 0, result.out
    assert f"would change vllm_gaudi/{RUNNER} (hybrid-decode-pad, rope-cpu-cache)" in result.out
    assert cb.snapshot() == before and cb.mtimes() == mtimes
    assert not cb.record.exists()


def test_record_content(cb):
    result = cb.apply("gdn-prefix-cache", env=GDN_ENV)
    assert result.code == 0, result.out
    record = cb.record_json()
    assert cb.record.read_text() == json.dumps(record, indent=2, sort_keys=True) + "\n"
    assert record["format"] == 1 and record["profile"] == PROFILE
    assert record["pack_sha256"] == sha(cb.pack_path.read_bytes())
    assert record["fixes"] == ["sampling-rows-refresh", "hybrid-decode-pad", "rope-cpu-cache", "gdn-prefix-cache"]
    assert record["not_in_pack"] == ["prompt-order", "whitespace-free-forced-tool-calls"]
    assert record["skipped"] == {}
    assert record["env"] == GDN_ENV
    gaudi, vllm = record["packages"]["vllm_gaudi"], record["packages"]["vllm"]
    assert gaudi == {"location": str(cb.site / "vllm_gaudi"), "version": "0.26.0", "commit": "b059f9c9", "notes": []}
    assert vllm["commit"] == "ffd46bfab" and "accepted" in vllm["notes"][0]
    files = {(f["package"], f["path"]): f for f in record["files"]}
    assert set(files) == {("vllm", "v1/sample/sampler.py"), ("vllm_gaudi", RUNNER), ("vllm_gaudi", "ops/hpu_gdn.py")}
    for key, entry in files.items():
        assert entry["before"] == sha(PRISTINE[key])
        assert entry["after"] == sha(cb.read(*key)) == sha(cb.expected[key])
    assert files[("vllm_gaudi", RUNNER)]["fixes"] == ["hybrid-decode-pad", "rope-cpu-cache", "gdn-prefix-cache"]


# --------------------------------------------------------------------------------------------- check


def test_check_ok(cb):
    assert cb.apply("gdn-prefix-cache", env=GDN_ENV).code == 0
    result = cb.run("--check", env=GDN_ENV)
    assert result.code == 0, result.out
    assert result.out == "apply_all: ok: 4 fixes, 3 files match the record (profile v0.26.0)\n"


def test_check_catches_edited_and_missing_files(cb):
    assert cb.apply().code == 0
    cb.write("vllm_gaudi", RUNNER, "edited\n")
    (cb.site / "vllm" / "v1" / "sample" / "sampler.py").unlink()
    result = cb.run("--check")
    assert result.code == 1
    assert f"vllm_gaudi/{RUNNER} (patched by hybrid-decode-pad, rope-cpu-cache) was edited" in result.out
    assert "vllm/v1/sample/sampler.py (patched by sampling-rows-refresh) is missing" in result.out


def test_check_without_record(cb):
    result = cb.run("--check")
    assert result.code == 1
    assert f"no fix record at {cb.record}: this image was not built by the cookbook" in result.out


@pytest.mark.parametrize(
    ("env", "found"), [({"VLLM_COMPACT_GDN": "0"}, "VLLM_COMPACT_GDN=0"), ({}, "VLLM_COMPACT_GDN unset")]
)
def test_check_refuses_wrong_env(cb, env, found):
    assert cb.apply("gdn-prefix-cache", env=GDN_ENV).code == 0
    result = cb.run("--check", env=env)
    assert result.code == 1
    assert f"need VLLM_COMPACT_GDN=1, found {found}" in result.out
    assert "-e VLLM_COMPACT_GDN=1" in result.out


def test_check_refuses_the_other_mode(cb):
    assert cb.apply().code == 0  # built in compile mode
    result = cb.run("--check", env={"PT_HPU_LAZY_MODE": "1"})
    assert result.code == 1
    assert "applied for compile mode, but PT_HPU_LAZY_MODE says lazy mode" in result.out
    assert cb.run("--check", env={"PT_HPU_LAZY_MODE": "0"}).code == 0


def test_check_is_fast_and_imports_little(cb, capsys):
    assert cb.apply().code == 0
    module = load_module()
    start = time.perf_counter()
    code = module.main(["--check", "--record", str(cb.record), "--site", str(cb.site)])
    elapsed = time.perf_counter() - start
    assert code == 0, capsys.readouterr()
    assert elapsed < 0.1, f"--check took {elapsed * 1000:.1f} ms"

    probe = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('apply_all', {str(SCRIPT)!r})\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        f"assert module.main(['--check', '--record', {str(cb.record)!r}]) == 0\n"
        "print(sorted(m for m in ('subprocess', 'tempfile', 'importlib.metadata') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-I", "-S", "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


# -------------------------------------------------------------------------------------------- revert


def test_revert_restores_byte_identical_tree(cb):
    pristine = cb.snapshot()
    assert cb.apply("gdn-prefix-cache", "strict-think-end", env=GDN_ENV).code == 0
    assert cb.snapshot() != pristine
    applied = cb.snapshot()
    dry = cb.run("--revert", "--dry-run")
    assert dry.code == 0 and "would revert 5 fixes" in dry.out
    assert cb.snapshot() == applied and cb.record.exists()
    result = cb.run("--revert")
    assert result.code == 0, result.out
    assert "reverted 5 fixes: 4 files restored" in result.out
    assert cb.snapshot() == pristine
    assert not cb.record.exists()


def test_revert_refuses_edited_tree(cb):
    assert cb.apply().code == 0
    cb.write("vllm_gaudi", RUNNER, cb.read("vllm_gaudi", RUNNER) + "# local edit\n")
    before = cb.snapshot()
    result = cb.run("--revert")
    assert result.code == 1
    assert "cannot revert" in result.out and f"vllm_gaudi/{RUNNER}" in result.out
    assert cb.snapshot() == before and cb.record.exists()


# ---------------------------------------------------------------------------------------- list, misc


def test_list(cb):
    result = cb.run("--list", "--profile", PROFILE)
    assert result.code == 0, result.out
    lines = result.out.splitlines()
    assert lines[0] == "apply_all: profile v0.26.0 (gaudi_sw 1.24.1): 7 fixes, 5 in this pack"
    rows = {line.split()[1]: line.split()[2:] for line in lines[1:]}
    assert list(rows) == ORDER
    assert rows["prompt-order"] == ["profile", "not", "in", "this", "pack"]
    assert rows["gdn-prefix-cache"][:3] == ["opt-in", "in", "pack"]
    assert "gdn-prefix-cache (test fix)" in result.out
    assert rows["whitespace-free-forced-tool-calls"] == ["opt-in", "not", "in", "this", "pack"]


def test_finds_packages_on_sys_path_without_site(cb):
    # find_spec and importlib.metadata locate them; importing vllm_gaudi would need Gaudi software
    cb.write("vllm_gaudi", "__init__.py", "raise ImportError('needs Gaudi software')\n")
    result = cb.apply(site=False, env={"PYTHONPATH": str(cb.site)})
    assert result.code == 0, result.out
    assert "self.pad_id = -1" in cb.read("vllm_gaudi", RUNNER)
    record = cb.record_json()
    assert record["packages"]["vllm_gaudi"]["location"] == str(cb.site / "vllm_gaudi")
    assert record["packages"]["vllm"]["version"] == "0.26.0"
    assert cb.run("--check", site=False).code == 0  # uses the record's locations


def test_usage_error_exits_2(cb):
    result = cb.run()
    assert result.code == 2
    assert "apply_all: usage error: say --profile NAME" in result.out


def imports(path: Path) -> tuple[set[str], set[str]]:
    """(every module a file imports, anywhere; the plain imports at its top level, try blocks included)."""
    tree = ast.parse(path.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0
            imported.add(node.module.split(".")[0])
    body = [n for node in tree.body for n in ([node, *node.body] if isinstance(node, ast.Try) else [node])]
    top_level = {alias.name for node in body if isinstance(node, ast.Import) for alias in node.names}
    assert not [node for node in body if isinstance(node, ast.ImportFrom)]
    return imported, top_level


def test_imports_only_the_standard_library():
    imported, top_level = imports(SCRIPT)
    assert imported - {"fixplan"} <= sys.stdlib_module_names, imported - sys.stdlib_module_names
    assert top_level == {"argparse", "fixplan", "json", "os", "sys"}
    imported, top_level = imports(PLAN)
    assert imported == top_level == {"hashlib"}
