"""The OpenAI-compatible server under test (smoke and bench): JSON requests, /health, /v1/models and
vLLM's /tokenize (lengths are counted with the served model's own tokenizer), and streamed requests
whose server-sent events are timed as they arrive.

One small HTTP/1.1 client on asyncio streams, bounded everywhere: the server under test is not trusted
with our memory or our time. A header line, the number of headers, a chunk, a line of the event stream
and a whole answer have limits, and every request has an overall deadline besides the timeout of each
read (a server that sends a byte a minute never trips a read timeout). It is hand-written rather than
aiohttp because the bench's figures must agree with `vllm bench serve` (tests/bench_agreement.py): its
connections are kept alive and reused exactly as that client's are, and the bytes are timed as they
arrive, with nothing between the socket and the clock.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ..host.errors import ENGINE_OR_NETWORK, CookbookError, UsageError, printable

# Generous: a real model reasons at length, and a cold 244K-token prefill takes minutes.
REQUEST_TIMEOUT_S = 900.0  # the longest wait for any one read
DEADLINE_S = 3600.0  # the longest a whole request may take, first byte to last
HEADER_LINE_MAX = 64 * 1024
HEADERS_MAX = 100
EVENT_LINE_MAX = 16 * 1024 * 1024  # one line of an event stream: an event with many logprobs fits
BODY_MAX = 256 * 1024 * 1024  # one answer, streamed or not
PIECE = 64 * 1024  # what one read asks the socket for


class ServerError(CookbookError):
    """The server refused a request, did not answer, or answered what the API does not say: the
    server's or the network's failure, not the recipe's."""

    exit_code = ENGINE_OR_NETWORK


class Unreachable(ServerError):
    """No server answers at the URL at all: the network's move, not a failed check."""


class BadAnswer(ServerError):
    """An answer that is not HTTP, not JSON, over a limit, or not shaped as the OpenAI API says."""


class _Late(OSError):
    """A read the server kept waiting past its timeout or the request's deadline."""


def check_url(url: str) -> str:
    """An http(s) URL with a host, without its trailing slash (paths are appended to it)."""
    if not isinstance(url, str) or any(ord(ch) < 0x21 or ord(ch) == 0x7F for ch in url):
        raise UsageError(f"--url must not hold spaces or control characters, not {printable(repr(url))}")
    try:
        parts = urlsplit(url)
        parts.hostname  # noqa: B018  (a bad IPv6 literal raises here or above)
    except ValueError as exc:
        raise UsageError(f"--url {url!r} is not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--url must be an http(s) URL such as http://HOST:PORT, not {url!r}")
    try:
        parts.port  # noqa: B018  (a port that is not a number raises here)
    except ValueError:
        raise UsageError(f"--url {url!r} has a port that is not a number from 1 to 65535") from None
    return url.rstrip("/")


def event_object(data: str) -> dict:
    """One event's JSON payload, which the API says is an object."""
    try:
        event = json.loads(data)
    except ValueError:
        raise BadAnswer(f"an event that is not JSON: '{printable(data[:80])}'") from None
    if not isinstance(event, dict):
        raise BadAnswer(f"an event that is not a JSON object: '{printable(data[:80])}'")
    return event


def sse_events(lines: Iterable[bytes | str]) -> Iterator[dict]:
    """`data:` payloads of a server-sent event stream (comments and blank lines skipped), `[DONE]` ends it."""
    for raw in lines:
        line = raw.decode("utf-8", "replace").strip() if isinstance(raw, bytes) else raw.strip()
        if not line or line.startswith(":") or not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        yield event_object(data)


def split_lines(pieces_seen: bytearray, data: bytes, limit: int = EVENT_LINE_MAX) -> list[bytes]:
    """The complete lines `data` ends, given the unfinished line so far (kept in `pieces_seen`, updated
    in place). Linear in the bytes: a long line is never copied again for every piece of it."""
    cut = data.rfind(b"\n")
    if cut < 0:
        pieces_seen += data
        lines = []
    else:
        lines = (bytes(pieces_seen) + data[:cut]).split(b"\n")
        pieces_seen[:] = data[cut + 1:]
    if len(pieces_seen) > limit or any(len(line) > limit for line in lines):
        raise BadAnswer(f"a line of the event stream longer than {limit} bytes")
    return lines


class _Stale(Exception):
    """A kept-alive connection the server had closed before our request reached it."""


