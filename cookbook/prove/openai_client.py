"""The OpenAI-compatible server under test (smoke and bench): JSON requests, /health, /v1/models and
vLLM's /tokenize (lengths are counted with the served model's own tokenizer), and streamed requests
whose server-sent events are timed as they arrive.

On aiohttp, the library `vllm bench serve` sends its requests with (vllm/benchmarks/lib/
endpoint_request_func.py), used as it uses it: one session per run whose HTTP/1.1 connections are kept
alive and reused, the clock read as each piece of the body arrives (`content.iter_any()`), so the bench's
figures agree with vLLM's (tests/bench_agreement.py). The server under test is not trusted with our memory
or our time: a header line, the number of headers, a read, a line of the event stream and a whole answer
have limits, and every request has an overall deadline besides the timeout of each read (a server that
sends a byte a minute never trips a read timeout).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import aiohttp
from aiohttp import http_exceptions

from ..host.errors import ENGINE_OR_NETWORK, CookbookError, UsageError, printable

# Generous: a real model reasons at length, and a cold 244K-token prefill takes minutes.
REQUEST_TIMEOUT_S = 900.0  # the longest wait for any one read
DEADLINE_S = 3600.0  # the longest a whole request may take, first byte to last
HEADER_LINE_MAX = 64 * 1024  # the status line and each header line
HEADERS_MAX = 100
EVENT_LINE_MAX = 16 * 1024 * 1024  # one line of an event stream: an event with many logprobs fits
BODY_MAX = 256 * 1024 * 1024  # one answer, streamed or not
PIECE = 64 * 1024  # what the socket's reads buffer before the stream stops reading (aiohttp's read_bufsize)


class ServerError(CookbookError):
    """The server refused a request, did not answer, or answered what the API does not say: the
    server's or the network's failure, not the recipe's."""

    exit_code = ENGINE_OR_NETWORK


class Unreachable(ServerError):
    """No server answers at the URL at all: the network's move, not a failed check."""


class BadAnswer(ServerError):
    """An answer that is not HTTP, not JSON, over a limit, or not shaped as the OpenAI API says."""


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


