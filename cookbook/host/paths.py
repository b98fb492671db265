"""Where things are: the checkout, and the per-user cache the cookbook fills."""

from __future__ import annotations

import os
from pathlib import Path

import inimage

from .names import PROJECT

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes"
FIXES = ROOT / "fixes"
# The image's own package (the fix pack's applier and fixplan), always the one this Python imports:
# copied whole into every build context, and run by the fix lab from the folder holding it.
ENGINE = Path(inimage.__file__).resolve().parent
DOCKERFILES = ROOT / "dockerfiles"
RELEASES = ROOT / "releases"


def cache_dir() -> Path:
    """The cookbook's cache: upstream sources, the stand-in rootfs, check results."""
    env = os.environ.get("COOKBOOK_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / PROJECT


def fixes_dir() -> Path:
    """The fix pack: fix folders and profiles. COOKBOOK_FIXES_DIR points elsewhere (tests use a pack
    they make); the applier that reads it is always ENGINE."""
    env = os.environ.get("COOKBOOK_FIXES_DIR")
    return Path(env).resolve() if env else FIXES


def releases_dir() -> Path:
    """The release files (releases/<tag>.yaml). COOKBOOK_RELEASES_DIR points elsewhere (tests add a release
    in a tree they make, beside a fix pack of their own in COOKBOOK_FIXES_DIR)."""
    env = os.environ.get("COOKBOOK_RELEASES_DIR")
    return Path(env).resolve() if env else RELEASES
