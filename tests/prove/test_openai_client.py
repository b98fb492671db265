"""cookbook/prove/openai_client.py: URL checks and server-sent events (table driven), and the streamed POSTs
over kept-alive connections against a real local HTTP/1.1 server (its sockets counted)."""

import asyncio
import json
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cookbook.host.errors import UsageError
from cookbook.host.paths import ROOT
from cookbook.prove.openai_client import BadAnswer, Connections, Server, ServerError, Unreachable, check_url, sse_events


@pytest.mark.parametrize("url,expect", [
    ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
    ("https://gaudi.example/", "https://gaudi.example"),
    ("http://host:8000/prefix/", "http://host:8000/prefix"),
])
def test_check_url(url, expect):
    assert check_url(url) == expect


@pytest.mark.parametrize("url,words", [
    ("foo", "http(s) URL"), ("", "http(s) URL"), ("ftp://host", "http(s) URL"), ("http://", "http(s) URL"),
    ("http://host:port", "not a number"),
    ("http://127.0.0.1:8000\r\nX-Injected: 1", "control characters"), ("http://a b", "control characters"),
    ("http://[::1", "is not a URL"), ("http://[zz]:80", "is not a URL"),
])
def test_check_url_refusals(url, words):
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")):
        check_url(url)


@pytest.mark.parametrize("lines,expect", [
    ([b"data: {\"a\": 1}", b"", b": ping", b"data: [DONE]", b"data: {\"b\": 2}"], [{"a": 1}]),
    ([b"event: x", b"data:{\"c\":3}\n"], [{"c": 3}]),
    (["data: {\"d\": 4}"], [{"d": 4}]),
])
def test_sse_events(lines, expect):
    assert list(sse_events(lines)) == expect


class Handler(BaseHTTPRequestHandler):
    """A streamed completion of `n` events as vLLM sends it (HTTP/1.1, chunked, kept alive), or what
    the request's `mode` asks for instead."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        self.server.accepted += 1
        self.answered = False  # on this connection

    def chunk(self, data: bytes):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        mode = body.get("mode")
        if mode == "silent" or (mode == "once" and self.answered):  # closed without a status line
            self.close_connection = True  # "once": as a server whose idle timeout fired as the request came
            return
        self.answered = True
        if mode == "refuse":
            data = b'{"error": "no such model"}'
            self.send_response(404)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(body.get("n", 3)):
            self.chunk(b'data: {"choices": [{"text": "%d"}]}\n\n' % i)
            self.wfile.flush()
            if mode == "die":
                self.close_connection = True
                return
        self.chunk(b"data: [DONE]\n\n")
        self.chunk(b"")
        # "drop": the connection closed after a complete answer, without saying so (an idle timeout).
        self.close_connection = mode == "drop"


@pytest.fixture
def local_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.accepted = 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def post_all(url: str, bodies: list[dict]) -> list:
    async def run():
        async with Connections(url, timeout=10) as conns:
            out = []
            for body in bodies:
                try:
                    out.append([event async for _, event in conns.events("/v1/completions", body)])
                except ServerError as exc:
                    out.append(exc)
            return out

    return asyncio.run(run())


def test_requests_share_one_kept_alive_connection(local_server):
    url = f"http://127.0.0.1:{local_server.server_port}"
    out = post_all(url, [{"n": 2}, {"n": 3}, {"n": 1}])
    assert [[e["choices"][0]["text"] for e in events] for events in out] == [["0", "1"], ["0", "1", "2"], ["0"]]
    assert local_server.accepted == 1


def test_a_connection_the_server_dropped_is_replaced(local_server):
    url = f"http://127.0.0.1:{local_server.server_port}"
    out = post_all(url, [{"n": 1, "mode": "drop"}, {"n": 2}])
    assert [len(events) for events in out] == [1, 2]
    assert local_server.accepted == 2


def test_a_kept_alive_connection_closed_under_the_request_is_replaced_once(local_server):
    url = f"http://127.0.0.1:{local_server.server_port}"
    out = post_all(url, [{"n": 1, "mode": "once"}, {"n": 2, "mode": "once"}])
    assert [len(events) for events in out] == [1, 2]
    assert local_server.accepted == 2
    # Once: a server that closes every connection it is sent a request on is a server that does not answer.
    (failed,) = post_all(url, [{"mode": "silent"}])
    assert isinstance(failed, ServerError) and local_server.accepted == 3


@pytest.mark.parametrize("mode,words", [("refuse", "HTTP 404.*no such model"),
                                        ("silent", "no answer.*closed the connection without an answer"),
                                        ("die", "broke off.*ended before its last chunk")])
def test_failures_are_server_errors(local_server, mode, words):
    url = f"http://127.0.0.1:{local_server.server_port}"
    (failed,) = post_all(url, [{"n": 2, "mode": mode}])
    assert isinstance(failed, ServerError)
    assert re.search(words, str(failed)), failed


# --- A hostile server (tests/hostile_http.py, a real one on 127.0.0.1): every answer is bounded ---

MEASURE = """
import asyncio, json, sys, time
from cookbook.prove.openai_client import Connections, ServerError

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":")) / 1024

