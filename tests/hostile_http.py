"""A real HTTP server on 127.0.0.1 that answers the way a hostile or broken server would, chosen by the
first part of the request's path (`http://127.0.0.1:PORT/MODE` is the URL a client is given):

  huge-chunk    a stream that announces one 1 TiB chunk and sends bytes as fast as it can
  long-answer   the same, in complete comment lines of 64 KiB (only the answer's size can stop it)
  long-line     a stream of 64 MiB without a newline
  huge-length   /v1/models says it has 1 TiB (Content-Length) and sends bytes as fast as it can
  long-header   a header line of 1 MiB
  many-headers  10,000 headers
  drip          a stream that sends a comment line every 0.2 s, forever
  garbage       /v1/models (and everything else) answers 200 with bytes that are not JSON
  models-list   /v1/models answers a JSON list; models-noid: an entry without "id"
  not-object    /v1/models is fine, a stream's event is a JSON list
  bad-shape     /v1/models is fine, a stream's event is an object whose choices are not a list
  escapes       /v1/models names a model with terminal escape codes in its id
  cut           /v1/models says it has 1000 bytes and sends 10
  not-http      everything answers with an SSH banner
  bad-chunk     /v1/models is fine, a stream's chunk size is not a number
  pypi-flood    a package index (/simple/NAME/) whose one wheel link streams bytes as fast as it can

A git or pip client is given `http://127.0.0.1:PORT/drip/...` for a source that trickles forever.

Bytes sent are capped (SEND_CAP) so a client that never stops reading still ends. Run as a script it
prints its URL and serves until killed.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time

SEND_CAP = 1 << 30  # what any one answer sends at most: 1 GiB
PIECE = b"a" * (1 << 16)
COMMENT = b": " + b"a" * ((1 << 16) - 3) + b"\n"  # a line of the stream that is no event
MODEL_OK = {"object": "list", "data": [{"id": "tiny", "object": "model", "max_model_len": 4096}]}
ESCAPED_ID = "tiny\x1b[2J\x1b]0;pwned\x07\x1b[31mred\r\nfake line"


def _send_forever(sock: socket.socket, head: bytes, piece: bytes, cap: int = SEND_CAP) -> None:
    sock.sendall(head)
    sent = 0
    while sent < cap:
        sock.sendall(piece)
        sent += len(piece)


def _answer(status: str, body: bytes, ctype: str = "application/json", extra: bytes = b"") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n").encode() + extra + b"\r\n" + body


def _stream_head() -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        sock = self.request
        data = b""
        while b"\r\n\r\n" not in data:
            got = sock.recv(65536)
            if not got:
                return
            data += got
        head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1")
        path = head.split(" ")[1]
        mode, _, rest = path.lstrip("/").partition("/")
        rest = "/" + rest
        try:
            self.answer(sock, mode, rest)
        except OSError:  # the client hung up: what a bounded client does
            pass

    def answer(self, sock, mode, rest):
        models = MODEL_OK
        if mode == "escapes":
            models = {"object": "list", "data": [{"id": ESCAPED_ID, "max_model_len": 4096}]}
        if mode == "not-http":
            return sock.sendall(b"SSH-2.0-OpenSSH_9.2\r\n\r\n")
        if mode == "garbage":
            return sock.sendall(_answer("200 OK", b"<html>\x00\xff not json", "text/html"))
        if rest == "/v1/models":
            if mode == "models-list":
                return sock.sendall(_answer("200 OK", b"[1, 2, 3]"))
            if mode == "models-noid":
                return sock.sendall(_answer("200 OK", json.dumps({"data": [{"name": "x"}]}).encode()))
            if mode == "huge-length":
                return _send_forever(sock, b"HTTP/1.1 200 OK\r\nContent-Length: 1099511627776\r\n\r\n", PIECE)
            if mode == "cut":
                return sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{\"data\": [")
            if mode not in ("long-header", "many-headers"):
                return sock.sendall(_answer("200 OK", json.dumps(models).encode()))
        if mode == "pypi-flood":
            if rest.startswith("/simple/"):
                name = rest.split("/")[2]
                link = f'<a href="/pypi-flood/files/{name}-0.26.0-py3-none-any.whl">{name}-0.26.0-py3-none-any.whl</a>'
                return sock.sendall(_answer("200 OK", f"<html><body>{link}</body></html>".encode(), "text/html"))
            return _send_forever(sock, b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                                       b"Connection: close\r\n\r\n", PIECE)
        if rest == "/metrics":
            return sock.sendall(_answer("404 Not Found", b""))
        if mode == "huge-chunk":
            return _send_forever(sock, _stream_head() + b"10000000000\r\n", PIECE)
        if mode == "long-answer":
            return _send_forever(sock, _stream_head() + b"10000000000\r\n", COMMENT)
        if mode == "long-line":
            return _send_forever(sock, _stream_head() + _chunk(b"data: "), _chunk(PIECE), 64 << 20)
        if mode == "long-header":
            return _send_forever(sock, b"HTTP/1.1 200 OK\r\nX-Long: ", PIECE, 1 << 20)
        if mode == "many-headers":
            return sock.sendall(b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 10000 + b"\r\n")
        if mode == "drip":
            sock.sendall(_stream_head())
            while True:
                sock.sendall(_chunk(b": ping\n"))
                time.sleep(0.2)
        if mode == "bad-shape":  # an object, but its choices are not a list
            sock.sendall(_stream_head() + _chunk(b'data: {"choices": {"text": "x"}}\n\n') + _chunk(b""))
            return
        if mode == "bad-chunk":
            return sock.sendall(_stream_head() + b"zz\r\ndata: {}\n\n\r\n" + _chunk(b""))
        if mode == "not-object":
            sock.sendall(_stream_head() + _chunk(b"data: [1, 2]\n\n") + _chunk(b"data: [DONE]\n\n") + _chunk(b""))
            return
        # everything else: a harmless streamed answer
        event = {"choices": [{"index": 0, "delta": {"content": "hi"}, "text": "hi"}]}
        sock.sendall(_stream_head() + _chunk(b"data: " + json.dumps(event).encode() + b"\n\n")
                     + _chunk(b"data: [DONE]\n\n") + _chunk(b""))


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def start() -> tuple[Server, str]:
    """A running server and its base URL (add /MODE)."""
    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


if __name__ == "__main__":
    _, url = start()
    print(url, flush=True)
    while True:
        time.sleep(3600)
