"""A container registry, through skopeo: credentials, reading a manifest and its config back, and
copying an image from the local engine (or within the registry) by digest.

skopeo is Debian's (scripts/publish-tools.sh). It reads the same auth file format as Docker, so one
auth file serves every call. Credentials come from COOKBOOK_REGISTRY_USER/COOKBOOK_REGISTRY_PASSWORD
(written to a private temporary auth file, never to argv) or else from the Docker config; they are
never printed, and any registry error text is scrubbed of the password before it is shown.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..host import grammar, signals
from ..host.errors import PublishError, UsageError
from ..recipe import fixes

USER_ENV = "COOKBOOK_REGISTRY_USER"
PASSWORD_ENV = "COOKBOOK_REGISTRY_PASSWORD"
TIMEOUT_S = 600
SETUP_HINT = "run scripts/publish-tools.sh (Debian's skopeo)"

# skopeo's words for "this tag is not there" and "these credentials are refused".
# Status codes only where they stand alone: digests, attachment tags (sha256-<hex>.sbom) and ports
# in skopeo's messages may hold "401", "403" or "404".
NOT_FOUND = re.compile(r"manifest unknown|name unknown|not found|(?<![0-9a-z])404(?![0-9a-z])", re.I)
DENIED = re.compile(r"unauthorized|authentication required|invalid username/password|denied"
                    r"|(?<![0-9a-z])40[13](?![0-9a-z])", re.I)


def classify(err: str) -> str | None:
    """What a failed skopeo call's stderr says: "denied", "not found" or None (pure)."""
    if DENIED.search(err):
        return "denied"
    if NOT_FOUND.search(err):
        return "not found"
    return None


def plain_http(host: str) -> bool:
    """A registry on the loopback is spoken to over plain HTTP (as Docker does); any other over TLS."""
    name = host.rsplit(":", 1)[0] if not host.startswith("[") else host[1:host.index("]")]
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def split_target(target: str) -> tuple[str, str]:
    """`HOST[:PORT][/NAMESPACE...]` -> (host, namespace); the namespace may be empty."""
    target = target.strip().removeprefix("docker://").rstrip("/")
    if not target or "://" in target or "@" in target:
        raise UsageError(f"registry {target!r} is not HOST[:PORT][/NAMESPACE]",
                           hint="e.g. --registry ghcr.io/my-org or --registry 127.0.0.1:5000")
    host, _, namespace = target.partition("/")
    if target_problem(host, namespace):
        raise UsageError(f"registry {target!r} is not HOST[:PORT][/NAMESPACE]: {target_problem(host, namespace)}",
                           hint="e.g. --registry ghcr.io/my-org or --registry 127.0.0.1:5000")
    return host, namespace


_HOST = re.compile(rf"{grammar._DOMAIN}")
_V6_HOST = re.compile(r"\[([0-9A-Fa-f:.]+)\](?::[0-9]+)?")
_NAMESPACE = re.compile(rf"{grammar._COMPONENT}(?:/{grammar._COMPONENT})*")


def target_problem(host: str, namespace: str) -> str | None:
    """Docker's reference grammar for a registry host (name or IP, optional port; an IPv6 literal in
    brackets) and its namespace (lower-case path components); None when both fit."""
    v6 = _V6_HOST.fullmatch(host)
    if v6:
        try:
            ipaddress.IPv6Address(v6[1])
        except ValueError:
            return f"{host} is not an IPv6 address"
    elif not _HOST.fullmatch(host):
        return f"{host!r} is not a host name or address with an optional :PORT"
    if namespace and not _NAMESPACE.fullmatch(namespace):
        return f"{namespace!r} is not a namespace (lower-case letters, digits and . _ - between them, / between parts)"
    return None


@dataclass(frozen=True)
class Credentials:
    """Where the registry credentials come from. `secret` is only ever used to scrub error text."""

    source: str
    authfile: Path | None
    secret: str | None = None

    def scrub(self, text: str) -> str:
        if self.secret:
            text = text.replace(self.secret, "***")
            text = text.replace(base64.b64encode(self.secret.encode()).decode(), "***")
        return text


def docker_config_path(env: dict[str, str]) -> Path:
    base = env.get("DOCKER_CONFIG")
    return Path(base) / "config.json" if base else Path(env.get("HOME", str(Path.home()))) / ".docker" / "config.json"


def credential_source(env: dict[str, str], docker_config_exists: bool) -> str:
    """Which credentials a push uses: `env`, `docker-config` or `none`. Pure, table-tested."""
    user, password = env.get(USER_ENV), env.get(PASSWORD_ENV)
    if bool(user) != bool(password):
        missing = PASSWORD_ENV if user else USER_ENV
        raise PublishError(f"{USER_ENV} and {PASSWORD_ENV} go together; {missing} is not set")
    if user:
        return "env"
    return "docker-config" if docker_config_exists else "none"


