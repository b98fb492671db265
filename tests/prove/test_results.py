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
    target = results.image_target("img:1", "sha256:" + "ab" * 32, "cpu", {"cookbook.content.hash": "c" * 64,
                                                                       "cookbook.base.id": "sha256:b"})
    write_smoke(tmp_path / RID, target, [("known-answers", "passed", "8/8")])
    write_bench(tmp_path / RID, target, {"one-stream-short": 12.5})
    smoke, bench = results.load(RID, "smoke", tmp_path), results.load(RID, "bench", tmp_path)
    assert (smoke.kind, smoke.date, smoke.image_id, smoke.content_hash, smoke.hardware) == (
        "smoke", "2026-12-04T09:00:00Z", "sha256:" + "ab" * 32, "c" * 64, "cpu")
    assert smoke.entry("known-answers")["result"] == "8/8" and smoke.base_id == "sha256:b"
    assert bench.entry("one-stream-short")["values"]["tokens_per_s"] == 12.5 and bench.date == "2026-12-04T09:30:00Z"


@pytest.mark.parametrize("hardware,labels,args,target", [
    ("gaudi", {"cookbook.content.hash": "c" * 64, "cookbook.base.id": "sha256:b",
               "org.opencontainers.image.base.digest": "sha256:d", "org.opencontainers.image.base.name": "v/b:1"},
     ("--enforce-eager",),
     {"image": "i", "image_id": "sha256:x", "content_hash": "c" * 64, "base_id": "sha256:b", "base_digest": "sha256:d",
      "base_name": "v/b:1", "hardware": "gaudi", "args": ["--enforce-eager"]}),
    ("cpu", {}, (), {"image": "i", "image_id": "sha256:x", "content_hash": None, "base_id": None, "base_digest": None,
                     "base_name": None, "hardware": "cpu", "args": []}),
    (None, None, None, {"image": "i", "image_id": "sha256:x", "content_hash": None, "base_id": None,
                        "base_digest": None, "base_name": None, "hardware": None, "args": None}),
    ("habana", None, (), {"image": "i", "image_id": "sha256:x", "content_hash": None, "base_id": None,
                          "base_digest": None, "base_name": None, "hardware": None, "args": []}),  # not a hardware
])
def test_image_target(hardware, labels, args, target):
    assert results.image_target("i", "sha256:x", hardware, labels, args) == target


# vLLM's own lines, as the CPU and the Gaudi (vllm-gaudi's "hpu" plugin) servers log them.
CPU_LINE = "2026-12-04T09:00:00.1Z INFO 12-04 09:00:00 [__init__.py:246] Automatically detected platform cpu."
HPU_LINE = "2026-12-04T09:00:00.1Z INFO 12-04 09:00:00 [__init__.py:237] Platform plugin hpu is activated"
ENGINE = ("(EngineCore pid=160) INFO 12-06 05:29:40 [core.py:134] Initializing a V1 LLM engine (v0.32.0) with config: "
          "model='/models/tiny', speculative_config=None, device_config={}, structured_outputs_config=Struc")


@pytest.mark.parametrize("log,hardware", [
    (CPU_LINE, "cpu"),
    (HPU_LINE, "gaudi"),
    (ENGINE.format("cpu"), "cpu"),  # vLLM 0.32 logs its platform line at debug level: the engine's config says it
    (f"{HPU_LINE}\n{ENGINE.format('hpu')}", "gaudi"),
    (f"{CPU_LINE}\n(EngineCore pid=7) {CPU_LINE}", "cpu"),  # said again by the engine process
    ("Starting vLLM API server on http://0.0.0.0:8000 --runtime=habana", None),  # nothing said: not guessed
    (f"{CPU_LINE}\n{HPU_LINE}", None),  # two platforms: neither
    ("Automatically detected platform cuda.", None),
    (f"{HPU_LINE}\n{ENGINE.format('cpu')}", None),  # the plugin loaded, the engine on CPU: not a Gaudi figure
    ("", None),
])
def test_the_hardware_is_what_the_server_says_it_started_on(log, hardware):
    assert results.detected_hardware(log) == hardware


@pytest.mark.parametrize("change,key", [
    ({"scale": "1"}, "scale"), ({"scale": True}, "scale"), ({"only": "health"}, "only"), ({"only": [1]}, "only"),
    ({"target": {"url": "u", "args": "--enforce-eager"}}, "target.args"),
    ({"target": {"url": "u", "base_name": 3}}, "target.base_name"),
])
def test_what_a_run_was_is_read_typed(tmp_path, change, key):
    path = write_smoke(tmp_path / RID, {"url": "http://x:1"}, [("known-answers", "passed", "8/8")])
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    with pytest.raises(RecipeError, match=f"key {key}"):
        results.load(RID, "smoke", tmp_path)


def test_what_a_run_was_is_read_back(tmp_path):
    write_bench(tmp_path / RID, results.image_target("i", "sha256:x", "gaudi", {}, ["--max-model-len", "8192"]),
                {"one-stream-short": 1.0}, scale=0.01, repeats=1)
    run = results.load(RID, "bench", tmp_path)
    assert (run.scale, run.repeats, run.args, run.only) == (0.01, 1, ("--max-model-len", "8192"), None)


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
