"""The smoke run: the recipe's checks chosen (all, or those --only names), each run against the server
in the recipe's order with sizes for that server, and the result written whatever stops the run."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from ...host.errors import UsageError, printable
from .. import defaults
from ..openai_client import BadAnswer, Server, ServerError
from . import registry, sizing
from .core import Context, Outcome
from .files import Result, write

Progress = Callable[[str], None]


def recipe_block(recipe) -> int:
    """The KV block cached tokens come in: the hybrid block where the recipe has one."""
    return recipe.model.hybrid_kv_block or recipe.serve.block_size or 16


def select(checks: list, only: list[str] | tuple[str, ...] = ()) -> list:
    """The recipe's checks to run, in the recipe's order; `only` names rows or check kinds."""
    unknown = sorted({name for _, name in registry.unknown(checks)})
    if unknown:
        raise UsageError(f"the recipe asks for checks the suite does not have: {', '.join(unknown)}",
                         hint=registry.known())
    if not only:
        return list(checks)
    wanted = set(only)
    names = {c.name for c in checks} | {c.check for c in checks}
    if wanted - names:
        raise UsageError(f"--only names no check of this recipe: {', '.join(sorted(wanted - names))}",
                         hint="the recipe's checks: " + ", ".join(c.name for c in checks))
    return [c for c in checks if c.name in wanted or c.check in wanted]


def chosen(loaded, only=()) -> list:
    """The recipe's checks a run with `only` runs; what a run would refuse is refused here."""
    return select(_verified(loaded).checks, only)


def plan(loaded, only=()) -> list[str]:
    """What a run would do, a line a check (the dry run)."""
    verified = _verified(loaded)
    return [f"{c.name:26} {c.check:22} {json.dumps(c.params, separators=(',', ':'))}"
            for c in select(verified.checks, only)]


def _verified(loaded):
    return defaults.verified(loaded)  # a recipe that publishes no checks runs the suite's defaults


def run(loaded, url: str, *, scale: float = 1.0, out_dir: Path, only=(), progress: Progress | None = None,
        target: dict | None = None) -> Result:
    """Run the recipe's checks against the server at `url`; write smoke.json and smoke.md to out_dir."""
    shown = progress or (lambda _m: None)

    def say(message: str) -> None:  # a server's words (its model id, its answers) are shown, never obeyed
        shown(printable(message))

    if scale <= 0:
        raise UsageError(f"--scale must be positive, not {scale}")
    checks = chosen(loaded, only)
    server = Server.connect(url)
    rec = loaded.recipe
    ctx = Context(server, sizing.factor(server.max_model_len, defaults.context(rec), scale), recipe_block(rec),
                  tuple(rec.model.modalities), rec.model.reasoning)
    say(f"{server.url}: {server.model}, context {server.max_model_len} tokens; sizes x{ctx.factor:.4g}, "
        f"block {ctx.block}, answer budget {ctx.budget} tokens")
    result = Result(loaded.id, loaded.hash, target or {"url": server.url, "image": None, "image_id": None},
                    server.model, server.max_model_len, scale, ctx.factor, ctx.block,
                    datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), only=sorted(only) or None)
    start = time.monotonic()
    try:
        for i, c in enumerate(checks, 1):
            say(f"[{i}/{len(checks)}] {c.name} ...")
            check = registry.find(c.check)  # outside the try: a broken map entry is our bug, not the recipe's
            t0 = time.monotonic()
            asked = server.requests
            try:
                outcome = check(ctx, dict(c.params))
            except ServerError as exc:  # a request a check did not expect to fail
                outcome = Outcome("failed", str(exc))
            except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
                if server.requests == asked:  # before any request: the recipe's params the check cannot use
                    raise UsageError(f"check {c.name}: {exc}", where=loaded.line_of(("verified", "checks"))) from None
                # after one: an answer without the fields the API promises (the server's failure, exit 3)
                what = f"{c.name}: an answer not shaped as the OpenAI API says ({type(exc).__name__}: {exc})"
                server.bad_answer = server.bad_answer or what
                outcome = Outcome("failed", what)
            row = {"name": c.name, "check": c.check, "title": c.title, "expect": c.expect, "status": outcome.status,
                   "passed": {"passed": True, "failed": False}.get(outcome.status), "result": outcome.result,
                   "detail": outcome.detail, "seconds": round(time.monotonic() - t0, 1)}
            result.rows.append(row)
            say(f"[{i}/{len(checks)}] {c.name}: {outcome.status} ({outcome.result}) in {row['seconds']} s")
            for line in outcome.detail[:5]:
                say(f"    {line}")
    finally:  # what ran is written, whatever stopped the run
        result.seconds = time.monotonic() - start
        write(result, out_dir)
    if server.bad_answer:
        raise BadAnswer(f"{server.url} answered what the OpenAI API does not say ({server.bad_answer}); "
                        f"what ran is in {Path(out_dir) / 'smoke.json'}")
    return result