class _Request:
    """One request's clock: each read waits at most the read timeout and never past the deadline."""

    def __init__(self, timeout: float, deadline: float):
        self.timeout, self.deadline_s = timeout, deadline
        self.until = time.monotonic() + deadline

    async def read(self, coro):
        left = self.until - time.monotonic()
        if left <= 0:
            coro.close()
            raise _Late(f"no complete answer within {self.deadline_s:g} s")
        try:
            return await asyncio.wait_for(coro, min(self.timeout, left))
        except TimeoutError:
            if left < self.timeout:
                raise _Late(f"no complete answer within {self.deadline_s:g} s") from None
            raise _Late(f"nothing for {self.timeout:g} s") from None

    async def line(self, reader: asyncio.StreamReader, what: str) -> bytes:
        try:
            return await self.read(reader.readline())
        except ValueError:  # the stream's limit (HEADER_LINE_MAX) is past without a newline
            raise BadAnswer(f"a {what} longer than {HEADER_LINE_MAX} bytes") from None

    async def exactly(self, reader: asyncio.StreamReader, size: int) -> AsyncIterator[bytes]:
        """`size` bytes in pieces of at most PIECE: never one buffer of whatever size the server says."""
        while size > 0:
            data = await self.read(reader.read(min(size, PIECE)))
            if not data:
                raise ConnectionResetError("the answer ended early")
            size -= len(data)
            yield data


async def _head(req: _Request, reader: asyncio.StreamReader) -> tuple[list[bytes], dict[str, str]]:
    status = (await req.line(reader, "status line")).split(b" ", 2)
    if status == [b""]:
        raise ConnectionResetError("the server closed the connection without an answer")
    headers: dict[str, str] = {}
    for _ in range(HEADERS_MAX + 1):
        line = await req.line(reader, "header line")
        if line in (b"\r\n", b"\n", b""):
            return status, headers
        k, _, v = line.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip().lower()
    raise BadAnswer(f"more than {HEADERS_MAX} header lines")


async def _body(req: _Request, reader: asyncio.StreamReader, headers: dict) -> AsyncIterator[bytes]:
    """The body as it arrives: HTTP/1.1 chunks decoded to the last one (and its trailer), Content-Length
    bytes, or reads to the end; never more than BODY_MAX in all."""
    left = BODY_MAX
    if headers.get("transfer-encoding") == "chunked":
        while True:
            line = await req.line(reader, "chunk size line")
            if not line:  # the connection closed before the last (empty) chunk: a cut-off answer
                raise ConnectionResetError("the stream ended before its last chunk")
            try:
                size = int(line.split(b";")[0].strip(), 16)
            except ValueError:
                raise BadAnswer(f"a chunk size that is not a number: '{printable(line[:40].decode('latin-1'))}'") \
                    from None
            if size < 0 or size > left:
                raise BadAnswer(f"a chunk of {size} bytes, past the {BODY_MAX} bytes an answer may have")
            if size == 0:
                for _ in range(HEADERS_MAX + 1):
                    if (await req.line(reader, "trailer line")) in (b"\r\n", b"\n", b""):
                        return
                raise BadAnswer(f"more than {HEADERS_MAX} trailer lines")
            left -= size
            async for data in req.exactly(reader, size):
                yield data
            await req.read(reader.readexactly(2))
    elif "content-length" in headers:
        try:
            size = int(headers["content-length"])
        except ValueError:
            raise BadAnswer("a Content-Length that is not a number") from None
        if size < 0 or size > BODY_MAX:
            raise BadAnswer(f"a Content-Length of {size}, past the {BODY_MAX} bytes an answer may have")
        async for data in req.exactly(reader, size):
            yield data
    else:
        while data := await req.read(reader.read(PIECE)):
            left -= len(data)
            if left < 0:
                raise BadAnswer(f"an answer longer than {BODY_MAX} bytes")
            yield data


