"""The result files the recipe pages read: the latest smoke and bench run of a recipe's image.

Shape (version 1), one file per kind at `results/<recipe-id>/<kind>.json` in the checkout (the
latest run is committed, so a page is generated from files in the repository alone):

    {
      "schema": "cookbook.results/v1",
      "kind": "smoke" | "bench",
      "recipe": "qwen3.5-27b-fp8",            # the recipe id
      "recipe_hash": "<sha256>",               # the recipe the image was built from
      "image": "gaudi-cookbook/qwen3.5-27b-fp8:v0.26.0-d2382121",
      "image_digest": "sha256:<64 hex>",       # the image that ran
      "hardware": "1x Gaudi 2",
      "date": "2026-12-02T18:00:00Z",          # when the run ended (UTC)
      "results": [
        # smoke: one per check of the recipe's `verified.checks`, by name
        {"name": "known-answers", "passed": true, "result": "8/8"},
        # bench: one per scenario of `performance.scenarios`, by name, in the scenario's `expect` keys
        {"name": "one-stream-short", "values": {"tokens_per_s": 47.3}}
      ]
    }

A run is stale on the page when its recipe_hash is not the recipe's: the recipe, so the image, changed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import RecipeError, where
from .paths import ROOT

RESULTS = ROOT / "results"
SCHEMA = "cookbook.results/v1"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Entry(_Strict):
    name: str
    passed: bool | None = None
    result: str | None = None
    values: dict[str, float | list[float]] = Field(default_factory=dict)


class Run(_Strict):
    schema_: Literal["cookbook.results/v1"] = Field(alias="schema")
    kind: Literal["smoke", "bench"]
    recipe: str
    recipe_hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    image: str
    image_digest: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    hardware: str
    date: str
    results: list[Entry]

    def entry(self, name: str) -> Entry | None:
        return next((e for e in self.results if e.name == name), None)


def path_for(recipe_id: str, kind: str, root: Path = RESULTS) -> Path:
    return root / recipe_id / f"{kind}.json"


def load(recipe_id: str, kind: str, root: Path = RESULTS) -> Run | None:
    """The latest run of that kind, or None where there has been none."""
    path = path_for(recipe_id, kind, root)
    if not path.is_file():
        return None
    try:
        run = Run.model_validate(json.loads(path.read_text()))
    except json.JSONDecodeError as exc:
        raise RecipeError(f"result file is not JSON: {exc.msg}", where=where(path, exc.lineno)) from None
    except ValidationError as exc:
        err = exc.errors()[0]
        raise RecipeError(f"result file does not match {SCHEMA}: {err['msg']}",
                          where=where(path, None, ".".join(map(str, err["loc"])))) from None
    if run.recipe != recipe_id or run.kind != kind:
        raise RecipeError(f"result file is for {run.recipe} {run.kind}, not {recipe_id} {kind}", where=str(path))
    return run
