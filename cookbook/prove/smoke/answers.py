"""Known-answer prompts at temperature 0 (arithmetic, facts, translation), one at a time or many in
flight: every answer must contain its known word."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ..openai_client import ServerError
from .core import Context, Outcome, content, said
from .prompts import KNOWN_ANSWERS


def known_answers(ctx: Context, params: dict) -> Outcome:
    count = int(params.get("prompts", len(KNOWN_ANSWERS)))
    in_flight = int(params.get("concurrency", 1))
    temperature = float(params.get("temperature", 0))
    asks = [KNOWN_ANSWERS[i % len(KNOWN_ANSWERS)] for i in range(count)]

    def ask(item: tuple[str, str]) -> str | None:
        question, expected = item
        try:
            response = ctx.server.chat([{"role": "user", "content": question}], temperature=temperature,
                                       max_tokens=ctx.budget)
        except ServerError as exc:
            return f"{question!r}: {exc}"
        return None if expected.lower() in content(response).lower() else \
            f"{question!r}: expected {expected!r}, got {said(response)!r}"

    with ThreadPoolExecutor(max_workers=max(1, in_flight)) as pool:
        wrong = [w for w in pool.map(ask, asks) if w]
    return Outcome.count(count - len(wrong), count, wrong)
