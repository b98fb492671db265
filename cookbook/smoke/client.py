"""The OpenAI-compatible server under test, through the standard library only: JSON requests, a
streamed chat, /health, /v1/models and vLLM's /tokenize (lengths are counted with the served model's
own tokenizer)."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ..errors import CookbookError

# Generous: a real model reasons at length, and a cold 244K-token prefill takes minutes.
REQUEST_TIMEOUT_S = 900.0


class ServerError(CookbookError):
    """The server refused a request or did not answer."""


@dataclass
class Server:
    url: str  # http://host:port, no trailing slash
    model: str = ""
    max_model_len: int = 0
    timeout: float = REQUEST_TIMEOUT_S
    _lengths: dict = field(default_factory=dict, repr=False)

    @classmethod
    def connect(cls, url: str, timeout: float = REQUEST_TIMEOUT_S) -> Server:
        """The server and the model it serves (the first of /v1/models), with its context length."""
        server = cls(url.rstrip("/"), timeout=timeout)
        models = server.get_json("/v1/models").get("data") or []
        if not models:
            raise ServerError(f"{server.url}/v1/models lists no model")
        server.model = models[0]["id"]
        server.max_model_len = int(models[0].get("max_model_len") or 0)
        if not server.max_model_len:
            raise ServerError(f"{server.url}/v1/models does not say the model's max_model_len (not a vLLM server?)")
        return server

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
        parts = urlsplit(self.url)
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = kind(parts.hostname, parts.port, timeout=self.timeout)
        body = json.dumps({"model": self.model, "messages": messages, "stream": True, **params})
        try:
            conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                raise ServerError(f"streamed chat: HTTP {resp.status}: {resp.read()[:500].decode(errors='replace')}")
            chunks = []
            for raw in resp:
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line.removeprefix("data:").strip()
                if data == "[DONE]":
                    break
                chunks.append(json.loads(data))
            return chunks
        except OSError as exc:
            raise ServerError(f"streamed chat: no answer from {self.url}: {exc}") from None
        finally:
            conn.close()

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
            self._lengths[text] = int(self.post("/tokenize", {"model": self.model, "prompt": text,
                                                              "add_special_tokens": False})["count"])
        return self._lengths[text]

    def token_ids(self, text: str) -> list[int]:
        return list(self.post("/tokenize", {"model": self.model, "prompt": text,
                                            "add_special_tokens": False})["tokens"])
