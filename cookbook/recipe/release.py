"""A vllm-gaudi release as one file of data: releases/<tag>.yaml.

It says the vllm-gaudi tag and commit, the vLLM version and commit (and the other build revisions of it
we accept), the Gaudi software version, the base image and its digest, and the fix profile made for it.
Everything that depends on the release reads it from here: a recipe's `base` and `fixes.profile`
(`release: <tag>` in the recipe), a profile's package pins (pack.json), the upstream sources the fix lab
lays out, and every task's default profile (the newest release's). Adding a release is adding a file
here and a profile under fixes/profiles/; no code names a release.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Annotated

from pydantic import Field, StrictStr

from ..host import grammar, upstream
from ..host.errors import RecipeError, where
from ..host.paths import releases_dir
from . import yamlsource
from .schema import BaseImage, Ident, Prose, Slug, Strict

COMMIT = r"^[0-9a-f]{40}$"
# The distribution of each package the pack pins, as pip records it (the applier, inimage.apply, reads the versions).
DISTS = {"vllm_gaudi": "vllm_gaudi", "vllm": "vllm"}


class GaudiPin(Strict):
    tag: Slug = Field(description="the vllm-gaudi git tag, e.g. v0.26.0")
    version: Ident = Field(description="the vllm_gaudi distribution's version")
    commit: StrictStr = Field(pattern=COMMIT)


class VllmPin(Strict):
    version: Ident = Field(description="the vLLM version on PyPI")
    commit: StrictStr = Field(pattern=COMMIT)
    accepted_commits: dict[Annotated[StrictStr, Field(pattern=r"^[0-9a-f]{7,40}$")], Prose] = Field(
        default_factory=dict, description="other build revisions of the same sources, each with why it is accepted")


class Release(Strict):
    release: Slug = Field(description="the file's own name")
    vllm_gaudi: GaudiPin
    vllm: VllmPin
    gaudi_sw: Ident
    base: BaseImage
    profile: Slug = Field(description="a file name under fixes/profiles/: the pack order against this release")

    def pins(self) -> upstream.Pins:
        """The upstream sources of the release, as the source cache and the fix lab fetch them."""
        return upstream.Pins(self.vllm_gaudi.tag, self.vllm_gaudi.commit, self.vllm.version, self.vllm_gaudi.version)

    def packages(self) -> dict[str, dict]:
        """The package pins a fix profile of this release checks an image against (pack.json's `packages`)."""
        return {"vllm_gaudi": {"dist": DISTS["vllm_gaudi"], "version": self.vllm_gaudi.version,
                               "commit": self.vllm_gaudi.commit},
                "vllm": {"dist": DISTS["vllm"], "version": self.vllm.version, "commit": self.vllm.commit,
                         "accepted_commits": dict(self.vllm.accepted_commits)}}

    def recipe_defaults(self) -> dict:
        """What a recipe that names this release says unless it says otherwise: its base (the pins are the
        release's alone, see PINS) and its fix profile."""
        return {"base": {"vllm_gaudi": {"version": self.vllm_gaudi.tag, "commit": self.vllm_gaudi.commit},
                         "vllm": {"version": self.vllm.version, "commit": self.vllm.commit},
                         "gaudi_sw": self.gaudi_sw, **self.base.model_dump()},
                "fixes": {"profile": self.profile}}


# A recipe's base keys that only its release may say: a recipe that says them would build one release's
# image with another's pins.
PINS = ("vllm_gaudi", "vllm", "gaudi_sw")


def order_key(name: str) -> tuple:
    """Releases in version order: v0.9.0 < v0.26.0 < v0.27.0-test < v0.27.0 < v0.28.0 (a suffix after the
    numbers sorts before the bare release, as a pre-release does)."""
    found = re.match(r"v?((?:\d+\.)*\d+)(.*)", name)
    if not found:
        return ((), 0, name)
    numbers = tuple(int(n) for n in found.group(1).split("."))
    return (numbers, 0 if found.group(2) else 1, found.group(2))


def names(root: Path | None = None) -> list[str]:
    """The releases there are, oldest first."""
    root = root or releases_dir()
    return sorted((p.stem for p in root.glob("*.yaml")), key=order_key)


def load(name: str, root: Path | None = None) -> Release:
    root = root or releases_dir()
    said = grammar.problem("slug", name)
    if said:  # a file name under releases/: it cannot climb out
        raise RecipeError(f"unknown release {name!r}: {said}", hint=_known(root))
    return _load(name, root.resolve())


@cache
def _load(name: str, root: Path) -> Release:
    path = root / f"{name}.yaml"
    if not path.is_file():
        raise RecipeError(f"unknown release {name!r}: there is no {path}", hint=_known(root))
    source = yamlsource.load(path)
    release = yamlsource.validated(Release, source, RecipeError)
    if release.release != name:
        raise RecipeError(f"{path.name} says it is release {release.release!r}",
                          where=where(path, source.line_of(("release",)), "release"),
                          hint=f"a release file is named after its release: say `release: {name}` or rename the file")
    return release


def locate(name: str, keys: yamlsource.KeyPath, root: Path | None = None) -> str:
    """`file:line (key a.b)` of a key in a release file: where a recipe's value that came from it is said."""
    path = (root or releases_dir()) / f"{name}.yaml"
    return where(path, yamlsource.load(path).line_of(keys), yamlsource.dotted(keys))


def default(root: Path | None = None) -> Release:
    """The newest release: what a task works on when it is given no recipe and no profile."""
    root = root or releases_dir()
    found = names(root)
    if not found:
        raise RecipeError(f"there is no release file in {root}", hint="add one: docs/development.md, adding a release")
    return load(found[-1], root)


def profile_or_default(profile: str | None) -> str:
    """A task's --profile: the one given, else the newest release's."""
    return profile or default().profile


def _known(root: Path) -> str:
    return "known releases: " + (", ".join(names(root)) or f"(none in {root})")
