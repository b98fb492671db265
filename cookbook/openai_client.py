"""The OpenAI-compatible server under test (smoke and bench), through the standard library only: JSON
requests, /health, /v1/models and vLLM's /tokenize (lengths are counted with the served model's own
tokenizer), and streamed requests whose server-sent events are timed as they arrive."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from .errors import ENGINE_OR_NETWORK, CookbookError, UsageError

# Generous: a real model reasons at length, and a cold 244K-token prefill takes minutes.
REQUEST_TIMEOUT_S = 900.0


class ServerError(CookbookError):
    """The server refused a request or did not answer."""


class Unreachable(ServerError):
    """No server answers at the URL at all: the network's move, not a failed check."""

    exit_code = ENGINE_OR_NETWORK


def check_url(url: str) -> str:
    """An http(s) URL with a host, without its trailing slash (paths are appended to it)."""
    parts = urlsplit(url or "")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--url must be an http(s) URL such as http://HOST:PORT, not {url!r}")
    try:
        parts.port  # noqa: B018  (a port that is not a number raises here)
    except ValueError:
        raise UsageError(f"--url {url!r} has a port that is not a number") from None
    return url.rstrip("/")


def sse_events(lines: Iterable[bytes | str]) -> Iterator[dict]:
    """`data:` payloads of a server-sent event stream (comments and blank lines skipped), `[DONE]` ends it."""
    for raw in lines:
        line = raw.decode("utf-8", "replace").strip() if isinstance(raw, bytes) else raw.strip()
        if not line or line.startswith(":") or not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        yield json.loads(data)


class _Stale(Exception):
    """A kept-alive connection the server had closed before our request reached it."""


class Connections:
    """Streamed POSTs to one server from one event loop over HTTP/1.1 keep-alive connections, reused as
    vLLM's benchmark client reuses its aiohttp connections: a new connection per request put the TCP
    connect and the server's accept inside every measured time to first token."""

    def __init__(self, url: str, timeout: float = REQUEST_TIMEOUT_S):
        self.url = check_url(url)
        parts = urlsplit(self.url)
        self.tls = parts.scheme == "https"
        self.host, self.port = parts.hostname, parts.port or (443 if self.tls else 80)
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout  # for each read: a cold 244K-token prefill is minutes before its first byte
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def __aenter__(self) -> Connections:
        return self

    async def __aexit__(self, *exc) -> None:
        for _, writer in self.idle:
            writer.close()
        self.idle.clear()

    async def _read(self, coro):
        return await asyncio.wait_for(coro, self.timeout)

    async def _body(self, reader: asyncio.StreamReader, chunked: bool):
        """The body as it arrives: HTTP/1.1 chunks decoded to the last one (and its trailer), or raw reads
        to the end."""
        if not chunked:
            while data := await self._read(reader.read(65536)):
                yield data
            return
        while True:
            line = await self._read(reader.readline())
            if not line:  # the connection closed before the last (empty) chunk: a cut-off answer
                raise ConnectionResetError("the stream ended before its last chunk")
            size = int(line.split(b";")[0].strip(), 16)
            if size == 0:
                while (await self._read(reader.readline())) not in (b"\r\n", b""):
                    pass
                return
            data = await self._read(reader.readexactly(size))
            await self._read(reader.readexactly(2))
            yield data

    def _kept(self):
        """An idle kept-alive connection the server has not visibly closed, or None."""
        while self.idle:
            reader, writer = self.idle.pop()
            if not (writer.is_closing() or reader.at_eof()):
                return reader, writer
            writer.close()
        return None

    async def events(self, path: str, body: dict) -> AsyncIterator[tuple[float, dict]]:
        """POST `body` to `path` with a stream in return: each server-sent event with the perf_counter
        reading at which its bytes arrived. A kept-alive connection that the server had closed is
        replaced once, before anything was read."""
        for attempt in range(2):
            try:
                async for item in self._events(path, body, reuse=attempt == 0):
                    yield item
                return
            except _Stale:
                continue

    async def _events(self, path: str, body: dict, reuse: bool) -> AsyncIterator[tuple[float, dict]]:
        payload = json.dumps(body).encode()
        head = (f"POST {self.prefix}{path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n").encode()
        kept = self._kept() if reuse else None
        reused = kept is not None
        reader, writer = kept or (None, None)
        answered = False  # once the server answered, a broken connection is its failure, not a stale one
        try:
            if not reused:
                reader, writer = await self._read(asyncio.open_connection(self.host, self.port, ssl=self.tls,
                                                                          limit=2**24))
            writer.write(head + payload)
            await writer.drain()
            status = (await self._read(reader.readline())).split(b" ", 2)
            if status == [b""]:  # closed without a status line (on a kept-alive one: stale, retried below)
                raise ConnectionResetError("the server closed the connection without an answer")
            answered = True
            headers = {}
            while (line := await self._read(reader.readline())) not in (b"\r\n", b""):
                k, _, v = line.decode("latin-1").partition(":")
                headers[k.strip().lower()] = v.strip().lower()
            if len(status) < 2 or status[1] != b"200":
                detail = (await self._read(reader.read(500))).decode(errors="replace")
                raise ServerError(f"{path}: HTTP {b' '.join(status[1:]).decode(errors='replace').strip()}: {detail}")
            chunked = headers.get("transfer-encoding") == "chunked"
            buf = b""
            async for data in self._body(reader, chunked):
                now = time.perf_counter()
                buf += data
                *lines, buf = buf.split(b"\n")
                for event in sse_events(lines):
                    yield now, event
            if chunked and headers.get("connection") != "close":
                self.idle.append((reader, writer))
                writer = None
        except (OSError, asyncio.IncompleteReadError) as exc:  # a read's timeout is an OSError too
            if reused and not answered and isinstance(exc, ConnectionError):
                raise _Stale from exc
            what = "the answer broke off" if answered else "no answer"
            raise ServerError(f"{path}: {what} from {self.url}: {exc or type(exc).__name__}") from None
        except ValueError as exc:  # a chunk size or an event that is not what the protocol says
            raise ServerError(f"{path}: {self.url} sent a malformed stream: {exc}") from None
        finally:
            if writer is not None:
                writer.close()


