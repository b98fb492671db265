"""Log probabilities: `top_logprobs` on every generated token, and `prompt_logprobs` returned with the
server still healthy afterwards (on the stock release the first prompt_logprobs request killed the
engine)."""

from __future__ import annotations

from ..openai_client import ServerError
from .core import Context, Outcome
from .prompts import PLAIN_QUESTION

ASK = [{"role": "user", "content": PLAIN_QUESTION}]


def top_logprobs(ctx: Context, params: dict) -> Outcome:
    want = int(params.get("top_logprobs", 20))
    try:
        response = ctx.server.chat(ASK, temperature=0, max_tokens=min(ctx.budget, 256), logprobs=True,
                                   top_logprobs=want)
    except ServerError as exc:
        return Outcome("failed", str(exc))
    tokens = (response["choices"][0].get("logprobs") or {}).get("content") or []
    generated = response["usage"]["completion_tokens"]
    short = [i for i, t in enumerate(tokens) if len(t.get("top_logprobs") or []) != want]
    if not tokens or len(tokens) != generated or short:
        return Outcome("failed", f"{len(tokens) - len(short)} of {generated} tokens have {want} entries",
                       [f"token {i}: {len(tokens[i].get('top_logprobs') or [])} entries" for i in short[:5]])
    return Outcome("passed", f"{want} entries on every token ({generated} tokens)")


def prompt_logprobs(ctx: Context, params: dict) -> Outcome:
    want = int(params.get("prompt_logprobs", 5))
    try:
        response = ctx.server.chat(ASK, temperature=0, max_tokens=16, prompt_logprobs=want)
    except ServerError as exc:
        return Outcome("failed", str(exc))
    rows = response.get("prompt_logprobs") or []
    prompt = response["usage"]["prompt_tokens"]
    # The first position has no logprobs; every other one has the top `want` and the prompt's own token.
    thin = [i for i, row in enumerate(rows[1:], 1) if not row or len(row) < want]
    if len(rows) != prompt or thin:
        return Outcome("failed", f"prompt_logprobs for {len(rows) - len(thin) - 1} of {prompt - 1} positions")
    if not ctx.server.healthy():
        return Outcome("failed", "returned, then /health failed")
    try:
        ctx.server.chat(ASK, temperature=0, max_tokens=8)
    except ServerError as exc:
        return Outcome("failed", f"returned, then the next request failed: {exc}")
    return Outcome("passed", "returned; server healthy afterwards")
