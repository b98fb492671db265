"""Small fix packs the tests make against the real release sources (the upstream cache), through the
same `fixes.new` path an engineer uses. `make` is two generic fixes, one per package, the second
requiring the first; `build` makes any pack of one-file edits. Each profile is the real v0.26.0
profile with the test's fixes put first in the order."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import yaml

from cookbook.fixpack import fix_new
from cookbook.fixpack.fix_sources import package_roots
from cookbook.host.paths import FIXES
from cookbook.recipe import fixes

RUNNER = "v1/worker/hpu_model_runner.py"
REQUEST = "v1/request.py"
MARK = "# cookbook selftest: this line was added by a test fix\n"


def mark_first_line(text: str) -> str:
    """The file with the marker line inserted after its first line."""
    lines = text.splitlines(keepends=True)
    return "".join(lines[:1] + [MARK] + lines[1:])


def mark_in(qualname: str) -> Callable[[str], str]:
    """An edit that inserts the marker as the first statement of a def (Class.method or function)."""

    def edit(text: str) -> str:
        node = find(text, qualname)
        first = node.body[0]
        lines = text.splitlines(keepends=True)
        lines.insert(first.lineno - 1, " " * first.col_offset + MARK)
        return "".join(lines)

    return edit


def find(text: str, qualname: str) -> ast.AST:
    node = ast.parse(text)
    for part in qualname.split("."):
        node = next(n for n in node.body if getattr(n, "name", None) == part)
    return node


NONE_FOUND = {"looked": "2026-12-06", "found": []}  # fix.yaml's `upstream` for a test fix


def build(tmp: Path, edits: list[tuple[str, str, str, Callable[[str], str]]],
          requires: dict[str, list[str]] | None = None, only: bool = False) -> Path:
    """A pack of fixes (name, package, file, edit), each made by `fixes.new` from an edited copy.
    `only`: the profile's order is these test fixes alone, so an image built with this pack has every
    fix written (the publish tests need one)."""
    pack = tmp / "fixes"
    (pack / "profiles").mkdir(parents=True)
    profile = yaml.safe_load((FIXES / "profiles" / "v0.26.0.yaml").read_text())
    profile["order"] = [name for name, *_ in edits] + ([] if only else profile["order"])
    if only:
        profile["opt_in"] = []
    (pack / "profiles" / "v0.26.0.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    roots = package_roots(fixes.load_profile("v0.26.0", pack))
    for name, package, rel, edit in edits:
        target = tmp / f"edit-{name}" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(edit((roots[package] / rel).read_text()))
        fix_new.new_fix(name, tmp / f"edit-{name}", package, "v0.26.0", title=f"Test fix {name}",
                        why="tests need a real patch", how="adds a comment line", upstream=NONE_FOUND,
                        requires=(requires or {}).get(name), fixes_dir=pack)
    fixes.write_index(fixes_dir=pack)
    return pack


def make(tmp: Path, names=("selftest-runner", "selftest-request"), only: bool = False) -> Path:
    runner, request = names
    return build(tmp, [(runner, "vllm_gaudi", RUNNER, mark_first_line), (request, "vllm", REQUEST, mark_first_line)],
                 requires={request: [runner]}, only=only)
