"""A small HTTP proxy in front of a real server that breaks one property, so that the smoke check of
that property can be shown to fail: `strip_logit_bias` drops `logit_bias` from every request (the
stock release's silent bug); `die_after_prompt_logprobs` answers the prompt_logprobs request, then
refuses everything, /health included (the stock release's dead engine)."""

from __future__ import annotations

import contextlib
import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Handler(BaseHTTPRequestHandler):
    server: _Proxy

    def log_message(self, *args):  # quiet
        pass

    def _forward(self, body: bytes | None) -> None:
        proxy = self.server
        if proxy.dead:
            self.send_error(503, "engine dead")
            return
        asked_prompt_logprobs = False
        if body:
            data = json.loads(body)
            if proxy.strip_logit_bias:
                data.pop("logit_bias", None)
            asked_prompt_logprobs = data.get("prompt_logprobs") is not None
            body = json.dumps(data).encode()
        req = urllib.request.Request(proxy.upstream + self.path, data=body, method=self.command,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=600) as resp:
                status, payload, kind = resp.status, resp.read(), resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            status, payload, kind = exc.code, exc.read(), exc.headers.get("Content-Type", "")
        if asked_prompt_logprobs and proxy.die_after_prompt_logprobs:
            proxy.dead = True
        self.send_response(status)
        self.send_header("Content-Type", kind or "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self):
        self._forward(None)

    def do_POST(self):
        self._forward(self.rfile.read(int(self.headers.get("Content-Length") or 0)))


class _Proxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str, strip_logit_bias: bool, die_after_prompt_logprobs: bool):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream = upstream.rstrip("/")
        self.strip_logit_bias = strip_logit_bias
        self.die_after_prompt_logprobs = die_after_prompt_logprobs
        self.dead = False


@contextlib.contextmanager
def breaking_proxy(upstream: str, *, strip_logit_bias: bool = False, die_after_prompt_logprobs: bool = False):
    """Yield the proxy's URL; stop it afterwards."""
    proxy = _Proxy(upstream, strip_logit_bias, die_after_prompt_logprobs)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{proxy.server_address[1]}"
    finally:
        proxy.shutdown()
        proxy.server_close()
