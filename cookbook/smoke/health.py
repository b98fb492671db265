"""The server after everything: /health answers 200 and the model is still served."""

from __future__ import annotations

from .client import ServerError
from .core import Context, Outcome, check


@check("health")
def health(ctx: Context, params: dict) -> Outcome:
    if not ctx.server.healthy():
        return Outcome("failed", "/health does not answer 200")
    try:
        models = [m["id"] for m in ctx.server.get_json("/v1/models").get("data") or []]
    except ServerError as exc:
        return Outcome("failed", str(exc))
    if ctx.server.model not in models:
        return Outcome("failed", f"{ctx.server.model} is no longer served (models: {models})")
    return Outcome("passed", "healthy")