class Connections:
    """Streamed POSTs to one server from one event loop over HTTP/1.1 keep-alive connections, reused as
    vLLM's benchmark client reuses its aiohttp connections: a new connection per request put the TCP
    connect and the server's accept inside every measured time to first token."""

    def __init__(self, url: str, timeout: float = REQUEST_TIMEOUT_S, deadline: float = DEADLINE_S):
        self.url = check_url(url)
        parts = urlsplit(self.url)
        self.tls = parts.scheme == "https"
        self.host, self.port = parts.hostname, parts.port or (443 if self.tls else 80)
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout  # for each read: a cold 244K-token prefill is minutes before its first byte
        self.deadline = deadline  # for each request, whole
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def __aenter__(self) -> Connections:
        return self

    async def __aexit__(self, *exc) -> None:
        for _, writer in self.idle:
            writer.close()
        self.idle.clear()

    def _kept(self):
        """An idle kept-alive connection the server has not visibly closed, or None."""
        while self.idle:
            reader, writer = self.idle.pop()
            if not (writer.is_closing() or reader.at_eof()):
                return reader, writer
            writer.close()
        return None

    def _request_head(self, method: str, path: str, payload: bytes | None, close: bool) -> bytes:
        host = f"[{self.host}]" if ":" in self.host else self.host
        head = f"{method} {self.prefix}{path} HTTP/1.1\r\nHost: {host}:{self.port}\r\n"
        if payload is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
        if close:
            head += "Connection: close\r\n"
        return (head + "\r\n").encode() + (payload or b"")

    async def _open(self, req: _Request):
        return await req.read(asyncio.open_connection(self.host, self.port, ssl=self.tls, limit=HEADER_LINE_MAX))

    async def fetch(self, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
        """One request on a connection of its own: its status and its whole (bounded) body."""
        req = _Request(self.timeout, self.deadline)
        writer = None
        answered = False
        try:
            reader, writer = await self._open(req)
            writer.write(self._request_head(method, path, None if body is None else json.dumps(body).encode(),
                                            close=True))
            await req.read(writer.drain())
            status, headers = await _head(req, reader)
            answered = True
            data = bytearray()
            async for piece in _body(req, reader, headers):
                data += piece
            try:
                return int(status[1]), bytes(data)
            except (IndexError, ValueError):
                raise BadAnswer(f"a status line that is not HTTP: {printable(repr(b' '.join(status)[:60]))}") \
                    from None
        except (OSError, asyncio.IncompleteReadError, BadAnswer) as exc:  # a read's timeout is an OSError too
            raise self._failure(path, exc, answered) from None
        finally:
            if writer is not None:
                writer.close()

    def _failure(self, path: str, exc: Exception, answered: bool) -> Exception:
        """The one-line error a request's failure becomes: the server's (exit 3), with the path and URL."""
        if isinstance(exc, BadAnswer):
            return BadAnswer(f"{path}: {self.url} sent {exc.what}")
        what = "the answer broke off" if answered else "no answer"
        return ServerError(f"{path}: {what} from {self.url}: {printable(str(exc)) or type(exc).__name__}")

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
        req = _Request(self.timeout, self.deadline)
        kept = self._kept() if reuse else None
        reused = kept is not None
        reader, writer = kept or (None, None)
        answered = False  # once the server answered, a broken connection is its failure, not a stale one
        try:
            if not reused:
                reader, writer = await self._open(req)
            writer.write(self._request_head("POST", path, json.dumps(body).encode(), close=False))
            await req.read(writer.drain())
            status, headers = await _head(req, reader)
            answered = True
            if len(status) < 2 or status[1] != b"200":
                detail = (await req.read(reader.read(500))).decode(errors="replace")
                raise ServerError(printable(f"{path}: HTTP {b' '.join(status[1:]).decode(errors='replace').strip()}: "
                                            f"{detail}"))
            unfinished = bytearray()
            async for data in _body(req, reader, headers):
                now = time.perf_counter()
                for event in sse_events(split_lines(unfinished, data)):
                    yield now, event
            if headers.get("transfer-encoding") == "chunked" and headers.get("connection") != "close":
                self.idle.append((reader, writer))
                writer = None
        except (OSError, asyncio.IncompleteReadError, BadAnswer) as exc:  # a read's timeout is an OSError too
            if reused and not answered and isinstance(exc, ConnectionError):
                raise _Stale from exc
            raise self._failure(path, exc, answered) from None
        finally:
            if writer is not None:
                writer.close()


@dataclass
class Server:
    url: str  # http://host:port, no trailing slash
    model: str = ""  # as the server names it (sent back as it is; shown through errors.printable)
    max_model_len: int = 0
    timeout: float = REQUEST_TIMEOUT_S
    started: float | None = None  # the API server process's start time when we connected (/metrics)
    requests: int = 0  # requests sent so far (smoke tells a recipe's bad params from a server's bad answer)
    bad_answer: str | None = None  # the first answer that broke the API's shape, once one did
    _lengths: dict = field(default_factory=dict, repr=False)

    @classmethod
    def connect(cls, url: str, timeout: float = REQUEST_TIMEOUT_S) -> Server:
        """The server and the model it serves (the first of /v1/models), with its context length."""
        server = cls(check_url(url), timeout=timeout)
        try:
            listing = server.get_json("/v1/models")
        except BadAnswer:
            raise
        except ServerError as exc:
            raise Unreachable(f"no OpenAI-compatible server at {server.url}: {exc}",
                              hint="start the server first (or check --url)") from None
        models = listing.get("data") or []
        if not isinstance(models, list):
            raise BadAnswer(f"{server.url}/v1/models: \"data\" is not a list")
        if not models:
            raise ServerError(f"{server.url}/v1/models lists no model")
        first = models[0]
        if not isinstance(first, dict) or not isinstance(first.get("id"), str) or not first["id"]:
            raise BadAnswer(f"{server.url}/v1/models: its first model has no \"id\" string")
        server.model = first["id"]
        length = first.get("max_model_len")
        if not length:
            raise ServerError(f"{server.url}/v1/models does not say the model's max_model_len (not a vLLM server?)")
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise BadAnswer(f"{server.url}/v1/models: max_model_len is not a positive whole number: "
                            f"{printable(repr(length))[:40]}")
        server.max_model_len = length
        server.started = server.start_time()
        return server

    def _call(self, method: str, path: str, body: dict | None = None,
              timeout: float | None = None) -> tuple[int, bytes]:
        self.requests += 1

        async def one():
            return await Connections(self.url, timeout or self.timeout).fetch(method, path, body)

        try:
            return asyncio.run(one())
        except BadAnswer as exc:
            self.bad_answer = self.bad_answer or exc.what
            raise

    def bad(self, what: str) -> BadAnswer:
        """A BadAnswer, remembered: a smoke run that saw one ends with the server's exit code."""
        self.bad_answer = self.bad_answer or what
        return BadAnswer(f"{self.url} {what}")

    def _json(self, method: str, path: str, body: dict | None) -> dict:
        status, data = self._call(method, path, body)
        if status != 200:
            detail = printable(data[:500].decode(errors="replace"))
            raise ServerError(f"{path}: HTTP {status}: {detail}")
        try:
            answer = json.loads(data)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise self.bad(f"{path}: an answer that is not a JSON object: "
                           f"'{printable(data[:60].decode(errors='replace'))}'")
        return answer

    def start_time(self) -> float | None:
        """The server process's start time (Prometheus' process_start_time_seconds), if /metrics says it."""
        try:
            status, data = self._call("GET", "/metrics", timeout=30)
        except ServerError:
            return None
        if status != 200:
            return None
        for line in data.decode(errors="replace").splitlines():
            if line.startswith("process_start_time_seconds "):
                try:
                    return float(line.split()[1])
                except (IndexError, ValueError):
                    return None
        return None

    def get_json(self, path: str) -> dict:
        return self._json("GET", path, None)

    def post(self, path: str, body: dict) -> dict:
        return self._json("POST", path, body)

    def chat(self, messages: list[dict], **params) -> dict:
        return self.post("/v1/chat/completions", {"model": self.model, "messages": messages, **params})

    def chat_stream(self, messages: list[dict], **params) -> list[dict]:
        """The chunks of a streamed chat completion (server-sent events), in order."""
        body = {"model": self.model, "messages": messages, "stream": True, **params}
        self.requests += 1

        async def collect():
            async with Connections(self.url, self.timeout) as conns:
                return [event async for _, event in conns.events("/v1/chat/completions", body)]

        try:
            return asyncio.run(collect())
        except BadAnswer as exc:
            self.bad_answer = self.bad_answer or exc.what
            raise

    def healthy(self) -> bool:
        try:
            return self._call("GET", "/health", timeout=30)[0] == 200
        except ServerError:
            return False

    def count_chat(self, messages: list[dict], **params) -> int:
        """Prompt tokens of a chat request, templated and counted by the server's tokenizer."""
        count = self.post("/tokenize", {"model": self.model, "messages": messages, "add_generation_prompt": True,
                                        **params}).get("count")
        if isinstance(count, bool) or not isinstance(count, int):
            raise self.bad("/tokenize: the answer's count is not a whole number")
        return count

    def count_text(self, text: str) -> int:
        if text not in self._lengths:
            self._lengths[text] = len(self.token_ids(text))
        return self._lengths[text]

    def token_ids(self, text: str) -> list[int]:
        ids = self.post("/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": False}).get("tokens")
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise self.bad("/tokenize: the answer is not a list of token ids")
        return ids