async def _pieces(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The body as it arrives (aiohttp decodes the chunks and never buffers more than a few reads), never
    more than BODY_MAX in all: a Content-Length past it is refused before a byte of the body is read."""
    size = response.content_length
    if size is not None and size > BODY_MAX:
        raise BadAnswer(f"a Content-Length of {size}, past the {BODY_MAX} bytes an answer may have")
    left = BODY_MAX
    async for data in response.content.iter_any():
        left -= len(data)
        if left < 0:
            raise BadAnswer(f"an answer longer than {BODY_MAX} bytes")
        yield data


def _said(exc: BaseException) -> str:
    """What went wrong, in one line and in our words where aiohttp's name its parser's internals."""
    chain, seen = [], exc
    while seen is not None and len(chain) < 8:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    ours = {http_exceptions.LineTooLong: f"a header line longer than {HEADER_LINE_MAX} bytes",
            http_exceptions.TransferEncodingError: "the stream ended before its last chunk",
            http_exceptions.ContentLengthError: "the answer ended before its Content-Length"}
    for kind, said in ours.items():  # aiohttp wraps its parser's error in copies of the same message
        if any(isinstance(e, kind) for e in chain):
            return said
    for e in chain:
        if isinstance(e, http_exceptions.HttpProcessingError):
            if "too many headers" in e.message.lower():
                return f"more than {HEADERS_MAX} header lines"
            # aiohttp's message spans lines with a caret under the byte it refused
            return f"an answer that is not HTTP/1.1 ({printable(' '.join(e.message.replace('^', '').split()))[:120]})"
    return printable(str(exc)) or type(exc).__name__


def _head_refused(exc: BaseException) -> bool:
    """aiohttp refused the status line or headers as HTTP: the server answered garbage."""
    return isinstance(exc, aiohttp.ClientResponseError) and not isinstance(exc, aiohttp.TooManyRedirects)


async def _note_reuse(session, context, params) -> None:
    context.trace_request_ctx["reused"] = True


class Connections:
    """Requests to one server from one event loop, in one aiohttp session: HTTP/1.1 connections kept
    alive and reused as vLLM's benchmark client reuses them (a new connection per request put the TCP
    connect and the server's accept inside every measured time to first token). Use as `async with`."""

    def __init__(self, url: str, timeout: float = REQUEST_TIMEOUT_S, deadline: float = DEADLINE_S):
        self.url = check_url(url)
        self.timeout = timeout  # for each read: a cold 244K-token prefill is minutes before its first byte
        self.deadline = deadline  # for each request, whole
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Connections:
        trace = aiohttp.TraceConfig()
        trace.on_connection_reuseconn.append(_note_reuse)
        self._session = aiohttp.ClientSession(
            # No limit on connections: the bench's own semaphore says how many streams are in flight.
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60),
            timeout=aiohttp.ClientTimeout(total=self.deadline, sock_connect=self.timeout, sock_read=self.timeout),
            read_bufsize=PIECE, max_line_size=HEADER_LINE_MAX, max_field_size=HEADER_LINE_MAX,
            max_headers=HEADERS_MAX,
            # The server's bytes as they are: no compression asked for or undone (a small gzip body can
            # inflate past any bound before it is counted), no cookies kept, no proxy from the environment.
            auto_decompress=False, skip_auto_headers=("Accept-Encoding",), cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False, trace_configs=[trace])
        return self

    async def __aexit__(self, *exc) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _request(self, method: str, path: str, body: dict | None, context: dict | None = None):
        if self._session is None:
            raise RuntimeError("Connections is used as `async with Connections(...) as conns`")
        return self._session.request(method, self.url + path, json=body, allow_redirects=False,
                                     trace_request_ctx=context)

    async def fetch(self, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
        """One request: its status and its whole (bounded) body."""
        answered = False
        try:
            async with self._request(method, path, body) as response:
                answered = True
                data = bytearray()
                async for piece in _pieces(response):
                    data += piece
                return response.status, bytes(data)
        except (OSError, aiohttp.ClientError, BadAnswer) as exc:  # a timeout is an OSError too
            raise self._failure(path, exc, answered) from None

    def _failure(self, path: str, exc: Exception, answered: bool) -> Exception:
        """The one-line error a request's failure becomes: the server's (exit 3), with the path and URL."""
        if isinstance(exc, BadAnswer):
            return BadAnswer(f"{path}: {self.url} sent {exc.what}")
        if _head_refused(exc):
            return BadAnswer(f"{path}: {self.url} sent {_said(exc)}")
        if isinstance(exc, aiohttp.ServerTimeoutError):
            said = f"nothing for {self.timeout:g} s"
        elif isinstance(exc, TimeoutError):  # aiohttp's total: the request's deadline
            said = f"no complete answer within {self.deadline:g} s"
        elif isinstance(exc, aiohttp.ServerDisconnectedError) and not answered:
            said = "the server closed the connection without an answer"
        elif isinstance(exc, aiohttp.ClientConnectorError):  # the system's words, as in `connection refused`
            said = printable(str(exc.os_error))
        else:
            said = _said(exc)
        what = "the answer broke off" if answered else "no answer"
        return ServerError(f"{path}: {what} from {self.url}: {said}")

    async def events(self, path: str, body: dict) -> AsyncIterator[tuple[float, dict]]:
        """POST `body` to `path` with a stream in return: each server-sent event with the perf_counter
        reading at which its bytes arrived. A kept-alive connection that the server had closed is
        replaced once, before anything was read (aiohttp retries only idempotent methods itself)."""
        for attempt in range(2):
            try:
                async for item in self._events(path, body, retry=attempt == 0):
                    yield item
                return
            except _Stale:
                continue

    async def _events(self, path: str, body: dict, retry: bool) -> AsyncIterator[tuple[float, dict]]:
        context = {"reused": False}
        answered = False  # once the server answered, a broken connection is its failure, not a stale one
        try:
            async with self._request("POST", path, body, context) as response:
                answered = True
                if response.status != 200:
                    detail = (await response.content.read(500)).decode(errors="replace")
                    raise ServerError(printable(f"{path}: HTTP {response.status} {response.reason or ''}: "
                                                f"{detail}"))
                unfinished = bytearray()
                async for data in _pieces(response):
                    now = time.perf_counter()
                    for event in sse_events(split_lines(unfinished, data)):
                        yield now, event
        except (OSError, aiohttp.ClientError, BadAnswer) as exc:  # a timeout is an OSError too
            if retry and context["reused"] and not answered and \
                    isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)):
                raise _Stale from exc
            raise self._failure(path, exc, answered) from None


class _Stale(Exception):
    """A kept-alive connection the server had closed before our request reached it."""


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
            async with Connections(self.url, timeout or self.timeout) as conns:
                return await conns.fetch(method, path, body)

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

