"""The result files the recipe pages read: the latest smoke and bench run of a recipe's image, exactly
as `invoke smoke` (cookbook.smoke/v1, cookbook/prove/smoke/__init__.py) and `invoke bench` (cookbook.bench/v1,
cookbook/prove/bench.py) write them. The tasks write into build/smoke/<id>/ and build/bench/<id>/; the run
a page shows is copied (or written with --out) to `results/<recipe-id>/smoke.json` and `bench.json` and
committed, so a page is generated from files in the repository alone.

What the pages take from a file (`Measured`): the date, the image id that ran (target.image_id), the
image's content hash (target.content_hash, its `cookbook.content.hash` label, which the docs step
compares with the hash of the checkout's build context on the same base, target.base_id and
target.base_digest) and the hardware (target.hardware: "gaudi" under the habana
runtime, "cpu" under Docker's default one; absent for a --url run, whose image nobody recorded).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..host.errors import RecipeError, printable, where
from ..host.paths import ROOT

RESULTS = ROOT / "results"
SCHEMAS = {"smoke": "cookbook.smoke/v1", "bench": "cookbook.bench/v1"}
CONTENT_LABEL = "cookbook.content.hash"  # build.build_labels
BASE_ID_LABEL, BASE_DIGEST_LABEL = "cookbook.base.id", "org.opencontainers.image.base.digest"  # render.labels
GAUDI_RUNTIME = "habana"  # serve.GAUDI_RUNTIME; not imported: serve pulls in the engine
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

    def entry(self, name: str) -> dict[str, Any] | None:
        return self.entries.get(name)


def hardware(runtime: str | None) -> str:
    """What a container run measured: the habana runtime is a Gaudi, Docker's default runtime a CPU."""
    return "gaudi" if runtime == GAUDI_RUNTIME else "cpu"


def image_target(image: str | None, image_id: str | None, runtime: str | None, labels: dict | None) -> dict:
    """The writers' `target` for a container run: what ran, its content hash, the base it was built
    from (the content hash covers the base's engine id, so the docs step needs it to hash the checkout
    as that build did), and the hardware."""
    labels = labels or {}
    return {"image": image, "image_id": image_id, "content_hash": labels.get(CONTENT_LABEL),
            "base_id": labels.get(BASE_ID_LABEL), "base_digest": labels.get(BASE_DIGEST_LABEL),
            "hardware": hardware(runtime)}


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
    for key in ("image", "image_id", "content_hash", "base_id", "base_digest", "hardware"):
        if target.get(key) is not None and not isinstance(target[key], str):
            raise bad(f"target.{key} is not a string", f"target.{key}")
    if target.get("hardware") not in (None, "gaudi", "cpu"):
        raise bad(f"target.hardware is {target['hardware']!r}, not gaudi or cpu", "target.hardware")
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
                    target.get("base_id"), target.get("base_digest"), entries)


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


def load(recipe_id: str, kind: str, root: Path = RESULTS) -> Measured | None:
    """The latest run of that kind, or None where there has been none."""
    path = path_for(recipe_id, kind, root)
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RecipeError(f"result file is not JSON: {exc.msg}", where=where(path, exc.lineno)) from None
    except UnicodeDecodeError as exc:
        raise RecipeError(f"result file is not UTF-8 text (byte {exc.start})", where=str(path)) from None
    run = parse(doc, kind, str(path))
    if run.recipe != recipe_id:
        raise RecipeError(f"result file is for {run.recipe} {run.kind}, not {recipe_id} {kind}", where=str(path))
    return run
