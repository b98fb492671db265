"""`logit_bias`: +100 on one token must make greedy decoding pick that token (the stock release
silently ignored logit_bias)."""

from __future__ import annotations

from ..openai_client import ServerError
from .core import Context, Outcome
from .prompts import BIAS_WORD, PLAIN_QUESTION

TOKENS = 16
SHARE = 0.9  # of the generated tokens that must be the pushed one


def logit_bias(ctx: Context, params: dict) -> Outcome:
    bias = float(params.get("bias", 100))
    try:
        token = ctx.server.token_ids(" " + BIAS_WORD)[0]
        response = ctx.server.chat([{"role": "user", "content": PLAIN_QUESTION}], temperature=0, max_tokens=TOKENS,
                                   logit_bias={str(token): bias}, logprobs=True, return_tokens_as_token_ids=True)
    except ServerError as exc:
        return Outcome("failed", str(exc))
    picked = [t["token"] for t in (response["choices"][0].get("logprobs") or {}).get("content") or []]
    hits = sum(t == f"token_id:{token}" for t in picked)
    if not picked or hits < SHARE * len(picked):
        return Outcome("failed", f"token {token} picked {hits} times in {len(picked)}: no effect")
    return Outcome("passed", f"takes effect (token {token}: {hits}/{len(picked)})")
