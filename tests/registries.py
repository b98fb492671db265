"""A real registry for the tests: Debian's docker-registry on a free 127.0.0.1 port, with or
without htpasswd auth, always stopped; and a small reader of its HTTP API, so what a push left
there is checked by a second client, not by the code under test."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

MANIFEST_TYPES = ", ".join([
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    host: str
    user: str | None = None
    password: str | None = None

    def _get(self, path: str, accept: str | None = None) -> tuple[bytes, dict]:
        req = urllib.request.Request(f"http://{self.host}{path}")
        if accept:
            req.add_header("Accept", accept)
        if self.user:
            token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            req.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.read(), dict(resp.headers)

    def manifest(self, repo: str, ref: str) -> tuple[str, dict] | None:
        """(digest computed from the bytes served, manifest) or None for an unknown tag."""
        try:
            raw, headers = self._get(f"/v2/{repo}/manifests/{ref}", MANIFEST_TYPES)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise
        digest = "sha256:" + hashlib.sha256(raw).hexdigest()
        assert headers.get("Docker-Content-Digest", digest) == digest
        return digest, json.loads(raw)

    def blob(self, repo: str, digest: str) -> bytes:
        data, _ = self._get(f"/v2/{repo}/blobs/{digest}")
        assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
        return data

    def tags(self, repo: str) -> list[str]:
        try:
            return json.loads(self._get(f"/v2/{repo}/tags/list")[0]).get("tags") or []
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return []
            raise


@contextlib.contextmanager
def running(tmp: Path, user: str | None = None, password: str | None = None):
    binary = shutil.which("docker-registry")
    if not binary:
        pytest.skip("Debian's docker-registry is not installed; run scripts/publish-tools.sh")
    tmp.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    auth = ""
    if user:
        htpasswd = subprocess.run(["htpasswd", "-Bbn", user, password], capture_output=True, text=True, check=True)
        (tmp / "htpasswd").write_text(htpasswd.stdout)
        auth = f"auth: {{htpasswd: {{realm: cookbook-test, path: {tmp / 'htpasswd'}}}}}\n"
    (tmp / "config.yml").write_text(
        "version: 0.1\nlog: {level: error}\n"
        f"storage: {{filesystem: {{rootdirectory: {tmp / 'data'}}}}}\n"
        f"http: {{addr: 127.0.0.1:{port}}}\n" + auth)
    log = open(tmp / "registry.log", "w")
    proc = subprocess.Popen([binary, "serve", str(tmp / "config.yml")], stdout=log, stderr=subprocess.STDOUT)
    server = Server(f"127.0.0.1:{port}", user, password)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                server._get("/v2/")
                break
            except urllib.error.HTTPError:
                break  # 401: up, and asking for credentials
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"docker-registry did not start: {(tmp / 'registry.log').read_text()}") from None
                time.sleep(0.1)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
