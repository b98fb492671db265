"""cookbook/fixpack/capacity.py: `invoke fixes.capacity` runs the capacity lab and writes or checks a
recipe's capacity.json (the lab's own figures are held by cookbook/fixpack/lab/test_pack_capacity.py)."""

import json

import pytest

from cookbook.fixpack import capacity
from cookbook.host.paths import ROOT

from ..test_tasks import invoke

PAGE = ROOT / "recipes" / "Qwen" / "Qwen3.5-27B-FP8" / capacity.FILENAME


@pytest.mark.parametrize("committed, fresh, want", [
    ({"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": 2}}, []),
    ({"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": 3}}, ["b.c: 2 written, 3 now"]),
    ({"a": 1}, {"a": 1, "n": 4}, ["n: None written, 4 now"]),
    (None, {"a": 1}, ["the file is missing"]),
])
def test_drift_names_each_key_that_differs(committed, fresh, want):
    assert capacity.drift(committed, fresh) == want


def test_the_committed_figures_are_the_pages():
    data = json.loads(PAGE.read_text())
    assert set(data) >= {"stock", "pack", "output_tokens"} and "do not edit" in data["note"]


def test_dry_run_prints_the_lab_command_and_writes_nothing():
    before = PAGE.read_bytes()
    out = invoke("fixes.capacity", "--recipe", "qwen3.5-27b-fp8", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "cookbook/fixpack/lab/_capacity.py --page --recipe" in out.stdout
    assert "would write recipes/Qwen/Qwen3.5-27B-FP8/capacity.json" in out.stdout
    assert PAGE.read_bytes() == before


def test_an_unknown_recipe_is_a_usage_error():
    out = invoke("fixes.capacity", "--recipe", "no-such-recipe", "--dry-run")
    assert out.returncode == 2 and "unknown recipe 'no-such-recipe'" in out.stderr


@pytest.mark.slow
def test_a_recipe_without_a_measured_pool_fails_with_the_labs_reason():
    """qwen3.6-27b-fp8 has no verified KV pool yet: the lab has no pool to size, says so, nothing is written."""
    out = invoke("fixes.capacity", "--recipe", "qwen3.6-27b-fp8")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "verified.kv_pool_tokens is not set" in out.stderr
    assert not (ROOT / "recipes" / "Qwen" / "Qwen3.6-27B-FP8" / capacity.FILENAME).exists()