async def run(url):
    async with Connections(url, timeout=20) as conns:
        async for _ in conns.events("/v1/completions", {"stream": True}):
            pass

# What the request adds, not what the imports took (they vary with the environment): the kernel's
# peak-RSS mark is reset here (clear_refs 5), then read after the request.
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status("VmRSS")
start = time.monotonic()
try:
    asyncio.run(run(sys.argv[1]))
    error = None
except ServerError as exc:
    error = str(exc)
print(json.dumps({"error": error, "seconds": time.monotonic() - start,
                  "grew_mb": status("VmHWM") - before}))
"""


@pytest.mark.parametrize("mode,words", [
    # aiohttp never buffers a chunk whole: its bytes count against the line and the answer as they come.
    ("huge-chunk", "a line of the event stream longer than 16777216 bytes"),
    ("long-answer", "an answer longer than 268435456 bytes"),
    ("long-line", "a line of the event stream longer than 16777216 bytes"),
    ("long-header", "a header line longer than 65536 bytes"),
    ("many-headers", "more than 100 header lines"),
    ("not-object", "an event that is not a JSON object"),
])
def test_a_hostile_stream_fails_fast_in_bounded_memory(hostile_url, mode, words):
    """Measured in a process of its own (its peak RSS over what it held before the request): before the
    bounds, the 1 TiB chunk took 817 MB before the server's 1 GiB cap ended it and the 64 MiB line 41 s
    and 177 MB; now each fails in well under a second."""
    out = subprocess.run([sys.executable, "-c", MEASURE, f"{hostile_url}/{mode}"], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["error"] and words in got["error"], got
    assert got["seconds"] < 5 and got["grew_mb"] < 64, got


def test_every_request_has_a_deadline(hostile_url):
    """A server that sends a comment line every 0.2 s never trips the read timeout; the deadline ends it."""
    async def run():
        async with Connections(f"{hostile_url}/drip", timeout=5, deadline=1.5) as conns:
            async for _ in conns.events("/v1/completions", {}):
                pass

    start = time.monotonic()
    with pytest.raises(ServerError, match="no complete answer within 1.5 s"):
        asyncio.run(run())
    assert time.monotonic() - start < 4


@pytest.mark.parametrize("mode,kind,words", [
    ("garbage", BadAnswer, "not a JSON object"),
    ("models-list", BadAnswer, "not a JSON object"),
    ("models-noid", BadAnswer, 'no "id" string'),
    ("cut", Unreachable, "broke off"),
])
def test_a_garbage_model_list_is_the_servers_failure(hostile_url, mode, kind, words):
    with pytest.raises(kind, match=words) as caught:
        Server.connect(f"{hostile_url}/{mode}", timeout=10)
    assert caught.value.exit_code == 3


def test_an_answer_that_is_not_http_is_a_bad_answer(hostile_url):
    with pytest.raises(BadAnswer, match=r"/v1/models: .* sent an answer that is not HTTP/1.1 \(Bad status line.*SSH"):
        Server.connect(f"{hostile_url}/not-http", timeout=10)

    async def run():
        async with Connections(f"{hostile_url}/bad-chunk", timeout=10) as conns:
            return [event async for _, event in conns.events("/v1/completions", {})]

    with pytest.raises(BadAnswer, match=r"not HTTP/1.1 \(Invalid character in chunk size: b'zz'\)"):
        asyncio.run(run())


@pytest.mark.parametrize("mode,words", [
    ("long-header", "a header line longer than 65536 bytes"),
    ("many-headers", "more than 100 header lines"),
    ("huge-length", "a Content-Length of 1099511627776, past the 268435456 bytes"),
])
def test_json_answers_are_bounded_too(hostile_url, mode, words):
    """/v1/models and the other JSON requests go through the same bounded reader as the streams."""
    start = time.monotonic()
    with pytest.raises(BadAnswer, match=words):
        Server.connect(f"{hostile_url}/{mode}", timeout=10)
    assert time.monotonic() - start < 5
