"""Needle in a haystack, cold: one prompt per size, the needle at a different depth in each; the
answer must name the needle's word."""

from __future__ import annotations

from ..openai_client import ServerError
from . import haystack, sizing
from .core import Context, Outcome, content, fresh_salt, said


def needle(ctx: Context, params: dict) -> Outcome:
    sizes = [ctx.tokens(int(n)) for n in params.get("context_tokens", [65536, 131072, 244000])]
    depths = params.get("depths") or sizing.depths(len(sizes))
    wrong, lengths = [], []
    for size, depth in zip(sizes, depths, strict=False):
        try:
            msgs, length = haystack.build(ctx.server, size, float(depth))
            lengths.append(length)
            response = ctx.server.chat(msgs, temperature=0, max_tokens=ctx.budget, cache_salt=fresh_salt())
        except ServerError as exc:
            wrong.append(f"{length if lengths else size} tokens: {exc}")
            continue
        if not haystack.found(content(response)):
            wrong.append(f"{length} tokens, depth {depth}: {said(response)!r}")
    at = ", ".join(sizing.format_k(n) for n in lengths)
    return Outcome.count(len(sizes) - len(wrong), len(sizes), wrong, f" at {at} tokens")
