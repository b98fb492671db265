"""A small fix pack the tests make against the real release sources (the upstream cache), through
the same `fixes.new` path an engineer uses: two generic fixes, one per package, the second requiring
the first. Its profile is the real v0.26.0 profile with the two put first in the order."""

from __future__ import annotations

from pathlib import Path

import yaml

from cookbook import fix_new, fixes
from cookbook.fix_sources import package_roots
from cookbook.paths import FIXES

RUNNER = "v1/worker/hpu_model_runner.py"
REQUEST = "v1/request.py"
MARK = "# cookbook selftest: this line was added by a test fix\n"


def edited_copy(src_root: Path, rel: str, dest: Path) -> Path:
    """A copy of one package file with a marker line inserted after its first line."""
    target = dest / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    lines = (src_root / rel).read_text().splitlines(keepends=True)
    target.write_text("".join(lines[:1] + [MARK] + lines[1:]))
    return dest


def make(tmp: Path, names=("selftest-runner", "selftest-request"), only: bool = False) -> Path:
    """`only`: the profile's order is the two test fixes alone, so an image built with this pack has
    every fix written (the publish tests need one)."""
    pack = tmp / "fixes"
    (pack / "profiles").mkdir(parents=True)
    profile = yaml.safe_load((FIXES / "profiles" / "v0.26.0.yaml").read_text())
    profile["order"] = list(names) + ([] if only else profile["order"])
    if only:
        profile["opt_in"] = []
    (pack / "profiles" / "v0.26.0.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    roots = package_roots(fixes.load_profile("v0.26.0", pack))
    runner, request = names
    fix_new.new_fix(runner, edited_copy(roots["vllm_gaudi"], RUNNER, tmp / "edit-gaudi"), "vllm_gaudi", "v0.26.0",
                    title="Test fix on the runner", why="tests need a real patch", how="adds a comment line",
                    fixes_dir=pack)
    fix_new.new_fix(request, edited_copy(roots["vllm"], REQUEST, tmp / "edit-vllm"), "vllm", "v0.26.0",
                    title="Test fix on vLLM", why="tests need a patch on each package", how="adds a comment line",
                    requires=[runner], fixes_dir=pack)
    fixes.write_index(fixes_dir=pack)
    return pack

