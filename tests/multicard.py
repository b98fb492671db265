"""A recipe for more than one card, for the tests of every stage that carries the card count: the
reference recipe made a dense model served in lazy mode at tensor parallel 4 on four Gaudi 3 cards (the
shape of vllm-gaudi's own multi-card defaults), written into a test's recipes tree (conftest.recipe_tree)."""

from __future__ import annotations

from pathlib import Path

import yaml

from .conftest import DELETE, variant

ID = "multi-card-tp4"
CARDS = 4
CHANGES = {
    "title": "Multi-card TP4",
    "hardware.accelerator": "gaudi3",
    "hardware.cards": CARDS,
    "hardware.tensor_parallel": CARDS,
    "serve.tensor_parallel_size": CARDS,
    # dense, lazy mode: the GDN hybrid's rules and fix do not apply, the lazy-mode collectives rule does
    "model.architecture": "dense",
    "model.hybrid_kv_block": DELETE,
    "serve.enable_prefix_caching": False,
    "fixes.opt_in": [],
    "env.PT_HPU_LAZY_MODE": "1",
    "env.PT_HPU_ENABLE_LAZY_COLLECTIVES": "true",
}


def data(**changes) -> dict:
    """The multi-card recipe as YAML data, with more changes (dotted keys) on top."""
    return variant({**CHANGES, **changes})


def write(root: Path, **changes) -> Path:
    """Write it as root/Test/Multi-Card-TP4/recipe.yaml (root: a recipes tree); its id is ID."""
    path = root / "Test" / "Multi-Card-TP4" / "recipe.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data(**changes), sort_keys=False))
    return path
