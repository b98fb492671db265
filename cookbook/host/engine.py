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
from .errors import CookbookError, EngineError, ImageMissing, UsageError, printable
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
        raise failure(f"`docker {' '.join(args[:3])}` failed", out.stderr or "")
    return out


# What the engine answers, as Engine 20.10's client prints it on stderr and the SDK in an APIError's
# explanation. Read in this order: an engine that does not answer says "connect", a registry that does not
# answer says "dial tcp" beside "Unable to find image", and only then is the image itself missing.
UNREACHABLE = ("Cannot connect to the Docker daemon", "Is the docker daemon running", "error during connect",
               "while trying to connect to the Docker daemon socket")
NETWORK = ("dial tcp", "no such host", "i/o timeout", "TLS handshake timeout", "connection refused",
           "connection reset", "server misbehaving", "net/http: request canceled")
NO_IMAGE = ("No such image", "Unable to find image", "pull access denied", "manifest unknown",
            "repository does not exist")
NAME_TAKEN = ("is already in use by container",)
NO_IMAGE_HINT = "build it first (invoke build), or name an image `docker images` lists"


def failure(what: str, said: str, refused: type[CookbookError] = EngineError) -> CookbookError:
    """The one translation of what the engine said (a CLI call's stderr, an SDK error's text) into the error
    tree: no engine or no registry answers (EngineError, exit 3), an image it neither holds nor could pull
    (ImageMissing, 2), a container name already taken (UsageError, 2), anything else it refused as `refused`
    (EngineError unless the caller knows better: an image that cannot start is the image's failing)."""
    lines = [ln.strip() for ln in said.strip().splitlines() if ln.strip()]
    text = printable("; ".join(lines))[-600:]
    if any(p in text for p in UNREACHABLE):
        return EngineError(f"{what}: no Docker daemon answers: {text}", hint=START_HINT)
    if any(p in text for p in NETWORK):
        return EngineError(f"{what}: the registry did not answer: {text}")
    if any(p in text for p in NO_IMAGE):
        return ImageMissing(f"{what}: no such image: {text}", hint=NO_IMAGE_HINT)
    if any(p in text for p in NAME_TAKEN):
        return UsageError(f"{what}: {text}", hint="remove that container (docker rm -f NAME), or give another --name")
    return refused(f"{what}: the Docker engine said: {text}")


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
        raise failure(f"image {ref}", out.stderr or "")
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
    """A docker SDK call's errors through `failure`, never a traceback: one that does not reach the engine
    is an EngineError (exit 3), an image the engine does not hold ImageMissing (2), any other refusal (an
    APIError: an image it cannot start, a container gone) `refused`."""
    import docker.errors
    import requests

    try:
        yield
    except docker.errors.ImageNotFound as exc:
        raise ImageMissing(f"{what}: no such image: {printable(str(exc.explanation or exc))[:300]}",
                           hint=NO_IMAGE_HINT) from None
    except docker.errors.APIError as exc:
        raise failure(what, str(exc.explanation or exc)[:600], refused) from None
    except requests.exceptions.RequestException as exc:
        raise EngineError(f"{what}: no Docker daemon answers: {printable(str(exc))[:300]}", hint=START_HINT) from None
    except docker.errors.DockerException as exc:  # the SDK's own (no socket to talk to, a bad answer)
        raise EngineError(f"{what}: the Docker SDK said: {printable(str(exc))[:300]}", hint=START_HINT) from None