@dataclass
class Server:
    url: str  # http://host:port, no trailing slash
    model: str = ""
    max_model_len: int = 0
    timeout: float = REQUEST_TIMEOUT_S
    started: float | None = None  # the API server process's start time when we connected (/metrics)
    _lengths: dict = field(default_factory=dict, repr=False)

    @classmethod
    def connect(cls, url: str, timeout: float = REQUEST_TIMEOUT_S) -> Server:
        """The server and the model it serves (the first of /v1/models), with its context length."""
        server = cls(check_url(url), timeout=timeout)
        try:
            models = server.get_json("/v1/models").get("data") or []
        except ServerError as exc:
            raise Unreachable(f"no OpenAI-compatible server at {server.url}: {exc}",
                              hint="start the server first (or check --url)") from None
        if not models:
            raise ServerError(f"{server.url}/v1/models lists no model")
        server.model = models[0]["id"]
        server.max_model_len = int(models[0].get("max_model_len") or 0)
        if not server.max_model_len:
            raise ServerError(f"{server.url}/v1/models does not say the model's max_model_len (not a vLLM server?)")
        server.started = server.start_time()
        return server

    def start_time(self) -> float | None:
        """The server process's start time (Prometheus' process_start_time_seconds), if /metrics says it."""
        try:
            with urllib.request.urlopen(self.url + "/metrics", timeout=30) as resp:
                text = resp.read().decode(errors="replace")
        except (urllib.error.URLError, OSError):
            return None
        for line in text.splitlines():
            if line.startswith("process_start_time_seconds "):
                return float(line.split()[1])
        return None

    def _open(self, path: str, body: dict | None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            return urllib.request.urlopen(req, timeout=self.timeout)
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            raise ServerError(f"{path}: HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise ServerError(f"{path}: no answer from {self.url}: {getattr(exc, 'reason', exc)}") from None

    def get_json(self, path: str) -> dict:
        with self._open(path, None) as resp:
            return json.loads(resp.read())

    def post(self, path: str, body: dict) -> dict:
        with self._open(path, body) as resp:
            return json.loads(resp.read())

    def chat(self, messages: list[dict], **params) -> dict:
        return self.post("/v1/chat/completions", {"model": self.model, "messages": messages, **params})

    def chat_stream(self, messages: list[dict], **params) -> list[dict]:
        """The chunks of a streamed chat completion (server-sent events), in order."""
        body = {"model": self.model, "messages": messages, "stream": True, **params}

        async def collect():
            async with Connections(self.url, self.timeout) as conns:
                return [event async for _, event in conns.events("/v1/chat/completions", body)]

        return asyncio.run(collect())

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=30) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def count_chat(self, messages: list[dict], **params) -> int:
        """Prompt tokens of a chat request, templated and counted by the server's tokenizer."""
        return int(self.post("/tokenize", {"model": self.model, "messages": messages,
                                           "add_generation_prompt": True, **params})["count"])

    def count_text(self, text: str) -> int:
        if text not in self._lengths:
            self._lengths[text] = len(self.token_ids(text))
        return self._lengths[text]

    def token_ids(self, text: str) -> list[int]:
        return list(self.post("/tokenize", {"model": self.model, "prompt": text,
                                            "add_special_tokens": False})["tokens"])
