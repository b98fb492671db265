"""`invoke fixes.verify`: apply the whole pack, in order, to pristine copies of the release's sources
and say of each fix whether it applies, is already upstream, or conflicts (with the failing hunk)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from inimage import fixplan

from ..host.errors import PackFailure, UsageError
from ..host.paths import fixes_dir as default_fixes_dir
from ..recipe import fixes, release
from .fix_sources import apply_patch, package_roots, stage, targets_of


@dataclass(frozen=True)
class Outcome:
    fix: str
    status: str  # applies | already upstream | conflicts | target differs | not written
    detail: str = ""
    patch: fixes.PatchRef | None = None  # for a conflict: the patch that failed, and what the tool said
    said: str = ""


def verify(profile_name: str | None = None, fixes_dir: Path | None = None) -> list[Outcome]:
    fixes_dir = fixes_dir or default_fixes_dir()
    profile = fixes.load_profile(release.profile_or_default(profile_name), fixes_dir)
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


def task(profile_name: str | None, base: str | None = None, site: str | None = None, dry_run: bool = False) -> None:
    """`invoke fixes.verify`: the pack applied in order to pristine upstream sources, fix by fix, or with
    `base` to that image's own files (fix_base.task, where exit 4 comes from)."""
    from . import fix_base

    if site and not base:
        raise UsageError("--site goes with --base IMAGE", hint="invoke fixes.verify --base IMAGE --site DIR")
    if base:
        fix_base.task(base, profile_name, site, dry_run)
        return
    if dry_run:
        print(f"would apply profile {release.profile_or_default(profile_name)}'s written fixes in order to pristine "
              "copies from the upstream cache")
        return
    bad = 0
    for outcome in verify(profile_name):
        print(f"{outcome.fix:36} {outcome.status}" + (f"\n    {outcome.detail}" if outcome.detail else ""))
        bad += outcome.status in ("conflicts", "target differs")
    if bad:
        raise PackFailure(f"{bad} fix(es) do not apply to the pristine release")


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
    """Apply a fix's patches in order to the staged files, as the applier does (a fix may split one
    file's change into several patches, each made against the ones before it), so the fixes after it
    see the tree they were made against. On the first patch that does not apply, take back the ones
    applied and say why. Also what `fixes.drift` asks of a newer release."""
    applied: list[fixes.PatchRef] = []
    for patch in spec.patches:
        ok, said = apply_patch(fixes_dir, name, patch.file, patch.package, staging, check_only=True)
        if ok:
            apply_patch(fixes_dir, name, patch.file, patch.package, staging)
            applied.append(patch)
            continue
        back, _ = apply_patch(fixes_dir, name, patch.file, patch.package, staging, reverse=True, check_only=True)
        for done in reversed(applied):
            apply_patch(fixes_dir, name, done.file, done.package, staging, reverse=True)
        if back:
            return Outcome(name, "already upstream", f"{patch.file} reverse-applies: its change is in the release")
        return Outcome(name, "conflicts", f"{patch.file}: {said}", patch, said)
    return Outcome(name, "applies")
