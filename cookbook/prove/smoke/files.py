"""A smoke run's result and its two files: smoke.json (versioned, what the recipe page and the chain
read) and smoke.md (the page's Verified table, table.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from . import sizing
from .table import markdown

SCHEMA = "cookbook.smoke/v1"


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


def write(result: Result, out_dir: Path) -> None:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "smoke.json").write_text(json.dumps(result.as_json(), indent=2) + "\n")
    (out_dir / "smoke.md").write_text(markdown(result))
