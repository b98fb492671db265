"""The smoke suite's pure parts: sizing, judging, assembling, the result files and the task's refusals.
The suite against a real vLLM server is in test_smoke_server.py."""

from __future__ import annotations

import json
import struct
import zlib

import pytest

from cookbook.host.errors import UsageError
from cookbook.prove.smoke import images, prefix, sizing, tools


@pytest.mark.parametrize(("tokens", "said"), [(65536, "65K"), (131072, "131K"), (244000, "244K"),
                                              (262144, "262K"), (999, "999"), (1000, "1K"),
                                              (1024, "1K"), (1700, "1.7K"), (9999, "9.9K")])
def test_k_is_a_thousand_tokens(tokens, said):
    assert sizing.format_k(tokens) == said


@pytest.mark.parametrize(("server", "recipe", "scale", "expect"), [
    (262144, 262144, 1.0, 1.0), (4096, 262144, 1.0, 4096 / 262144), (524288, 262144, 1.0, 1.0),
    (262144, 262144, 0.25, 0.25), (4096, 4096, 0.5, 0.5)])
def test_factor(server, recipe, scale, expect):
    assert sizing.factor(server, recipe, scale) == pytest.approx(expect)


@pytest.mark.parametrize("bad", [(0, 1, 1.0), (1, 0, 1.0), (1, 1, 0.0)])
def test_factor_refuses_nonsense(bad):
    with pytest.raises(ValueError):
        sizing.factor(*bad)


@pytest.mark.parametrize(("recipe_tokens", "fac", "context", "floor", "expect"), [
    (244000, 1.0, 262144, 0, 244000),          # the page's own server: as the recipe says
    (244000, 4096 / 262144, 4096, 0, 3584),    # shrunk, then capped to leave the answer budget
    (6000, 4096 / 262144, 4096, 256, 256),     # never below the floor (two blocks)
    (65536, 1 / 64, 4096, 0, 1024)])
def test_prompt_tokens(recipe_tokens, fac, context, floor, expect):
    assert sizing.prompt_tokens(recipe_tokens, fac, context, floor) == expect


def test_answer_budget_is_real_but_fits():
    assert sizing.answer_budget(262144) == 4096
    assert sizing.answer_budget(4096) == 512
    assert sizing.answer_budget(100) == 64


def test_spread_and_depths():
    sizes = sizing.spread(6000, 126000, 8)
    assert sizes[0] == 6000 and sizes[-1] == 126000 and sizes == sorted(sizes) and len(sizes) == 8
    assert sizing.spread(10, 20, 1) == [20]
    assert sizing.depths(3) == [0.25, 0.5, 0.75]


@pytest.mark.parametrize(("name", "args", "ok"), [
    ("get_weather", '{"city": "Paris"}', True), ("get_weather", '{"city": " paris "}', True),
    ("get_weather", '{"city": "Rome"}', False), ("get_time", '{"city": "Paris"}', False),
    ("get_weather", "<parameter=city>Paris", False), (None, "", False)])
def test_judge_call(name, args, ok):
    assert (tools.judge_call(name, args) is None) is ok


