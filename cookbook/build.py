"""Build a rendered context into an image on the real Docker engine.

No tag is set until the build has succeeded: the engine builds untagged (`--iidfile`), then the
tags are pointed at the finished image, so a failed build never leaves a tag on a half-made image.
"""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import engine
from .errors import BuildError, EngineError, PullError
from .progress import line, say
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


def build_command(context: Path, iidfile: str = "<iidfile>", buildkit: bool = True) -> list[str]:
    cmd = ["build", "--iidfile", iidfile]
    if buildkit:
        cmd += ["--progress=plain"]
    return cmd + [str(context)]


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


def build(context: Path, tags: list[str], base: Base) -> Built:
    c = engine.client()
    with tempfile.TemporaryDirectory(prefix="cookbook-build.") as tmp:
        iidfile = Path(tmp) / "iid"
        cmd = [c.path, *build_command(context, str(iidfile), c.buildkit)]
        say(f"building {context.name} with {c.path} {c.version} "
            f"({'BuildKit' if c.buildkit else 'legacy builder'})")
        proc = subprocess.Popen(cmd, env=c.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        tail: list[str] = []
        for out in proc.stdout:
            line(out)
            tail = (tail + [out.rstrip()])[-15:]
        if proc.wait() != 0 or not iidfile.is_file():
            raise BuildError("docker build failed; no tag was set:\n    " + "\n    ".join(tail))
        image_id = iidfile.read_text().strip()
    for tag in tags:
        engine.docker("tag", image_id, tag)
    size = engine.inspect(image_id)["Size"]
    base_size = engine.inspect(base.from_ref)["Size"]
    return Built(image_id, tags, size, base_size)


def mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"
