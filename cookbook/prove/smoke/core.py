"""What every check gets and gives: the sized run context and the outcome (registry.py finds a check by
its name)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from ..openai_client import Server
from . import sizing

Status = Literal["passed", "failed", "skipped"]


@dataclass(frozen=True)
class Outcome:
    status: Status
    result: str  # the page's Result column: "8/8", "valid object", or why it failed or was skipped
    detail: list[str] = field(default_factory=list)  # what went wrong, request by request

    @classmethod
    def count(cls, good: int, total: int, detail: list[str], suffix: str = "") -> Outcome:
        return cls("passed" if good == total and total > 0 else "failed", f"{good}/{total}{suffix}", detail)


@dataclass
class Context:
    server: Server
    factor: float  # recipe sizes -> this server's (sizing.factor)
    block: int  # the recipe's KV block: cached tokens come in multiples of it
    modalities: tuple[str, ...]
    reasoning: bool

    @property
    def budget(self) -> int:
        return sizing.answer_budget(self.server.max_model_len)

    def tokens(self, recipe_tokens: int, floor: int = 0) -> int:
        return sizing.prompt_tokens(recipe_tokens, self.factor, self.server.max_model_len, floor)


Check = Callable[[Context, dict], Outcome]  # what registry.CHECKS names


def fresh_salt() -> str:
    """A cache_salt no request has used: its prompt cannot hit the prefix cache."""
    return uuid.uuid4().hex


def content(response: dict) -> str:
    return response["choices"][0]["message"].get("content") or ""


def said(response: dict) -> str:
    """What a chat answer says, for a failure message: content, else the reasoning and why it stopped."""
    choice = response["choices"][0]
    message = choice["message"]
    text = message.get("content") or ""
    if not text:
        thought = message.get("reasoning") or message.get("reasoning_content") or ""
        text = f"no content (finish_reason {choice.get('finish_reason')}; reasoning {thought[-80:]!r})"
    return text[:160]
