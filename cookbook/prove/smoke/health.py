"""The server after everything: /health answers 200, the model is still served, and the server process
is the one the run started with (its start time in /metrics, where the server publishes one)."""

from __future__ import annotations

from ..openai_client import ServerError
from .core import Context, Outcome


def health(ctx: Context, params: dict) -> Outcome:
    if not ctx.server.healthy():
        return Outcome("failed", "/health does not answer 200")
    try:
        models = [m["id"] for m in ctx.server.get_json("/v1/models").get("data") or []]
    except ServerError as exc:
        return Outcome("failed", str(exc))
    if ctx.server.model not in models:
        return Outcome("failed", f"{ctx.server.model} is no longer served (models: {models})")
    if ctx.server.started is None:
        return Outcome("passed", "healthy (restarts not visible: no process start time in /metrics)")
    now = ctx.server.start_time()
    if now != ctx.server.started:
        return Outcome("failed", f"the server restarted during the run (process start time {ctx.server.started} "
                                 f"then {now})")
    return Outcome("passed", "healthy, no restarts")
