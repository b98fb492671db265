"""cookbook/results.py: result files are read where present, validated against their versioned
shape, and refused (naming the file and key) when they are malformed or filed under another recipe."""

import json

import pytest

from cookbook import results
from cookbook.errors import RecipeError

from .test_docs import run


def test_result_files_are_read_and_checked(tmp_path):
    assert results.load("qwen3.5-27b-fp8", "smoke", tmp_path) is None
    path = results.path_for("qwen3.5-27b-fp8", "smoke", tmp_path)
    path.parent.mkdir(parents=True)
    good = run("smoke", "1" * 64, [{"name": "health-after", "passed": True}]).model_dump(by_alias=True)
    path.write_text(json.dumps(good))
    assert results.load("qwen3.5-27b-fp8", "smoke", tmp_path).entry("health-after").passed
    path.write_text(json.dumps({**good, "image_digest": "latest"}))
    with pytest.raises(RecipeError, match="does not match cookbook.results/v1") as err:
        results.load("qwen3.5-27b-fp8", "smoke", tmp_path)
    assert "smoke.json (key image_digest)" in str(err.value)
    path.write_text("{")
    with pytest.raises(RecipeError, match="not JSON"):
        results.load("qwen3.5-27b-fp8", "smoke", tmp_path)
    other = results.path_for("qwen3.6-27b-fp8", "smoke", tmp_path)
    other.parent.mkdir()
    other.write_text(json.dumps(good))  # a 3.5 run filed under 3.6
    with pytest.raises(RecipeError, match="not qwen3.6-27b-fp8 smoke"):
        results.load("qwen3.6-27b-fp8", "smoke", tmp_path)
