"""The checks and scenarios smoke and bench run on a recipe that publishes none: sized by what the recipe
states, every check one the suite has, and a recipe's own table always winning."""

import pytest

from cookbook.prove import defaults
from cookbook.prove.smoke import registry
from cookbook.recipe import recipes

from ..conftest import DELETE, variant

# (case, changes to the reference recipe, checks expected among the defaults, streams, needle depths)
CASES = [
    ("a 4K dense model, 96 sequences", {"serve.max_model_len": 4352, "serve.max_num_seqs": 96}, set(), 32,
     [2176, 3916]),
    ("8 sequences cap the concurrency", {"serve.max_model_len": 4352, "serve.max_num_seqs": 8}, set(), 8,
     [2176, 3916]),
    ("images where the model takes them", {"serve.max_model_len": 8448, "model.modalities": ["text", "image"]},
     {"images-1"}, 32, [4224, 7603]),
    ("a tool parser adds the streamed call", {"serve.max_model_len": 4352, "serve.enable_auto_tool_choice": True,
                                              "serve.tool_call_parser": "qwen3_coder"}, {"tool-call-streamed"}, 32,
     [2176, 3916]),
]


@pytest.mark.parametrize("case, changes, extra, streams, depths", CASES, ids=[c[0] for c in CASES])
def test_defaults_are_sized_by_the_recipe(recipe_tree, case, changes, extra, streams, depths):
    root, write = recipe_tree
    changes = {"model.modalities": ["text"], "serve.enable_auto_tool_choice": DELETE, "serve.tool_call_parser": DELETE,
               "serve.limit_mm_per_prompt": DELETE, "buckets.decode_bs.max": 128, **changes,
               "verified": DELETE, "performance": DELETE}
    loaded = recipes.load(write(variant(changes)), root)
    checks = {c.name: c for c in defaults.verified(loaded).checks}
    optional = {"images-1", "tool-call-streamed"}
    assert optional & set(checks) == extra
    assert checks["known-answers-concurrent"].params["concurrency"] == streams
    assert checks["needle-cold"].params["context_tokens"] == depths
    assert not registry.unknown(list(checks.values()))  # every one is a check the suite has
    scenarios = {s.name: s for s in defaults.performance(loaded).scenarios}
    assert scenarios[f"streams-{streams}-short"].streams == streams
    assert scenarios["cold-half-context"].prompt_tokens == depths[0]
    assert all(s.expect == {} for s in scenarios.values())  # no published figure to compare to


def test_a_recipes_own_tables_always_run():
    loaded = recipes.load("qwen3.5-27b-fp8")
    assert defaults.verified(loaded) is loaded.recipe.verified
    assert defaults.performance(loaded) is loaded.recipe.performance


def test_every_imported_recipe_runs_the_defaults_and_the_dry_runs_say_them():
    import subprocess
    import sys

    from cookbook.host.paths import ROOT

    out = subprocess.run([sys.executable, "-m", "invoke", "smoke", "-r", "qwen2.5-vl-7b-instruct-gaudi2", "--url",
                          "http://127.0.0.1:9", "--dry-run"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "images-1" in out.stdout and "needle-cold" in out.stdout and "tool-call" not in out.stdout
