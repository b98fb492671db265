"""Build a rendered context into an image on the real Docker engine.

No tag is set until the build has succeeded: the engine builds untagged (`--iidfile`), then the
tags are pointed at the finished image, so a failed build never leaves a tag on a half-made image.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..host import engine, signals
from ..host.errors import BuildError, EngineError, PullError
from ..host.names import OCI, Label
from ..host.progress import say
from .render import Base

PULL_TIMEOUT_S = 60


@dataclass(frozen=True)
class Built:
    image_id: str
    tags: list[str]
    size: int
    base_size: int

    @property
    def added(self) -> int:
        return self.size - self.base_size


def build_command(context: Path, iidfile: str = "<iidfile>", buildkit: bool = True,
                  labels: dict[str, str] | None = None) -> list[str]:
    cmd = ["build", "--iidfile", iidfile]
    if buildkit:
        cmd += ["--progress=plain"]
    for key, value in (labels or {}).items():
        cmd += ["--label", f"{key}={value}"]
    return cmd + [str(context)]


def build_labels(content_hash: str, exact_tag: str, revision: str | None) -> dict[str, str]:
    """The labels that cannot be in the Dockerfile they would change (render's docstring): the content
    hash, the version that carries its prefix (the exact tag's tag), and the checkout's commit (kept
    out of the hash, so an unrelated commit does not give every image a new tag)."""
    out = {Label.CONTENT_HASH: content_hash,
           OCI.VERSION: exact_tag.rsplit(":", 1)[1]}
    if revision:
        out[OCI.REVISION] = revision
    return out


def repository(image: str) -> str:
    """`reg:5000/a/b:tag` -> `reg:5000/a/b` (a colon after the last slash starts the tag)."""
    name = image.split("@", 1)[0]
    head, _, tail = name.rpartition("/")
    return f"{head}/{tail.split(':', 1)[0]}" if head else tail.split(":", 1)[0]


def resolve_base(base: Base) -> Base:
    """The base as the engine holds it: its image id, and its manifest digest (the recipe's pin, else
    the registry digest the engine recorded when it pulled the image; a local-only image has none)."""
    found = engine.inspect(base.from_ref)
    digest = base.digest
    if digest is None:
        repo = repository(base.image)
        digest = next((d.split("@", 1)[1] for d in found.get("RepoDigests") or []
                       if repository(d) == repo), None)
    return dataclasses.replace(base, digest=digest, image_id=found["Id"])


def ensure_base(base: Base) -> None:
    """The base must be local or pullable; if the vault cannot be reached, say so fast and name --standin."""
    if engine.image_exists(base.from_ref):
        return
    if base.standin:
        raise BuildError(f"the stand-in base {base.image} is missing", hint="run: invoke standin")
    say(f"pulling {base.from_ref}")
    try:
        out = engine.docker("pull", "--quiet", base.from_ref, check=False, timeout=PULL_TIMEOUT_S)
    except EngineError:
        out = None
    if out is None or out.returncode != 0:
        reason = "timed out" if out is None else (out.stderr.strip().splitlines() or ["failed"])[-1]
        raise PullError(
            f"cannot pull the base image {base.from_ref}: {reason}",
            hint="where the vault is unreachable, build on the offline stand-in base: add --standin",
        )


def verify_hint(tail: list[str], base_ref: str) -> str | None:
    """When the applier (inimage.apply) refused the base's files (a target not the pristine file, or missing), name the
    command that shows, fix by fix and with diffs, how the base differs from what the pack was made on."""
    refused = any("apply_all: " in line and ("the pristine release file has" in line or " is missing: " in line)
                  for line in tail)
    return f"check the pack against the base: invoke fixes.verify --base {base_ref}" if refused else None


def build(context: Path, tags: list[str], base: Base, labels: dict[str, str] | None = None) -> Built:
    c = engine.client()
    # SIGTERM or Ctrl-C: the `docker build` client's process group is killed (the engine cancels a build
    # whose client is gone) and no tag is set.
    with signals.interruptible(), tempfile.TemporaryDirectory(prefix="cookbook-build.") as tmp:
        iidfile = Path(tmp) / "iid"
        say(f"building {context.name} with {c.path} {c.version} "
            f"({'BuildKit' if c.buildkit else 'legacy builder'})")
        code, tail = engine.stream(*build_command(context, str(iidfile), c.buildkit, labels))
        if code != 0 or not iidfile.is_file():
            raise BuildError("docker build failed; no tag was set:\n    " + "\n    ".join(tail),
                             hint=verify_hint(tail, base.from_ref))
        image_id = iidfile.read_text().strip()
    for tag in tags:
        engine.docker("tag", image_id, tag)
    size = engine.inspect(image_id)["Size"]
    base_size = engine.inspect(base.from_ref)["Size"]
    return Built(image_id, tags, size, base_size)


def mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"