def test_assemble_streamed_call():
    def call(**fn):
        return {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": fn}]}}]}

    chunks = [{"choices": [{"delta": {"content": "\n"}}]}, call(name="get_weather", arguments=""),
              call(arguments='{"city": '), call(arguments='"Paris"}')]
    assert tools.assemble(chunks) == ("get_weather", '{"city": "Paris"}', "\n")


@pytest.mark.parametrize(("cold", "warm", "ok"), [
    (("a", [-0.5, -1.0], 0), ("a", [-0.5, -1.0], 256), True),
    (("a", [-0.5], 0), ("a", [-0.5], 0), False),              # no hit: caching off
    (("a", [-0.5], 128), ("a", [-0.5], 256), False),          # the cold one hit
    (("a", [-0.5], 0), ("a", [-0.5], 200), False),            # not whole blocks
    (("a", [-0.5], 0), ("b", [-0.5], 256), False),            # text differs
    (("a", [-0.5], 0), ("a", [-0.5000001], 256), False),      # logprobs not bit-identical
    (("a", [], 0), ("a", [], 256), False)])                   # no logprobs at all
def test_prefix_judge(cold, warm, ok):
    assert (prefix.judge(cold, warm, 128) is None) is ok


def test_solid_png_is_a_png_of_one_colour():
    png = images.solid_png((1, 2, 3), 4)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = struct.unpack(">II", png[16:24])
    idat = png.index(b"IDAT")
    length = struct.unpack(">I", png[idat - 4:idat])[0]
    assert (width, height) == (4, 4)
    assert zlib.decompress(png[idat + 4:idat + 4 + length]) == (b"\x00" + bytes((1, 2, 3)) * 4) * 4


@pytest.mark.parametrize(("answer", "good"), [("red, green, blue, yellow", 4), ("Red, green, yellow, blue", 2),
                                              ("1. red\n2. green", 2), ("no idea", 0)])
def test_named_in_order(answer, good):
    assert images.named_in_order(answer, ["red", "green", "blue", "yellow"]) == good


def test_select_and_plan():
    from cookbook.prove import defaults, smoke
    from cookbook.recipe import recipes

    loaded = recipes.load("qwen3.5-27b-fp8")
    checks = loaded.recipe.verified.checks
    assert smoke.select(checks) == list(checks)
    assert [c.name for c in smoke.select(checks, ["image-colours"])] == ["images-4", "images-16"]
    with pytest.raises(UsageError, match="--only names no check"):
        smoke.select(checks, ["nope"])
    assert len(smoke.plan(loaded)) == len(checks)
    assert smoke.recipe_block(loaded.recipe) == 896 and defaults.context(loaded.recipe) == 262144


def test_every_check_of_every_recipe_exists():
    from cookbook.prove import smoke
    from cookbook.recipe import recipes

    for loaded in recipes.load_all():
        if loaded.recipe.verified:  # an imported recipe publishes none (the smoke suite's defaults run)
            smoke.select(loaded.recipe.verified.checks)  # raises on a check the suite does not have


def test_result_files(tmp_path):
    from cookbook.prove import smoke

    result = smoke.Result("r", "0" * 64, {"url": "http://x:1", "image": None, "image_id": None}, "m", 4096, 1.0,
                          1.0, 128, "2026-12-03T00:00:00Z")
    result.rows = [{"name": "a", "check": "health", "title": "Health", "expect": "healthy", "status": "passed",
                    "passed": True, "result": "healthy", "detail": [], "seconds": 0.1},
                   {"name": "b", "check": "image-colours", "title": "Images", "expect": "x", "status": "skipped",
                    "passed": None, "result": "text-only", "detail": [], "seconds": 0.0}]
    smoke.write(result, tmp_path)
    data = json.loads((tmp_path / "smoke.json").read_text())
    assert data["schema"] == "cookbook.smoke/v1" and data["passed"] is True and data["k_tokens"] == 1000
    assert data["target"]["url"] == "http://x:1"
    assert "| Images | text-only | skipped |" in (tmp_path / "smoke.md").read_text()
    result.rows[0]["status"] = "failed"
    assert not result.passed


def invoke_smoke(*args: str):
    import subprocess
    import sys

    from cookbook.host.paths import ROOT

    return subprocess.run([sys.executable, "-m", "invoke", "smoke", *args], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize(("args", "message"), [
    (["--url", "ftp://x"], "must be an http"), ([], "give exactly one of --url and --image"),
    (["--url", "http://127.0.0.1:9", "--only", "nope"], "--only names no check"),
    (["--url", "http://127.0.0.1:9", "--scale", "abc"], "--scale takes a number"),
    (["--url", "http://127.0.0.1:9", "--scale", "-1"], "--scale must be positive")])
def test_task_refuses_before_any_request(args, message):
    done = invoke_smoke(*args, "--dry-run")
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


def test_task_dry_run_lists_the_checks():
    done = invoke_smoke("--url", "http://127.0.0.1:9", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "prefix-cache-identity" in done.stdout and "needle-cold" in done.stdout


def test_task_says_when_no_server_answers(tmp_path):
    from ..cpu_server import free_port

    done = invoke_smoke("--url", f"http://127.0.0.1:{free_port()}", "--out", str(tmp_path))
    assert done.returncode == 3, done.stderr
    assert "no OpenAI-compatible server at" in done.stderr and "Traceback" not in done.stderr


# --- A hostile server (tests/hostile_http.py, real, on 127.0.0.1): its failure, said in one line ---

def smoke_into(*args, out):
    import subprocess
    import sys

    from cookbook.host.paths import ROOT

    return subprocess.run([sys.executable, "-m", "invoke", "smoke", *args, "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("url,code,words", [
    ("{hostile}/garbage", 3, "not a JSON object"),
    ("{hostile}/models-noid", 3, 'no "id" string'),
    ("http://127.0.0.1:8000\r\nX: 1", 2, "control characters"),
    ("http://[::1", 2, "is not a URL"),
])
def test_a_broken_server_or_url_is_one_line(hostile_url, tmp_path, url, code, words):
    out = smoke_into("--url", url.replace("{hostile}", hostile_url), out=tmp_path)
    assert out.returncode == code and words in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_garbage_mid_run_is_the_servers_failure_and_what_ran_is_kept(hostile_url, tmp_path):
    """Events that are not objects and answers that are not JSON: failed rows, smoke.json written, exit 3
    (not a recipe error pointing at a recipe line)."""
    out = smoke_into("--url", f"{hostile_url}/not-object", "--only", "tool-call-streamed", out=tmp_path)
    assert out.returncode == 3, out.stderr
    assert "Traceback" not in out.stderr and "recipe.yaml" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "answered what the OpenAI API does not say" in last
    result = json.loads((tmp_path / "smoke.json").read_text())
    assert [r["status"] for r in result["results"]] == ["failed"] and result["passed"] is False


def test_a_model_id_with_escape_codes_is_shown_escaped(hostile_url, tmp_path):
    from ..hostile_http import ESCAPED_ID

    out = smoke_into("--url", f"{hostile_url}/escapes", "--only", "health", out=tmp_path)
    shown = out.stdout + out.stderr + (tmp_path / "smoke.md").read_text()
    assert "\x1b" not in shown and "\x07" not in shown and "\r" not in shown, shown
    assert r"tiny\x1b[2J" in (tmp_path / "smoke.md").read_text()
    assert json.loads((tmp_path / "smoke.json").read_text())["model"] == ESCAPED_ID  # kept exact, as JSON


def test_validate_refuses_a_check_the_suite_does_not_have(recipe_tree):
    """A Verified row whose `check:` is mistyped fails `invoke validate` (exit 2, the file, line and key),
    not only `invoke smoke` on a Gaudi host; the recipe's own names pass."""
    from ..conftest import variant
    from ..test_tasks import invoke

    _, write = recipe_tree
    data = variant({})
    good = invoke("validate", "--recipe", str(write(data)))
    assert good.returncode == 0, good.stderr
    data["verified"]["checks"][1]["check"] = "known-answer"  # the suite has known-answers
    out = invoke("validate", "--recipe", str(write(data)))
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith("error: verified.checks[1] asks for the smoke check 'known-answer', which the "
                                 "suite does not have")
    assert "recipe.yaml:" in out.stderr and "(key verified.checks.1.check)" in out.stderr
    assert "known checks: " in out.stderr and "known-answers" in out.stderr


def test_a_check_added_in_one_place_is_validated_found_and_run(recipe_tree, hostile_url, tmp_path, monkeypatch):
    """The seam: a new check is its module plus one entry in registry.CHECKS. Nothing else names it, yet
    validate accepts it (and refused it before the entry), and a run imports and runs it."""
    from cookbook.host.errors import RecipeError
    from cookbook.prove import smoke
    from cookbook.prove.smoke import registry
    from cookbook.recipe import recipes

    from ..conftest import variant

    data = variant({})
    data["verified"]["checks"] = [{"name": "echo", "check": "model-echo", "title": "Model echo", "expect": "its id"}]
    _, write = recipe_tree
    loaded = recipes.load(str(write(data)))
    with pytest.raises(RecipeError, match="'model-echo', which the suite does not have"):
        smoke.check_names(loaded)

    (tmp_path / "extra_check.py").write_text(
        "from cookbook.prove.smoke.core import Outcome\n\n\n"
        "def model_echo(ctx, params):\n    return Outcome('passed', 'served ' + ctx.server.model)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry.CHECKS, "model-echo", "extra_check:model_echo")
    smoke.check_names(loaded)
    result = smoke.run(loaded, f"{hostile_url}/not-object", out_dir=tmp_path / "out")
    assert [(r["name"], r["status"], r["result"]) for r in result.rows] == [("echo", "passed", "served tiny")]
    assert "| Model echo | served tiny | pass |" in (tmp_path / "out" / "smoke.md").read_text()


def test_the_map_and_the_check_functions_are_the_same_set():
    """The map is read lazily, so a mistyped module or function would only show when a run asks for it;
    and a check function written in the package but left out of the map would never run."""
    import importlib
    import inspect
    import pkgutil

    from cookbook.prove import smoke
    from cookbook.prove.smoke import registry

    mapped = {registry.find(name) for name in registry.CHECKS}
    written = {fn for info in pkgutil.iter_modules(smoke.__path__)
               for _, fn in inspect.getmembers(importlib.import_module(f"{smoke.__name__}.{info.name}"),
                                               inspect.isfunction)
               if fn.__annotations__.get("ctx") == "Context" and fn.__annotations__.get("return") == "Outcome"}
    assert len(mapped) == len(registry.CHECKS) and mapped == written
