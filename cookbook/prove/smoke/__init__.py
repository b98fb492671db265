"""The smoke suite: the rows of a recipe's Verified table, run by `check` name with their `params`
against a running OpenAI-compatible vLLM server, sized for that server (cookbook/prove/smoke/sizing.py).

`run()` is the one entry point (`invoke smoke --url` calls it; a container run wraps it). It writes a
versioned JSON result file and the page's Markdown table into `out_dir` and returns the result; the
caller turns a failure into exit status 1. One module per family of checks; registry.CHECKS maps each
check's name to its function.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ...host.errors import UsageError, printable
from ..openai_client import BadAnswer, Server, ServerError, check_url
from . import registry, sizing
from .core import Context, Outcome
from .registry import check_names  # noqa: F401  (invoke validate)

SCHEMA = "cookbook.smoke/v1"
Progress = Callable[[str], None]


@dataclass
class Result:
    recipe: str
    recipe_hash: str
    target: dict  # {"url": ..., "image": None, "image_id": None}: what ran (a container run fills the image)
    model: str
    max_model_len: int
    scale: float
    factor: float
    block: int
    started: str
    seconds: float = 0.0
    rows: list[dict] = field(default_factory=list)
    only: list[str] | None = None  # the rows or kinds selected (--only); None: every check

    @property
    def passed(self) -> bool:
        return all(row["status"] != "failed" for row in self.rows)

    def as_json(self) -> dict:
        return {"schema": SCHEMA, "kind": "smoke", "recipe": self.recipe, "recipe_hash": self.recipe_hash,
                "target": self.target, "model": self.model, "max_model_len": self.max_model_len,
                "scale": self.scale, "only": self.only, "factor": round(self.factor, 6), "block": self.block,
                "k_tokens": sizing.K, "started": self.started, "seconds": round(self.seconds, 1),
                "passed": self.passed, "results": self.rows}


def recipe_context(recipe) -> int:
    """The context the recipe's sizes were measured at."""
    return recipe.serve.max_model_len or recipe.model.native_context


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
    if loaded.recipe.verified is None or not loaded.recipe.verified.checks:
        raise UsageError(f"recipe {loaded.id} has no verified.checks to run", where=loaded.rel_path)
    return loaded.recipe.verified


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
    ctx = Context(server, sizing.factor(server.max_model_len, recipe_context(rec), scale), recipe_block(rec),
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


def markdown(result: Result) -> str:
    """The page's Verified table (Check | Result), with each row's status."""
    mark = {"passed": "pass", "failed": "**FAIL**", "skipped": "skipped"}
    def cell(text) -> str:  # a server's words, shown: no control characters, no table-breaking bar
        return printable(str(text).replace("\n", " ")).replace("|", "\\|")

    model = cell(result.model).replace("`", "'")  # inside a code span
    lines = [f"Smoke run of `{result.recipe}` against {result.target.get('image') or result.target['url']} "
             f"(`{model}`, context {result.max_model_len} tokens, sizes x{result.factor:.4g}; "
             f"K = {sizing.K} tokens).", "", "| Check | Result | Status |", "|---|---|---|"]
    for row in result.rows:
        lines.append(f"| {cell(row['title'])} | {cell(row['result'])} | {mark[row['status']]} |")
    return "\n".join(lines) + "\n"


def write(result: Result, out_dir: Path) -> None:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "smoke.json").write_text(json.dumps(result.as_json(), indent=2) + "\n")
    (out_dir / "smoke.md").write_text(markdown(result))


def parse_scale(text: str | None) -> float:
    try:
        scale = 1.0 if text is None else float(text)
    except ValueError:
        raise UsageError(f"--scale takes a number, not {text!r}") from None
    if not 0 < scale <= 1e6:
        raise UsageError(f"--scale must be positive, not {text}")
    return scale


def task(recipe: str, url: str | None, scale: str | None, out: Path | None, only, dry_run: bool, *,
         image: str | None = None, image_id: str | None = None, log_path: Path | None = None,
         args: tuple[str, ...] = ()) -> Result | None:
    """`invoke smoke`: load the recipe, check the arguments, then run (or list, with dry_run) its checks.
    `image`/`image_id`/`log_path`/`args`: the container started for the run (--image), recorded in smoke.json
    with the image's content hash and base, the hardware its server reported in its log, and the vLLM
    flags added to the recipe's, which the recipe page reads (cookbook/prove/results.py)."""
    from ...host import progress
    from ...host.paths import ROOT
    from ...recipe import recipes
    from .. import results

    loaded = recipes.load(recipe)
    factor = parse_scale(scale)
    if not url:
        raise UsageError("give the server to check: --url http://HOST:PORT")
    url = check_url(url)
    out_dir = out or ROOT / "build" / "smoke" / loaded.id
    if dry_run:
        print(f"would check {url} with {loaded.id}'s checks (sized from its /v1/models) into {out_dir}:")
        for line in plan(loaded, only):
            print("  " + line)
        return None
    target = {"url": url, "image": image, "image_id": image_id}
    if image_id:
        target.update(results.image_target(image, image_id, results.log_hardware(log_path),
                                           results.image_labels(image_id), args))
    result = run(loaded, url, scale=factor, out_dir=out_dir, only=only, progress=progress.say, target=target)
    print(markdown(result), end="")
    print(f"results: {out_dir / 'smoke.json'}")
    return result
