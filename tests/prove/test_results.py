"""cookbook/prove/results.py: the pages read the files `invoke smoke` and `invoke bench` write, as their
writers write them (the image's content hash and the hardware in `target`), and refuse (naming the file
and key) a file that is malformed, of another schema or filed under another recipe."""

import json

import pytest

from cookbook.host.errors import RecipeError
from cookbook.prove import results

from .test_docs import write_bench, write_smoke

RID = "qwen3.5-27b-fp8"


def test_the_writers_files_are_read(tmp_path):
    assert results.load(RID, "smoke", tmp_path) is None
    target = results.image_target("img:1", "sha256:" + "ab" * 32, "", {"cookbook.content.hash": "c" * 64,
                                                                       "cookbook.base.id": "sha256:b"})
    write_smoke(tmp_path / RID, target, [("known-answers", "passed", "8/8")])
    write_bench(tmp_path / RID, target, {"one-stream-short": 12.5})
    smoke, bench = results.load(RID, "smoke", tmp_path), results.load(RID, "bench", tmp_path)
    assert (smoke.kind, smoke.date, smoke.image_id, smoke.content_hash, smoke.hardware) == (
        "smoke", "2026-12-04T09:00:00Z", "sha256:" + "ab" * 32, "c" * 64, "cpu")
    assert smoke.entry("known-answers")["result"] == "8/8" and smoke.base_id == "sha256:b"
    assert bench.entry("one-stream-short")["values"]["tokens_per_s"] == 12.5 and bench.date == "2026-12-04T09:30:00Z"


@pytest.mark.parametrize("runtime,labels,target", [
    ("habana", {"cookbook.content.hash": "c" * 64, "cookbook.base.id": "sha256:b",
                "org.opencontainers.image.base.digest": "sha256:d"},
     {"image": "i", "image_id": "sha256:x", "content_hash": "c" * 64, "base_id": "sha256:b", "base_digest": "sha256:d",
      "hardware": "gaudi"}),
    ("", {}, {"image": "i", "image_id": "sha256:x", "content_hash": None, "base_id": None, "base_digest": None,
              "hardware": "cpu"}),
    (None, None, {"image": "i", "image_id": "sha256:x", "content_hash": None, "base_id": None, "base_digest": None,
                  "hardware": "cpu"}),
])
def test_image_target(runtime, labels, target):
    assert results.image_target("i", "sha256:x", runtime, labels) == target


@pytest.mark.parametrize("change,words,key", [
    ({"schema": "cookbook.results/v1"}, "schema is 'cookbook.results/v1'", "schema"),
    ({"started": None}, "started is missing", "started"),
    ({"target": {"url": "u", "hardware": "tpu"}}, "not gaudi or cpu", "target.hardware"),
    ({"results": [{"status": "passed"}]}, "without a name", "results.0"),
])
def test_malformed_files_are_refused(tmp_path, change, words, key):
    path = write_smoke(tmp_path / RID, {"url": "http://x:1", "image": None, "image_id": None},
                       [("known-answers", "passed", "8/8")])
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    with pytest.raises(RecipeError, match="does not match cookbook.smoke/v1") as err:
        results.load(RID, "smoke", tmp_path)
    assert words in str(err.value) and f"smoke.json (key {key})" in str(err.value)


def test_not_json_and_another_recipe_are_refused(tmp_path):
    path = write_smoke(tmp_path / RID, {"url": "http://x:1"}, [])
    other = results.path_for("qwen3.6-27b-fp8", "smoke", tmp_path)
    other.parent.mkdir()
    other.write_text(path.read_text())  # a 3.5 run filed under 3.6
    with pytest.raises(RecipeError, match="not qwen3.6-27b-fp8 smoke"):
        results.load("qwen3.6-27b-fp8", "smoke", tmp_path)
    path.write_text("{")
    with pytest.raises(RecipeError, match="not JSON"):
        results.load(RID, "smoke", tmp_path)
    path.write_bytes(b'{"schema": "\xff"}')
    with pytest.raises(RecipeError, match="not UTF-8"):
        results.load(RID, "smoke", tmp_path)


@pytest.mark.parametrize("value, said", [
    (47.1, None), (0, None), ([29, 36], None), (1e308, None),
    ("47", "'47' is not a number"), (True, "True is not a number"), (None, "None is not a number"),
    ([], "an empty list"), (float("nan"), "nan is not a figure"), (float("-inf"), "-inf is not a figure"),
    (-1, "-1 is not a figure"), ([1, "\x1b[31m"], "'\\x1b[31m' is not a number"),
])
def test_figure_problem(value, said):
    got = results.figure_problem(value)
    assert got == said if said is None else said in got
