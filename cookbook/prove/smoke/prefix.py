"""Prefix caching: a prompt sent cold (a fresh `cache_salt`) and again with the same salt (a hit)
must give identical text and bit-identical logprobs, greedy; the hit's cached tokens must be a
positive multiple of the recipe's KV block (zero on the cold one)."""

from __future__ import annotations

from ..openai_client import ServerError
from . import haystack, sizing
from .core import Context, Outcome, fresh_salt

ANSWER_TOKENS = 32


def _ask(ctx: Context, msgs: list[dict], salt: str) -> tuple[str, list[float], int]:
    response = ctx.server.chat(msgs, temperature=0, max_tokens=ANSWER_TOKENS, logprobs=True, cache_salt=salt)
    choice = response["choices"][0]
    text = (choice["message"].get("reasoning") or choice["message"].get("reasoning_content") or "") + \
        (choice["message"].get("content") or "")
    logprobs = [t["logprob"] for t in (choice.get("logprobs") or {}).get("content") or []]
    details = response["usage"].get("prompt_tokens_details") or {}
    return text, logprobs, int(details.get("cached_tokens") or 0)


def judge(cold: tuple, warm: tuple, block: int) -> str | None:
    """Why a hit does not match its cold run, or None (pure)."""
    (text0, lp0, cached0), (text1, lp1, cached1) = cold, warm
    if cached0:
        return f"the cold request reused {cached0} cached tokens"
    if cached1 <= 0:
        return "no cached tokens on the hit (is prefix caching on, with --enable-prompt-tokens-details?)"
    if cached1 % block:
        return f"{cached1} cached tokens, not a multiple of {block}"
    if text0 != text1:
        return f"text differs: {text0[:60]!r} vs {text1[:60]!r}"
    if not lp0 or lp0 != lp1:
        first = next((i for i, (a, b) in enumerate(zip(lp0, lp1, strict=False)) if a != b), min(len(lp0), len(lp1)))
        return f"logprobs differ from token {first}"
    return None


def prefix_cache_identity(ctx: Context, params: dict) -> Outcome:
    count = int(params.get("prompts", 8))
    # Prompts shorter than two blocks could not show a hit of a whole block.
    low = ctx.tokens(int(params.get("min_tokens", 6000)), floor=2 * ctx.block)
    high = max(low, ctx.tokens(int(params.get("max_tokens", 126000))))
    wrong = []
    for i, size in enumerate(sizing.spread(low, high, count)):
        try:
            msgs, length = haystack.build(ctx.server, size, 0.5, tag=str(i + 1))
            salt = fresh_salt()
            why = judge(_ask(ctx, msgs, salt), _ask(ctx, msgs, salt), ctx.block)
        except ServerError as exc:
            why, length = str(exc), size
        if why:
            wrong.append(f"prompt {i + 1} ({length} tokens): {why}")
    return Outcome.count(count - len(wrong), count, wrong,
                         f"; {sizing.format_k(low)} to {sizing.format_k(high)} tokens, block {ctx.block}")