@contextlib.contextmanager
def credentials(host: str, env: dict[str, str] | None = None) -> Iterator[Credentials]:
    env = dict(os.environ if env is None else env)
    config = docker_config_path(env)
    kind = credential_source(env, config.is_file())
    if kind == "none":
        yield Credentials("no credentials (anonymous)", None)
        return
    if kind == "docker-config":
        yield Credentials(f"the Docker config {config}", config)
        return
    user, password = env[USER_ENV], env[PASSWORD_ENV]
    with tempfile.TemporaryDirectory(prefix="cookbook-auth.") as tmp:
        authfile = Path(tmp) / "auth.json"
        fd = os.open(authfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            json.dump({"auths": {host: {"auth": token}}}, f)
        yield Credentials(f"{USER_ENV}/{PASSWORD_ENV}", authfile, password)


def skopeo() -> str:
    path = shutil.which("skopeo")
    if not path:
        raise PublishError("skopeo is not installed", hint=SETUP_HINT)
    return path


@dataclass(frozen=True)
class Remote:
    """A manifest as the registry serves it."""

    ref: str
    digest: str  # sha256 of the manifest bytes: what `docker pull REF@DIGEST` names
    media_type: str
    size: int
    config_digest: str  # the image id: the same image on every machine, whatever the layer compression
    labels: dict[str, str]


class Registry:
    def __init__(self, target: str, creds: Credentials):
        self.host, self.namespace = split_target(target)
        self.creds = creds
        self.tls = not plain_http(self.host)

    def repo(self, name: str) -> str:
        return "/".join(filter(None, [self.host, self.namespace, name]))

    def _auth_args(self, *prefixes: str) -> list[str]:
        args = []
        for p in prefixes:
            if self.creds.authfile:
                args.append(f"--{p}authfile={self.creds.authfile}")
            args.append(f"--{p}tls-verify={'true' if self.tls else 'false'}")
        return args

    def _run(self, args: list[str], what: str, not_found_ok: bool = False) -> subprocess.CompletedProcess | None:
        try:
            out = signals.run([skopeo(), *args], capture_output=True, text=True, timeout=TIMEOUT_S,
                                 stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise PublishError(f"{what}: the registry {self.host} did not answer in {TIMEOUT_S}s") from None
        if out.returncode == 0:
            return out
        err = self.creds.scrub(out.stderr.strip())
        said = classify(err)
        if said == "denied":
            raise PublishError(f"{what}: the registry {self.host} refused the credentials from {self.creds.source}",
                               hint=f"check them with `docker login {self.host}`, or set {USER_ENV} and "
                                    f"{PASSWORD_ENV}")
        if not_found_ok and said == "not found":
            return None
        raise PublishError(f"{what}: {err.splitlines()[-1] if err else 'skopeo failed'}")

    def inspect(self, ref: str) -> Remote | None:
        """The manifest REF (repo:tag or repo@digest) names, with its config; None where there is none."""
        what = f"reading {ref}"
        raw = self._run(["inspect", "--raw", *self._auth_args(""), f"docker://{ref}"], what, not_found_ok=True)
        if raw is None:
            return None
        manifest = json.loads(raw.stdout)
        if "config" not in manifest:
            raise PublishError(f"{ref} is an index or list, not one image manifest")
        config = self._run(["inspect", "--config", "--raw", *self._auth_args(""), f"docker://{ref}"], what)
        labels = (json.loads(config.stdout).get("config") or {}).get("Labels") or {}
        return Remote(ref=ref, digest="sha256:" + fixes.fixplan.sha256_bytes(raw.stdout.encode()),
                      media_type=manifest.get("mediaType", ""), size=len(raw.stdout.encode()),
                      config_digest=manifest["config"]["digest"], labels=labels)

    def exists(self, ref: str) -> bool:
        """Whether REF names any manifest (an image or an attached artifact)."""
        return self._run(["inspect", "--raw", *self._auth_args(""), f"docker://{ref}"], f"reading {ref}",
                         not_found_ok=True) is not None

    def push_image(self, image_id: str, dest: str) -> str:
        """Copy a local image (by id) to DEST; return the manifest digest. The manifest stays Docker's
        schema 2, whose config is the engine's own (so its digest is the image id); converting to an
        OCI manifest would rewrite the config and lose that identity."""
        with tempfile.TemporaryDirectory(prefix="cookbook-push.") as tmp:
            digestfile = Path(tmp) / "digest"
            self._run(["copy", "--quiet", f"--digestfile={digestfile}",
                       *self._auth_args("dest-"), f"docker-daemon:{image_id}", f"docker://{dest}"],
                      f"pushing {dest}")
            return digestfile.read_text().strip()

    def tag(self, repo: str, digest: str, tag: str) -> None:
        """Point TAG at the manifest DIGEST already in REPO (no layer moves; the digest is kept)."""
        self._run(["copy", "--quiet", "--preserve-digests", *self._auth_args("src-", "dest-"),
                   f"docker://{repo}@{digest}", f"docker://{repo}:{tag}"], f"tagging {repo}:{tag}")

    def push_command(self, image: str, dest: str) -> list[str]:
        """What push_image runs, for dry runs (the auth file's path only; never its content)."""
        return ["skopeo", "copy", "--digestfile=<file>", *self._auth_args("dest-"),
                f"docker-daemon:{image}", f"docker://{dest}"]
