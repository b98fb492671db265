"""A stand-in for the Hugging Face Hub on 127.0.0.1, for tests only: it answers the two endpoints the real
huggingface_hub client calls to fetch a model (HF_ENDPOINT=http://127.0.0.1:PORT), nothing more.

- GET /api/models/{repo}/revision/{rev}[?blobs=True]: the model-info API, with the files' sizes, git blob
  ids and LFS sha256 when blobs are asked for (repo_info(files_metadata=True)).
- HEAD and GET /{repo}/resolve/{rev}/{file}: X-Repo-Commit, ETag (the git blob id), X-Linked-Etag and
  X-Linked-Size for LFS files (their sha256 and size), Content-Length, and Range for a resumed download.

Faults a test sets: `corrupt` (serve other bytes of the same size under the right headers), `cut_once` (the
first GET of the file stops half way and closes the connection), `stall_at` (every GET of the file stops at
that offset: the client's own retries give up), `token` (401 without that bearer token,
as the Hub answers for a gated or private repo). A hostile or broken mirror: `info_extra` (keys that replace
the model-info answer's, e.g. a `sha` or `siblings` of its own), `etag` (the ETag and X-Linked-Etag a file is
served under), `trickle` (a file sent one byte every that many seconds, without end), `flood` (that many bytes
sent for the file, however small its listing; how many left the server is kept in `sent`), `redirect_to`
(file downloads sent on to another server, as the Hub sends them to its CDN), `trickle_headers` (no answer
ever gets past its headers). A commit id may be
anything, `../..` included: the paths are split before they are unquoted, as a server routes them. Every
request is kept in `requests`.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Repo:
    commit: str
    files: dict[str, bytes]
    lfs: set[str] = field(default_factory=set)

    def sibling(self, name: str) -> dict:
        data = self.files[name]
        out = {"rfilename": name, "size": len(data), "blobId": git_blob_id(data)}
        if name in self.lfs:
            out["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        return out


@dataclass
class Request:
    method: str
    path: str
    range: str | None
    authorization: str | None


class FakeHub:
    def __init__(self, repos: dict[str, Repo]):
        self.repos = repos
        self.corrupt: set[str] = set()
        self.cut_once: set[str] = set()
        self.stall_at: dict[str, int] = {}
        self.token: str | None = None
        self.info_extra: dict = {}
        self.etag: dict[str, str] = {}
        self.trickle: dict[str, float] = {}
        self.flood: dict[str, int] = {}
        self.sent: dict[str, int] = {}
        self.trickle_headers = False  # every answer's headers sent one byte every half second, without end
        self.redirect_to: str | None = None  # file downloads answered 302 to this other server, as the Hub's CDN
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                hub._answer(self, head=False)

            def do_HEAD(self):
                hub._answer(self, head=True)

        return Handler

    def _answer(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        raw = urlsplit(h.path).path
        path = unquote(raw)
        auth = h.headers.get("Authorization")
        with self._lock:
            self.requests.append(Request(h.command, path, h.headers.get("Range"), auth))
        if self.trickle_headers:
            return self._trickle_headers(h)
        if self.token and auth != f"Bearer {self.token}":
            return self._send(h, 401, b'{"error":"Access to this model is restricted."}',
                              {"X-Error-Code": "GatedRepo", "Content-Type": "application/json"}, head)
        if self.redirect_to and "/resolve/" in raw:
            return self._send(h, 302, b"", {"Location": self.redirect_to + h.path}, head)
        if raw.startswith("/api/models/"):
            return self._info(h, raw[len("/api/models/"):], "blobs=" in h.path, head)
        repo_id, sep, rest = raw.lstrip("/").partition("/resolve/")
        repo = self.repos.get(unquote(repo_id))
        rev, _, name = (unquote(part) for part in rest.partition("/"))
        if not sep or repo is None or rev not in (repo.commit, "main") or name not in repo.files:
            return self._send(h, 404, b"not found", {"X-Error-Code": "EntryNotFound"}, head)
        self._file(h, repo, name, head)

    def _info(self, h, rest: str, blobs: bool, head: bool) -> None:
        repo_id, _, rev = (unquote(part) for part in rest.partition("/revision/"))
        repo = self.repos.get(repo_id)
        if repo is None or rev not in ("", repo.commit, "main"):
            return self._send(h, 404, b'{"error":"Repository not found"}', {"X-Error-Code": "RepoNotFound"}, head)
        siblings = [repo.sibling(n) if blobs else {"rfilename": n} for n in sorted(repo.files)]
        body = json.dumps({"id": repo_id, "modelId": repo_id, "sha": repo.commit, "private": False,
                           "siblings": siblings} | self.info_extra).encode()
        self._send(h, 200, body, {"Content-Type": "application/json"}, head)

    def _file(self, h, repo: Repo, name: str, head: bool) -> None:
        data = repo.files[name]
        meta = repo.sibling(name)
        headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{meta["blobId"]}"', "Accept-Ranges": "bytes"}
        if "lfs" in meta:
            headers |= {"X-Linked-Etag": f'"{meta["lfs"]["sha256"]}"', "X-Linked-Size": str(len(data))}
        if name in self.etag:
            headers["ETag"] = f'"{self.etag[name]}"'
            if "lfs" in meta:
                headers["X-Linked-Etag"] = f'"{self.etag[name]}"'
        if not head and (name in self.trickle or name in self.flood):
            return self._misbehave(h, name, headers)
        if name in self.corrupt:
            data = bytes(b ^ 0xFF for b in data)
        start = 0
        wanted = h.headers.get("Range")
        if wanted and wanted.startswith("bytes=") and not head:
            start = int(wanted[len("bytes="):].split("-")[0])
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        body = data[start:]
        cut = None
        if not head and name in self.cut_once:
            self.cut_once.discard(name)
            cut = len(body) // 2
        elif not head and name in self.stall_at:
            cut = max(self.stall_at[name] - start, 0)
        if cut is not None:  # the headers promise the whole body; the connection closes part way
            h.send_response(206 if start else 200)
            for k, v in {**headers, "Content-Length": str(len(body))}.items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(body[:cut])
            h.wfile.flush()
            h.close_connection = True
            return
        self._send(h, 206 if start else 200, body, headers, head)

    @staticmethod
    def _trickle_headers(h) -> None:
        h.close_connection = True
        end = time.monotonic() + 300
        try:
            h.wfile.write(b"HTTP/1.1 200 OK\r\n")
            while time.monotonic() < end:
                h.wfile.write(b"X")
                time.sleep(0.5)
        except OSError:  # the client hung up
            pass

    def _misbehave(self, h, name: str, headers: dict) -> None:
        """No Content-Length, the connection closes when done: the body is as long as the server likes."""
        h.send_response(200)
        for k, v in {**headers, "Connection": "close"}.items():
            h.send_header(k, v)
        h.end_headers()
        h.close_connection = True
        self.sent[name] = 0
        try:
            if name in self.flood:
                block = b"\0" * (1 << 20)
                while self.sent[name] < self.flood[name]:
                    h.wfile.write(block[:self.flood[name] - self.sent[name]])
                    self.sent[name] += min(len(block), self.flood[name] - self.sent[name])
            else:
                end = time.monotonic() + 300  # a test never waits this long; the thread ends anyway
                while time.monotonic() < end:
                    h.wfile.write(b"x")
                    h.wfile.flush()
                    self.sent[name] += 1
                    time.sleep(self.trickle[name])
        except OSError:  # the client hung up
            pass

    @staticmethod
    def _send(h, status: int, body: bytes, headers: dict, head: bool) -> None:
        h.send_response(status)
        for k, v in {**headers, "Content-Length": str(len(body))}.items():
            h.send_header(k, v)
        h.end_headers()
        if not head:
            h.wfile.write(body)
