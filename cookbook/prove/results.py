"""The result files the recipe pages read: the latest smoke and bench run of a recipe's image, exactly
as `invoke smoke` (cookbook.smoke/v1, cookbook/prove/smoke/files.py) and `invoke bench` (cookbook.bench/v1,
cookbook/prove/bench.py) write them. The tasks write into build/smoke/<id>/ and build/bench/<id>/; the run
a page shows is copied (or written with --out) to `results/<recipe-id>/smoke.json` and `bench.json` and
committed, so a page is generated from files in the repository alone.

What the pages take from a file (`Measured`): the date, the image id that ran (target.image_id), the
image's content hash (target.content_hash, its `cookbook.content.hash` label, which the docs step
compares with the hash of the checkout's build context on the same base, target.base_id and
target.base_digest), the base it was built from (target.base_name), the hardware as the server
reported it (target.hardware, from vLLM's own platform line in the server's log: never inferred from
the runtime's name), and what changes a figure's meaning: the scale, the repeats (bench), the checks or
scenarios selected (`only`, null for all) and the vLLM flags added to the recipe's (target.args).
A --url run records none of the image fields: nobody recorded which image answered.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..host.errors import RecipeError, printable, where
from ..host.names import OCI, Label
from ..host.paths import ROOT

RESULTS = ROOT / "results"
SCHEMAS = {"smoke": "cookbook.smoke/v1", "bench": "cookbook.bench/v1"}
HARDWARE = ("gaudi", "cpu")
# The bench values a page prints (docs.figure): each a finite number, not negative (seconds_to_answer may
# be a [low, high] range); anything else is refused with the file and key, never printed or plotted.
FIGURES = ("tokens_per_s", "aggregate_tokens_per_s", "per_stream_tokens_per_s", "seconds_to_answer")


@dataclass(frozen=True)
class Measured:
    """One run as the pages need it; `entries` by check or scenario name (the writer's row or scenario)."""

    kind: str
    recipe: str
    recipe_hash: str
    date: str
    image: str | None = None
    image_id: str | None = None
    content_hash: str | None = None
    hardware: str | None = None
    base_id: str | None = None  # what it was built FROM: the docs step hashes the checkout on this base
    base_digest: str | None = None
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    base_name: str | None = None  # the base image the run's image names (its base.name label)
    scale: float | None = None
    repeats: int | None = None  # bench only
    only: tuple[str, ...] | None = None  # the checks or scenarios selected; None: all of them
    args: tuple[str, ...] | None = None  # vLLM flags added to the recipe's; None: not recorded (--url)

    def entry(self, name: str) -> dict[str, Any] | None:
        return self.entries.get(name)


# vLLM's own words for the device it started on: the engine's config line ("Initializing a V1 LLM
# engine ... with config: ... device_config=cpu, ..."), and the platform lines of vllm/platforms/__init__.py
# ("Platform plugin hpu is activated" for vllm-gaudi; "Automatically detected platform cpu." where logged).
_PLATFORM = re.compile(r"device_config=(\w+)|Platform plugin (\w+) is activated|Automatically detected platform "
                       r"(\w+)\.")
_PLATFORMS = {"hpu": "gaudi", "cpu": "cpu"}


def detected_hardware(log: str) -> str | None:
    """The hardware the server says it runs on, from its log: "gaudi", "cpu", or None when it named none,
    another, or two (a runtime's name proves nothing: a habana runtime can start a CPU image)."""
    said = {_PLATFORMS.get("".join(found)) for found in _PLATFORM.findall(log)}
    return said.pop() if len(said) == 1 else None


def log_hardware(path: Path | None) -> str | None:
    try:
        return detected_hardware(path.read_text(errors="replace")) if path else None
    except OSError:
        return None


def image_target(image: str | None, image_id: str | None, hardware: str | None, labels: dict | None,
                 args: list[str] | tuple[str, ...] | None = None) -> dict:
    """The writers' `target` for a container run: what ran, its content hash, the base it was built
    from (the content hash covers the base's engine id, so the docs step needs it to hash the checkout
    as that build did), the hardware the server reported (detected_hardware) and the vLLM flags the run
    added to the recipe's."""
    labels = labels or {}
    return {"image": image, "image_id": image_id, "content_hash": labels.get(Label.CONTENT_HASH),
            "base_id": labels.get(Label.BASE_ID), "base_digest": labels.get(OCI.BASE_DIGEST),
            "base_name": labels.get(OCI.BASE_NAME), "hardware": hardware if hardware in HARDWARE else None,
            "args": None if args is None else list(args)}


def image_labels(image_id: str) -> dict:
    """The labels of the image a run started (edge: one docker inspect)."""
    from ..host import engine

    out = engine.docker("image", "inspect", "--format", "{{json .Config.Labels}}", image_id).stdout
    return json.loads(out or "null") or {}


def parse(doc: Any, kind: str, source: str = "") -> Measured:
    """A writer's file as the pages read it; refused (naming the key) when it is not that writer's shape."""
    def bad(msg: str, key: str | None = None):
        return RecipeError(f"result file does not match {SCHEMAS[kind]}: {msg}", where=where(source, None, key)
                           if source else None)

    if not isinstance(doc, dict) or doc.get("schema") != SCHEMAS[kind]:
        raise bad(f"schema is {doc.get('schema') if isinstance(doc, dict) else None!r}", "schema")
    rows_key, date_key = ("results", "started") if kind == "smoke" else ("scenarios", "date")
    for key, typ in (("recipe", str), ("recipe_hash", str), (date_key, str), ("target", dict), (rows_key, list)):
        if not isinstance(doc.get(key), typ):
            raise bad(f"{key} is missing or not a {typ.__name__}", key)
    target = doc["target"]
    for key in ("image", "image_id", "content_hash", "base_id", "base_digest", "base_name", "hardware"):
        if target.get(key) is not None and not isinstance(target[key], str):
            raise bad(f"target.{key} is not a string", f"target.{key}")
    if target.get("hardware") not in (None, *HARDWARE):
        raise bad(f"target.hardware is {target['hardware']!r}, not gaudi or cpu", "target.hardware")
    args, only = _words(target.get("args")), _words(doc.get("only"))
    if args is False or only is False:
        raise bad("a list of strings expected", "target.args" if args is False else "only")
    scale, repeats = doc.get("scale"), doc.get("repeats")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, int | float)):
        raise bad(f"scale is {scale!r}, not a number", "scale")
    if repeats is not None and (isinstance(repeats, bool) or not isinstance(repeats, int)):
        raise bad(f"repeats is {repeats!r}, not a whole number", "repeats")
    entries = {}
    for i, row in enumerate(doc[rows_key]):
        if not isinstance(row, dict) or not isinstance(row.get("name"), str):
            raise bad("an entry without a name", f"{rows_key}.{i}")
        if kind == "bench" and not isinstance(row.get("values"), dict):
            raise bad("a scenario without values", f"{rows_key}.{i}.values")
        for key in FIGURES if kind == "bench" else ():
            said = figure_problem(row["values"].get(key, 0))
            if said:
                raise bad(said, f"{rows_key}.{i}.values.{key}")
        entries[row["name"]] = row
    return Measured(kind, doc["recipe"], doc["recipe_hash"], doc[date_key], target.get("image"),
                    target.get("image_id"), target.get("content_hash"), target.get("hardware"),
                    target.get("base_id"), target.get("base_digest"), entries, target.get("base_name"),
                    None if scale is None else float(scale), repeats, only, args)


