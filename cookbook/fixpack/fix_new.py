"""`invoke fixes.new`: scaffold a fix from an edited copy of a package.

The patch is the diff between the edited copy and the pristine release with the pack's earlier fixes
applied (patches apply in order, each on top of those before it); the targets carry the pristine
sha256 of each changed file, which is what the applier checks an image against."""

from __future__ import annotations

import difflib
import subprocess
import tempfile
from pathlib import Path

import yaml

from inimage import fixplan

from ..host.errors import FixError, UsageError
from ..host.paths import fixes_dir as default_fixes_dir
from ..host.progress import say
from ..recipe import fixes, release
from .fix_sources import apply_patch, package_roots, stage, targets_of

PLACEHOLDER = "TODO"


def changed_files(pristine_root: Path, edited_root: Path) -> list[str]:
    """Files of the edited copy whose bytes differ from the release's (new files are not fixes)."""
    out = []
    for path in sorted(edited_root.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        rel = path.relative_to(edited_root).as_posix()
        original = pristine_root / rel
        if original.is_file() and original.read_bytes() != path.read_bytes():
            out.append(rel)
    return out


def dropped_lines(pristine: bytes, earlier: bytes, edited: bytes) -> list[str]:
    """Lines the earlier fixes added to a file (pristine -> earlier) that the edited copy lacks: an
    edited copy made from the pristine release would silently revert them in this fix's patch."""
    before, after = pristine.decode().splitlines(), earlier.decode().splitlines()
    added = [line for line in difflib.ndiff(before, after) if line.startswith("+ ")]
    have = set(edited.decode().splitlines())
    return [line[2:] for line in added if line[2:] not in have]


def unified_diff(rel: str, before: bytes, after: bytes) -> str:
    """A -p1 diff of one file, relative to the package root, made by git (handles missing newlines)."""
    with tempfile.TemporaryDirectory(prefix="cookbook-diff.") as tmp:
        for side, data in (("a", before), ("b", after)):
            path = Path(tmp) / side / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        out = subprocess.run(["git", "diff", "--no-index", "--no-prefix", "--no-color", "--", f"a/{rel}", f"b/{rel}"],
                             cwd=tmp, capture_output=True)
        if out.returncode not in (0, 1):
            raise FixError(f"git diff failed on {rel}: {out.stderr.decode(errors='replace').strip()}")
        try:
            text = out.stdout.decode("utf-8")
        except UnicodeDecodeError:
            text = ""
        # Keep the ---/+++ headers and hunks; drop git's `diff --git` and index lines.
        lines = text.splitlines(keepends=True)
        start = next((i for i, line in enumerate(lines) if line.startswith("--- ")), None)
        if start is None and out.stdout:  # git's "Binary files differ", or bytes that are not UTF-8
            raise FixError(f"{rel}: no text diff (a binary file, or one that is not UTF-8)",
                           hint="a fix patches Python sources")
        return "".join(lines[start:]) if start is not None else ""


def new_fix(name: str, edited: Path, package: str, profile_name: str | None = None, *, title: str = PLACEHOLDER,
            why: str = PLACEHOLDER, how: str = PLACEHOLDER, requires: list[str] | None = None,
            env: dict[str, str] | None = None, upstream: dict | None = None, fixes_dir: Path | None = None,
            dry_run: bool = False) -> Path:
    fixes_dir = fixes_dir or default_fixes_dir()
    if package not in fixes.PACKAGES:
        raise UsageError(f"unknown package {package!r}", hint="--package is one of: " + ", ".join(fixes.PACKAGES))
    profile_name = release.profile_or_default(profile_name)
    profile = fixes.load_profile(profile_name, fixes_dir)
    if not edited.is_dir():
        raise UsageError(f"--edited {edited}: no such folder",
                         hint=f"point it at an edited copy of the {package} package folder")
    if name not in profile.order:
        raise FixError(f"{name!r} is not in profile {profile_name}'s order",
                       hint=f"add it to fixes/profiles/{profile_name}.yaml where it belongs, then run this again")
    folder = fixes_dir / name
    if (folder / "fix.yaml").exists():
        raise FixError(f"fix {name} exists already ({folder})", hint="edit it, or remove it first")
    # The lab test may come first (it is written before the fix: docs/write-a-fix.md); nothing else may.
    if folder.exists() and (not folder.is_dir() or any(not fixes.is_lab_file(p, folder) for p in folder.iterdir())):
        raise UsageError(f"{folder} exists and holds more than the fix's lab tests; not writing into it",
                         hint="move it away first")
    roots = package_roots(profile)
    files = changed_files(roots[package], edited)
    if not files:
        raise FixError(f"{edited} does not differ from the pristine {package} sources",
                       hint="point --edited at an edited copy of the package folder")
    earlier = fixes.resolve(profile, profile.order[: profile.order.index(name)], fixes_dir)
    with tempfile.TemporaryDirectory(prefix="cookbook-new.") as tmp:
        staging = Path(tmp)
        stage(roots, targets_of(earlier) | {(package, f) for f in files}, staging)
        for fix, spec in earlier.items():
            for patch in spec.patches:
                ok, said = apply_patch(fixes_dir, fix, patch.file, patch.package, staging)
                if not ok:
                    raise FixError(f"earlier fix {fix} does not apply to the release: {said}",
                                   hint="run invoke fixes.verify")
        files = own_changes(files, earlier, package, roots[package], staging / package, edited)
        diff = "".join(unified_diff(f, (staging / package / f).read_bytes(), (edited / f).read_bytes())
                       for f in files)
    patch_name = f"0001-{name}.patch"
    spec = {
        "title": title, "why": why, "how": how,
        "targets": [{"package": package,
                     "files": {f: fixplan.sha256_file(roots[package] / f) for f in files}}],
        "patches": [{"package": package, "file": patch_name}],
        "requires": requires or [],
        "env": env or {},
        "modes": ["compile", "lazy"],
        "opt_in": name in profile.opt_in,
        # where upstream stands is looked up by hand: the loader refuses the TODO until it is
        "upstream": upstream or {"looked": PLACEHOLDER, "found": []},
    }
    if dry_run:
        print(yaml.safe_dump(spec, sort_keys=False))
        print(diff)
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    (folder / patch_name).write_text(diff)
    (folder / "fix.yaml").write_text(yaml.safe_dump(spec, sort_keys=False, width=100))
    lab_test = folder / f"test_fix_{name.replace('-', '_')}.py"  # where the lab looks (fix_lab.module_for)
    todo = [key for key, value in (("title", title), ("why", why), ("how", how)) if value == PLACEHOLDER]
    todo += [] if upstream else ["upstream"]
    if not lab_test.exists():  # one written first is kept
        lab_test.write_text(LAB_TEST.format(name=name))
        todo.append(f"its lab test ({lab_test.name})")
    say(f"fix {name}: {len(files)} file(s) into {folder}; fill in {', '.join(todo)}")
    return folder


# The lab test a new fix starts with: it fails on both trees, so the lab holds the fix as unproven
# until the test shows the bug on the pristine tree and its absence on the patched one.
LAB_TEST = '''"""{name}: the fix lab's proof (fails on the pristine release tree, passes on the patched one).
The lab runs it with the tree under test first on the path (the `tree` fixture); docs/write-a-fix.md."""

import pytest


def test_the_bug_shows_on_pristine_and_not_on_patched(tree):
    pytest.fail("not written yet: drive the release's code from `tree` so this fails before the fix")
'''


def own_changes(files: list[str], earlier: dict, package: str, pristine_root: Path, staged_root: Path,
                edited_root: Path) -> list[str]:
    """The files this fix changes, given the edited copy should hold the earlier fixes' changes too:
    files equal to pristine + earlier fixes are theirs alone (skipped); a file that lacks a line an
    earlier fix added is refused, since the patch would undo that fix."""
    own = []
    for rel in files:
        staged, edited = (staged_root / rel).read_bytes(), (edited_root / rel).read_bytes()
        if staged == edited:
            continue
        lost = dropped_lines((pristine_root / rel).read_bytes(), staged, edited)
        if lost:
            by = sorted(fix for fix, spec in earlier.items()
                        if any(t.package == package and rel in t.files for t in spec.targets))
            raise FixError(f"the edited {rel} lacks changes of earlier fix(es) {', '.join(by)} "
                           f"(first missing line: {lost[0].strip()!r}); this fix's patch would undo them",
                           hint="make the edited copy from a tree with the earlier fixes applied "
                                "(invoke fixes.lab --keep DIR lays one out as DIR/patched)")
        own.append(rel)
    if not own:
        raise FixError("the edited copy holds only the earlier fixes' changes, nothing of its own",
                       hint="edit the copy, then run this again")
    return own
