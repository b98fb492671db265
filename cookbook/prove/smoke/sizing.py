"""How big the smoke suite's long prompts are on a given server: pure functions.

"K" means 1,000 tokens everywhere the suite speaks (`format_k`): a recipe's parameters are exact
token counts (65536, 131072, 244000), and the page's 65K, 131K and 244K are those counts in
thousands, rounded down. (The model's "256K" native context, 262,144 tokens, is the one binary K of
the page; the suite never reads a K from text.)

A recipe's sizes were measured at its own context (`serve.max_model_len`, else the model's native
context). On a server with a smaller context every size shrinks by the same factor, times the
user's `--scale`, so the same suite runs on a small server; no prompt ever leaves less than the
answer budget free in the server's context.
"""

from __future__ import annotations

K = 1000


def format_k(tokens: int) -> str:
    """65536 -> '65K', 244000 -> '244K', 1700 -> '1.7K', 900 -> '900' (K = 1,000 tokens, rounded down;
    a tenth below 10K)."""
    if tokens < K:
        return str(tokens)
    if tokens < 10 * K:
        return f"{tokens * 10 // K / 10:g}K"
    return f"{tokens // K}K"


def factor(server_context: int, recipe_context: int, scale: float = 1.0) -> float:
    """The size of the server's context against the recipe's (never above 1), times `scale`."""
    if server_context <= 0 or recipe_context <= 0 or scale <= 0:
        raise ValueError("contexts and scale must be positive")
    return min(1.0, server_context / recipe_context) * scale


def answer_budget(server_context: int) -> int:
    """max_tokens for an answer: a real budget (a reasoning model thinks at length), an eighth of a
    small context."""
    return max(64, min(4096, server_context // 8))


def prompt_tokens(recipe_tokens: int, fac: float, server_context: int, floor: int = 0) -> int:
    """A recipe's prompt size on this server: scaled, at least `floor`, leaving the answer budget free."""
    ceiling = server_context - answer_budget(server_context)
    return max(min(int(recipe_tokens * fac), ceiling), min(floor, ceiling))


def spread(low: int, high: int, count: int) -> list[int]:
    """`count` sizes from low to high, evenly spaced on a log scale (6K..126K: each about 1.5x the last)."""
    if count <= 1:
        return [high]
    ratio = (high / low) ** (1 / (count - 1))
    return [round(low * ratio**i) for i in range(count)]


def depths(count: int) -> list[float]:
    """Where the needles go, as a fraction of the haystack: evenly inside it, never at an end."""
    return [round((i + 1) / (count + 1), 3) for i in range(count)]