def _words(value: Any) -> tuple[str, ...] | None | bool:
    """A recorded list of words (flags, names) as a tuple; None where not recorded; False: not one."""
    if value is None:
        return None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return False


def figure_problem(value: Any) -> str | None:
    """Why a bench value cannot stand on a page (None: it can). Pure; FIGURES."""
    values = value if isinstance(value, list) else [value]
    if not values:
        return "an empty list, not a figure"
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float):
            return f"{printable(repr(v)[:40])} is not a number"
        if not math.isfinite(v) or v < 0:
            return f"{v!r} is not a figure (a finite number, not negative)"
    return None


def path_for(recipe_id: str, kind: str, root: Path = RESULTS) -> Path:
    return root / recipe_id / f"{kind}.json"


def read(path: Path, kind: str) -> Measured:
    """One result file as the pages read it; a missing, unreadable or truncated file is one clear error."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RecipeError(f"result file is not JSON: {exc.msg}", where=where(path, exc.lineno)) from None
    except UnicodeDecodeError as exc:
        raise RecipeError(f"result file is not UTF-8 text (byte {exc.start})", where=str(path)) from None
    except OSError as exc:
        raise RecipeError(f"result file does not read: {exc.strerror or exc}", where=str(path)) from None
    return parse(doc, kind, str(path))


def load(recipe_id: str, kind: str, root: Path = RESULTS) -> Measured | None:
    """The latest run of that kind, or None where there has been none."""
    path = path_for(recipe_id, kind, root)
    if not path.is_file():
        return None
    run = read(path, kind)
    if run.recipe != recipe_id:
        raise RecipeError(f"result file is for {run.recipe} {run.kind}, not {recipe_id} {kind}", where=str(path))
    return run
