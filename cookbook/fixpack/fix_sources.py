"""Pristine release sources for fix work: copies of the upstream cache's files, staged in a folder
with the pack's earlier fixes applied in order. Used by `fixes.verify` and `fixes.new`."""

from __future__ import annotations

import shutil
from pathlib import Path

from inimage import patches

from ..host import upstream
from ..host.errors import FixError
from ..recipe.fixes import FixSpec, ProfileSpec, pins_of


def package_roots(profile: ProfileSpec) -> dict[str, Path]:
    """Where each package's pristine files are in the upstream cache, refusing if it is empty."""
    gaudi_root, vllm_root = upstream.require(pins_of(profile))
    return {"vllm_gaudi": gaudi_root / "vllm_gaudi", "vllm": vllm_root / "vllm"}


def stage(roots: dict[str, Path], files: set[tuple[str, str]], dest: Path) -> None:
    for package, path in sorted(files):
        src = roots[package] / path
        if not src.is_file():
            raise FixError(f"{package}/{path} is not in the release's sources ({src})")
        target = dest / package / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, target)


def apply_patch(fix_folder: Path, name: str, file: str, package: str, staging: Path, *,
                reverse: bool = False, check_only: bool = False) -> tuple[bool, str]:
    """Run the image's patch applier's own patch tool on one patch inside the staging copy."""
    tool = patches.find_patch_tool()
    cwd = staging / package
    cwd.mkdir(parents=True, exist_ok=True)
    return patches.run_patch_tool(tool, str(fix_folder / name / file), str(cwd), str(staging), reverse, check_only)


def targets_of(specs: dict[str, FixSpec]) -> set[tuple[str, str]]:
    return {(t.package, f) for spec in specs.values() for t in spec.targets for f in t.files}
