"""cookbook/chain.py: `invoke chain`'s resumable state (a step that passed for the same image id is not
run again), its one summary, and its dry run through invoke."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cookbook import chain, recipes
from cookbook.errors import CheckFailure
from cookbook.measured import Row

A, B = "sha256:" + "a" * 64, "sha256:" + "b" * 64


@pytest.mark.parametrize("state, step, image_id, skip", [
    ({}, "test", A, False),                                                  # never ran
    ({"test": {"image_id": A, "status": "passed"}}, "test", A, True),        # passed on this image
    ({"test": {"image_id": A, "status": "passed"}}, "test", B, False),       # another image: redo
    ({"test": {"image_id": A, "status": "failed"}}, "test", A, False),       # failed: redo
    ({"test": {"image_id": A, "status": "skipped"}}, "test", A, False),      # skipped is not done
    ({"test": {"image_id": A, "status": "passed"}}, "test", None, False),    # image not known yet
    ({"build": {"image_id": A, "status": "passed"}}, "build", A, False),     # build always runs
    ({"doctor": {"image_id": A, "status": "passed"}}, "doctor", A, False),   # the host may have changed
    ({"smoke": {"image_id": A, "status": "passed"}}, "smoke", A, True),
    ({"docs": {"image_id": A, "status": "passed"}}, "docs", A, True),
])
def test_done_before(state, step, image_id, skip):
    assert chain.done_before(state, step, image_id) is skip


@pytest.mark.parametrize("state, image_id, serve", [
    ({}, A, True),
    ({"smoke": {"image_id": A, "status": "passed"}}, A, True),
    ({"smoke": {"image_id": A, "status": "passed"}, "bench": {"image_id": A, "status": "passed"}}, A, False),
    ({"smoke": {"image_id": A, "status": "passed"}, "bench": {"image_id": A, "status": "passed"}}, B, True),
])
def test_the_server_starts_only_when_smoke_or_bench_is_left(state, image_id, serve):
    assert chain.needs_server(state, image_id) is serve


@pytest.mark.parametrize("text, state", [
    (None, {}),
    ("not json", {}),
    ("[1, 2]", {}),
    ('{"test": "passed"}', {}),
    ('{"test": {"image_id": "x", "status": "passed"}}', {"test": {"image_id": "x", "status": "passed"}}),
])
def test_a_state_that_does_not_read_is_redone_not_trusted(tmp_path, text, state):
    path = tmp_path / "state.json"
    if text is not None:
        path.write_text(text)
    assert chain.load_state(path) == state


def test_recorded_state_round_trips(tmp_path):
    state = chain.recorded(chain.recorded({}, "build", A, "passed"), "test", A, "failed")
    chain.save_state(tmp_path / "v" / "state.json", state)
    assert chain.load_state(tmp_path / "v" / "state.json") == state
    assert not chain.done_before(state, "test", A)


def loaded():
    return recipes.load("qwen3.5-27b-fp8")


def test_a_second_run_on_the_same_image_skips_what_passed_and_stops_at_a_failure(tmp_path):
    ran = []

    def work(name, fail=False):
        def go():
            ran.append(name)
            print(f"{name} output")
            if fail:
                raise CheckFailure(f"{name} broke\nsecond line")
            return "fine"
        return go

    first = chain.Chain(loaded(), chain.Options(out=tmp_path))
    first.image_id = A
    assert first.step("test", work("test")) and not first.step("smoke", work("smoke", fail=True))
    assert (tmp_path / "test.log").read_text() == "test output\n"
    assert json.loads((tmp_path / "state.json").read_text())["smoke"] == {"image_id": A, "status": "failed"}

    again = chain.Chain(loaded(), chain.Options(out=tmp_path))
    again.image_id = A
    assert again.step("test", work("test")) and again.step("smoke", work("smoke"))
    assert ran == ["test", "smoke", "smoke"]
    assert [(o.step, o.status) for o in again.outcomes] == [("test", "done before"), ("smoke", "passed")]

    other = chain.Chain(loaded(), chain.Options(out=tmp_path))
    other.image_id = B  # a new image: everything again
    other.step("test", work("test"))
    assert ran[-1] == "test" and other.outcomes[0].status == "passed"


ROWS = [Row("Tool call", "valid JSON", "valid JSON (on CPU)", "2026-12-04", "sha256:aaaa", True)]
PERF = [Row("Decode", "30 tok/s", "not measured on this image", "-", "-", False)]


@pytest.mark.parametrize("outcomes, checks, scenarios, want", [
    ([], [], [], ["doctor    not run", "stop      not run", "all steps passed"]),
    ([chain.Outcome("doctor", "passed", "host ready"), chain.Outcome("base", "skipped", "skipped: not local"),
      chain.Outcome("build", "failed", "no base")], [], [],
     ["doctor    passed       host ready", "base      skipped      skipped: not local",
      "build     failed       no base", "test      not run", "FAILED at build"]),
    ([chain.Outcome("smoke", "done before", "for sha256:aaaa")], ROWS, PERF,
     ["smoke     done before  for sha256:aaaa", "Verified: published | measured",
      "  Tool call: valid JSON | valid JSON (on CPU)", "Performance: published | measured",
      "  Decode: 30 tok/s | not measured on this image"]),
])
def test_summary(outcomes, checks, scenarios, want):
    lines = chain.summary(outcomes, checks, scenarios)
    assert lines[0].startswith("step")
    assert len([line for line in lines if line.split() and line.split()[0] in chain.STEPS]) == len(chain.STEPS)
    for line in want:
        assert line in lines


def test_the_summary_shows_the_pages_rows():
    from cookbook import docs
    checks, scenarios = docs.measured_rows(loaded(), None, None)
    lines = chain.summary([], checks, scenarios)
    assert all(f"  {r.title}: {r.published} | not measured yet" in lines for r in checks + scenarios)
    assert checks and scenarios


def invoke(*args: str) -> subprocess.CompletedProcess:
    beside = Path(sys.executable).parent / "invoke"
    cmd = [str(beside)] if beside.exists() else [sys.executable, "-m", "invoke"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, cwd=Path(__file__).parent.parent)


def test_dry_run_prints_the_steps_and_runs_nothing(tmp_path):
    out = invoke("chain", "--recipe", "qwen3.6-27b-fp8", "--out", str(tmp_path / "v"), "--dry-run")
    assert out.returncode == 0, out.stderr
    steps = [line.split()[1] for line in out.stdout.splitlines() if line[:3].strip().rstrip(".").isdigit()]
    assert steps == list(chain.STEPS)
    assert "--runtime=habana" in out.stdout and "gaudi-cookbook/qwen3.6-27b-fp8:" in out.stdout
    assert "vault.habana.ai" in out.stdout
    assert not (tmp_path / "v").exists()


def test_dry_run_says_what_an_earlier_run_left(tmp_path):
    chain.save_state(tmp_path / "state.json", chain.recorded({}, "test", A, "passed"))
    out = invoke("chain", "--recipe", "qwen3.6-27b-fp8", "--out", str(tmp_path), "--dry-run", "--runtime", "")
    assert out.returncode == 0, out.stderr
    assert f"earlier  test: passed for {A}" in out.stdout and "--runtime" not in out.stdout
