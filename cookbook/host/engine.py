"""The Docker engine: which client to call, whether a daemon answers, and the calls themselves.

Facts that shaped this: Debian's docker.io (Engine 20.10) is the engine here. Its own client
(/usr/bin/docker, 20.10) builds with BuildKit when DOCKER_BUILDKIT=1. A newer client without the
buildx plugin may come first on PATH; it can only use the legacy builder. The rendered Dockerfiles
need no BuildKit-only syntax, so either works; BuildKit is preferred for its cache and progress.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

from . import signals
from .errors import CookbookError, EngineError, printable
from .paths import ROOT
from .progress import line

START_HINT = f"start one with: {ROOT / 'scripts' / 'docker-engine.sh'}  (installs docker.io if missing)"


@dataclass(frozen=True)
class Client:
    path: str
    version: str
    buildkit: bool

    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_BUILDKIT": "1" if self.buildkit else "0"}


def _version(path: str) -> str:
    out = subprocess.run([path, "version", "--format", "{{.Client.Version}}"], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def _has_buildx(path: str) -> bool:
    return subprocess.run([path, "buildx", "version"], capture_output=True).returncode == 0


def builtin_buildkit(version: str) -> bool:
    """Clients before 23.0 carry BuildKit themselves (DOCKER_BUILDKIT=1); later ones need buildx."""
    m = re.match(r"(\d+)\.", version)
    return bool(m) and int(m.group(1)) < 23


def choose(found: list[tuple[str, str, bool]]) -> Client:
    """The first client (path, version, has buildx) that can build with BuildKit, else the first."""
    clients = [Client(path, version, buildx or builtin_buildkit(version)) for path, version, buildx in found]
    return next((c for c in clients if c.buildkit), clients[0])


@functools.cache
def client() -> Client:
    candidates = []
    for path in (os.environ.get("COOKBOOK_DOCKER"), shutil.which("docker"), "/usr/bin/docker"):
        if path and os.access(path, os.X_OK) and path not in candidates:
            candidates.append(path)
    if not candidates:
        raise EngineError("no docker client found", hint=START_HINT)
    return choose([(path, _version(path), _has_buildx(path)) for path in candidates])


def docker(*args: str, check: bool = True, capture: bool = True, timeout: float | None = None,
           ) -> subprocess.CompletedProcess:
    c = client()
    try:
        out = signals.run([c.path, *args], capture_output=capture, text=True, env=c.env(), timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise EngineError(f"`docker {' '.join(args)}` did not answer within {timeout:.0f}s") from exc
    if check and out.returncode != 0:
        raise EngineError(f"`docker {' '.join(args[:3])}` failed: {(out.stderr or '').strip()[-600:]}")
    return out


def stream(*args: str, keep: int = 15) -> tuple[int, list[str]]:
    """Run `docker ARGS` with its output passed through line by line (builds are long): (exit code,
    the last `keep` lines, for the error message)."""
    c = client()
    tail: list[str] = []
    # Its own process group, killed on an interrupt: the engine cancels a build whose client is gone.
    with signals.popen([c.path, *args], env=c.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True) as proc:
        for out in proc.stdout:
            line(out)
            tail = (tail + [out.rstrip()])[-keep:]
    return proc.returncode, tail


def require_daemon() -> None:
    out = docker("version", "--format", "{{.Server.Version}}", check=False, timeout=20)
    if out.returncode != 0:
        raise EngineError("no Docker daemon answers: " + (out.stderr.strip().splitlines() or ["?"])[-1],
                          hint=START_HINT)


def image_exists(ref: str) -> bool:
    return docker("image", "inspect", ref, check=False).returncode == 0


def inspect(ref: str) -> dict:
    out = docker("image", "inspect", ref, check=False)
    if out.returncode != 0:
        raise EngineError(f"no image {ref}")
    return json.loads(out.stdout)[0]


def sdk():
    """The Python docker SDK, for containers and inspection (not for builds: it uses the legacy builder)."""
    import docker as docker_sdk

    try:
        c = docker_sdk.from_env(timeout=120)
        c.ping()
    except Exception as exc:
        raise EngineError(f"no Docker daemon answers the SDK: {exc}", hint=START_HINT) from None
    return c


@contextlib.contextmanager
def sdk_errors(what: str, refused: type[CookbookError] = EngineError) -> Iterator[None]:
    """A docker SDK call that does not reach the engine as one EngineError line (exit 3), never a
    traceback; one the engine answers with a refusal (an APIError: an image it cannot start, a container
    gone) as `refused`, EngineError unless the caller knows better (an image with no `sleep` to run is
    the image's failing, not the engine's)."""
    import docker.errors
    import requests

    try:
        yield
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        said = getattr(exc, "explanation", None) or str(exc)
        error = refused if isinstance(exc, docker.errors.APIError) else EngineError
        raise error(f"{what}: the Docker engine said: {printable(str(said).strip()[:300])}") from None
