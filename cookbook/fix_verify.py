"""`invoke fixes.verify`: apply the whole pack, in order, to pristine copies of the release's sources
and say of each fix whether it applies, is already upstream, or conflicts (with the failing hunk)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import fixes
from .fix_sources import apply_patch, package_roots, stage, targets_of
from .fixes import fixplan
from .paths import fixes_dir as default_fixes_dir


@dataclass(frozen=True)
class Outcome:
    fix: str
    status: str  # applies | already upstream | conflicts | target differs | not written
    detail: str = ""
    patch: fixes.PatchRef | None = None  # for a conflict: the patch that failed, and what the tool said
    said: str = ""


def verify(profile_name: str, fixes_dir: Path | None = None) -> list[Outcome]:
    fixes_dir = fixes_dir or default_fixes_dir()
    profile = fixes.load_profile(profile_name, fixes_dir)
    present = fixes.resolve(profile, profile.order, fixes_dir)
    roots = package_roots(profile)
    out: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="cookbook-verify.") as tmp:
        staging = Path(tmp)
        stage(roots, targets_of(present), staging)
        for name in profile.order:
            if name not in present:
                out.append(Outcome(name, "not written"))
                continue
            out.append(_verify_one(name, present[name], roots, staging, fixes_dir))
    return out


def _verify_one(name: str, spec: fixes.FixSpec, roots: dict[str, Path], staging: Path,
                fixes_dir: Path) -> Outcome:
    for t in spec.targets:
        for path, sha in t.files.items():
            found = fixplan.sha256_file(roots[t.package] / path)
            if found != sha:
                return Outcome(name, "target differs",
                               f"{t.package}/{path}: the release has {found[:12]}, fix.yaml says {sha[:12]}")
    return patch_verdict(name, spec, staging, fixes_dir)


def patch_verdict(name: str, spec: fixes.FixSpec, staging: Path, fixes_dir: Path) -> Outcome:
    """Check a fix's patches against the staged files; when they all apply, apply them so the fixes after
    it see the tree they were made against. Also what `fixes.drift` asks of a newer release."""
    for patch in spec.patches:
        ok, said = apply_patch(fixes_dir, name, patch.file, patch.package, staging, check_only=True)
        if ok:
            continue
        back, _ = apply_patch(fixes_dir, name, patch.file, patch.package, staging, reverse=True, check_only=True)
        if back:
            return Outcome(name, "already upstream", f"{patch.file} reverse-applies: its change is in the release")
        return Outcome(name, "conflicts", f"{patch.file}: {said}", patch, said)
    for patch in spec.patches:  # all of the fix's patches check out: apply them for the fixes after it
        apply_patch(fixes_dir, name, patch.file, patch.package, staging)
    return Outcome(name, "applies")
