"""A synthetic release and pack for testing inimage: a site dir with vllm_gaudi and vllm, a small
profile whose patches are generated from edited copies, and the applier run as the image runs it
(a subprocess, by module name, from a copy of the package)."""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from cookbook.host.paths import ENGINE
from inimage import fixplan

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


@dataclass
class Result:
    code: int
    out: str


class Cookbook:
    """A site dir with the two packages, a pack dir (pack.json + patches), a record, and the inimage
    package copied whole into a lib folder of its own, run from there by module name as an image runs it."""

    def __init__(self, root: Path):
        self.root = root
        self.lib = root / "lib"
        shutil.copytree(ENGINE, self.lib / ENGINE.name, ignore=shutil.ignore_patterns("__pycache__"))
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
        cmd = [sys.executable, "-B", "-m", fixplan.APPLY_MODULE, *args, "--record", str(record or self.record)]
        if "--check" not in args:  # --check reads the pack only when told to, to compare it with the record
            cmd += ["--pack", str(self.pack_path)]
        if site:
            cmd += ["--site", str(self.site)]
        environ = {k: v for k, v in os.environ.items() if k not in ("VLLM_COMPACT_GDN", "PT_HPU_LAZY_MODE")}
        environ.update(env or {})
        if path is not None:
            environ["PATH"] = path
        proc = subprocess.run(cmd, capture_output=True, text=True, env=environ, timeout=60, cwd=self.lib)
        return Result(proc.returncode, proc.stdout + proc.stderr)

    def apply(self, *opt_in: str, **kw) -> Result:
        return self.run("--profile", PROFILE, *opt_in, **kw)

    def record_json(self) -> dict:
        return json.loads(self.record.read_text())


GDN_ENV = {"VLLM_COMPACT_GDN": "1"}


ALL_PACKED = ["sampling-rows-refresh", "hybrid-decode-pad", "rope-cpu-cache", "gdn-prefix-cache", "strict-think-end"]


def refused(cb: Cookbook, before: dict[str, bytes], result: Result, *phrases: str):
    """Exit 1, every phrase in the output, the tree byte-identical, and no record written."""
    assert result.code == 1, result.out
    for phrase in phrases:
        assert phrase in result.out, f"{phrase!r} not in:\n{result.out}"
    assert cb.snapshot() == before
    assert not cb.record.exists()


DEP = "cookbook-test-dep"


def needs(cb: Cookbook, fix: str, dists: dict[str, str], installed: str | None = None):
    """The pack says `fix` needs `dists`; with `installed`, DEP at that version is in the site."""
    cb.edit_pack(lambda pack: pack["fixes"][fix].update(dists=dists))
    if installed:
        meta = cb.site / f"{DEP.replace('-', '_')}-{installed}.dist-info" / "METADATA"
        meta.parent.mkdir(parents=True)
        meta.write_text(f"Metadata-Version: 2.1\nName: {DEP}\nVersion: {installed}\n")
