"""cookbook/chain.py: `invoke chain`'s resumable state (a step that passed for the same image id and the
same request, whose evidence still says so, is not run again), its folder (the marker rule, no symlink
written through), its one summary, and its dry run through invoke."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cookbook import chain
from cookbook.host.errors import CheckFailure
from cookbook.prove.measured import Row
from cookbook.recipe import recipes

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


QUICK = chain.Options(scale=0.01, repeats=1, smoke_only=("health",), bench_only=("cold-65k",),
                      args=("--max-model-len", "8192"))


@pytest.mark.parametrize("then, now, step, same", [
    (chain.Options(), chain.Options(), "bench", True),
    (QUICK, chain.Options(), "bench", False),                                    # a quick run is not the full one
    (QUICK, chain.Options(), "smoke", False),
    (chain.Options(scale=0.5), chain.Options(), "bench", False),
    (chain.Options(repeats=1), chain.Options(), "bench", False),
    (chain.Options(repeats=1), chain.Options(), "smoke", True),                  # smoke has no repeats
    (chain.Options(bench_only=("a", "b")), chain.Options(bench_only=("b", "a")), "bench", True),
    (chain.Options(args=("--enforce-eager",)), chain.Options(), "smoke", False),  # extra vLLM flags
    (chain.Options(runtime=None), chain.Options(), "bench", False),              # a CPU proof run, then a Gaudi one
    (chain.Options(env={"X": "1"}), chain.Options(env={"X": "2"}), "smoke", False),
    (chain.Options(results=Path("/tmp/r")), chain.Options(), "results", False),
    (QUICK, chain.Options(), "docs", False),
    (QUICK, chain.Options(), "test", True),                                      # the image checks ask nothing
])
def test_a_step_done_for_another_request_is_redone(then, now, step, same):
    state = chain.recorded({}, step, A, "passed", chain.asked(then, step))
    assert chain.done_before(state, step, A, chain.asked(now, step)) is same


def test_the_environment_is_kept_as_a_hash_not_its_values():
    assert "s3cr3t-value" not in json.dumps(chain.asked(chain.Options(env={"X": "s3cr3t-value"}), "smoke"))


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


def image_checks_said(image_id: str, passed: bool) -> Path:
    """The image-check evidence file `invoke test` leaves for `image_id` (cookbook/image/imagecheck.py)."""
    from cookbook.image import imagecheck

    path = imagecheck.evidence_path(image_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"passed": passed, "checks": []}))
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COOKBOOK_CACHE", str(tmp_path / "cache"))


def test_a_second_run_on_the_same_image_skips_what_passed_and_stops_at_a_failure(tmp_path, cache):
    ran = []
    image_checks_said(A, True)
    out = tmp_path / "v"

    def work(name, fail=False):
        def go():
            ran.append(name)
            print(f"{name} output")
            if fail:
                raise CheckFailure(f"{name} broke\nsecond line")
            return "fine"
        return go

    first = chain.Chain(loaded(), chain.Options(out=out))
    first.image_id = A
    assert first.step("test", work("test")) and not first.step("smoke", work("smoke", fail=True))
    assert (out / "test.log").read_text() == "test output\n"
    assert json.loads((out / "state.json").read_text())["smoke"] == {
        "image_id": A, "status": "failed", "asked": chain.asked(chain.Options(), "smoke")}

    again = chain.Chain(loaded(), chain.Options(out=out))
    again.image_id = A
    assert again.step("test", work("test")) and again.step("smoke", work("smoke"))
    assert ran == ["test", "smoke", "smoke"]
    assert [(o.step, o.status) for o in again.outcomes] == [("test", "done before"), ("smoke", "passed")]

    other = chain.Chain(loaded(), chain.Options(out=out))
    other.image_id = B  # a new image: everything again
    other.step("test", work("test"))
    assert ran[-1] == "test" and other.outcomes[0].status == "passed"


def test_an_image_check_evidence_file_that_says_failed_is_read_again(tmp_path, cache):
    """state.json says the image checks passed; the evidence file now says they failed: the step is redone."""
    image_checks_said(A, True)
    first = chain.Chain(loaded(), chain.Options(out=tmp_path / "v"))
    first.image_id = A
    assert first.step("test", lambda: "fine") and first.outcomes[-1].status == "passed"
    image_checks_said(A, False)
    ran = []
    again = chain.Chain(loaded(), chain.Options(out=tmp_path / "v"))
    again.image_id = A
    assert again.step("test", lambda: ran.append("test") or "fine")
    assert ran == ["test"] and again.outcomes[-1].status == "passed"


def gaudi_target(image_id=A, args=()):
    """What results.image_target records of a Gaudi run (tests/prove/test_results.py pins that function)."""
    return {"image": "img:tag", "image_id": image_id, "content_hash": None, "base_id": None, "base_digest": None,
            "base_name": None, "hardware": "gaudi", "args": list(args)}


def chain_ran(out: Path, opts: chain.Options, target: dict, scale=1.0, repeats=3, only=None) -> None:
    """What a chain's smoke and bench steps leave in its folder, and its state.json saying they passed."""
    from cookbook.host import outdir

    from .prove.test_docs import write_bench, write_smoke

    out.mkdir(parents=True, exist_ok=True)
    outdir.mark(out, chain.MARKER, chain.MARKER_TEXT)
    write_smoke(out / "smoke", target, [("known-answers", "passed", "8/8 (run)")])
    write_bench(out / "bench", target, {"one-stream-short": 51.25}, scale=scale, repeats=repeats, only=only)
    state = {}
    for step in ("smoke", "bench"):
        state = chain.recorded(state, step, A, "passed", chain.asked(opts, step))
    chain.save_state(out / "state.json", state)


def test_smoke_and_bench_are_done_before_only_while_their_files_say_so(tmp_path):
    """The files a step left are read again: one truncated, gone, or of another run (a CPU figure under a
    Gaudi chain) redoes the step, whatever state.json says."""
    opts = chain.Options(out=tmp_path / "v")
    chain_ran(tmp_path / "v", opts, gaudi_target())
    c = chain.Chain(loaded(), opts)
    c.image_id = A
    assert c.done("smoke") and c.done("bench")
    smoke = tmp_path / "v" / "smoke" / "smoke.json"
    text = smoke.read_text()
    smoke.write_text(text[:100])  # truncated
    assert not c.done("smoke") and "not JSON" in c.evidence("smoke")
    smoke.write_text(text.replace('"hardware": "gaudi"', '"hardware": "cpu"'))
    assert not c.done("smoke") and "(hardware)" in c.evidence("smoke")
    smoke.write_text(text.replace('"recipe": "qwen3.5-27b-fp8"', '"recipe": "qwen3.6-27b-fp8"'))
    assert not c.done("smoke") and c.evidence("smoke") == "smoke.json is of recipe qwen3.6-27b-fp8"
    smoke.write_text(text)
    assert c.done("smoke")
    (tmp_path / "v" / "bench" / "bench.json").unlink()
    assert not c.done("bench")


def test_a_quick_run_leaves_files_that_a_full_chain_does_not_take(tmp_path):
    quick = chain.Options(out=tmp_path / "v", scale=0.01, repeats=1, bench_only=("one-stream-short",))
    chain_ran(tmp_path / "v", quick, gaudi_target(), scale=0.01, repeats=1, only=["one-stream-short"])
    c = chain.Chain(loaded(), quick)
    c.image_id = A
    assert c.done("bench")  # the same quick request again
    c = chain.Chain(loaded(), chain.Options(out=tmp_path / "v"))
    c.image_id = A
    assert not c.done("bench") and c.done("smoke")  # smoke was asked the same
    # state.json forged to say the full request: the file itself still says what ran
    chain_ran(tmp_path / "v", chain.Options(out=tmp_path / "v"), gaudi_target(), scale=0.01, repeats=1,
              only=["one-stream-short"])
    assert c.done("smoke") and not c.done("bench") and "(selection, scale, repeats)" in c.evidence("bench")


def test_a_truncated_or_missing_result_is_one_clear_line_and_a_summary(tmp_path):
    from .prove.test_docs import write_bench, write_smoke

    opts = chain.Options(out=tmp_path / "v", results=tmp_path / "r")
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / ".cookbook-verify").write_text("")  # the chain's own folder
    write_smoke(tmp_path / "v" / "smoke", gaudi_target(), [("known-answers", "passed", "8/8 (run)")])
    write_bench(tmp_path / "v" / "bench", gaudi_target(), {"one-stream-short": 51.25})
    smoke = tmp_path / "v" / "smoke" / "smoke.json"
    smoke.write_text(smoke.read_text()[:50])
    c = chain.Chain(loaded(), opts)
    c.image_id = A
    assert not c.step("results", c.results)
    assert c.outcomes[-1].detail.startswith("result file is not JSON")
    import shutil
    shutil.rmtree(tmp_path / "v" / "smoke")
    c = chain.Chain(loaded(), opts)
    c.image_id = A
    assert not c.step("results", c.results)
    assert c.outcomes[-1].detail.startswith("result file does not read: No such file")
    lines = chain.report(c)
    assert "FAILED at results" in lines and (tmp_path / "v" / "summary.txt").is_file()


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
    from cookbook.prove import docs
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


def test_dry_run_says_what_the_weights_step_would_fetch(tmp_path):
    out = invoke("chain", "--recipe", "qwen3.6-27b-fp8", "--out", str(tmp_path / "v"), "--hf-cache",
                 str(tmp_path / "hf"), "--dry-run")
    assert out.returncode == 0, out.stderr
    assert f"weights  fetch Qwen/Qwen3.6-27B-FP8 at main into {tmp_path / 'hf' / 'hub'}" in out.stdout
    skipped = invoke("chain", "--recipe", "qwen3.6-27b-fp8", "--out", str(tmp_path / "v"), "--skip", "weights",
                     "--dry-run")
    assert "weights  skipped: --skip" in skipped.stdout and not (tmp_path / "hf").exists()


def test_the_weights_step_fetches_before_the_server_then_finds_them_present(tmp_path, monkeypatch):
    """The chain's weights step is the serve task's: the stand-in Hub is asked once; a resumed chain
    finds the verified files in the cache without a request. A model the run mounts fetches nothing."""
    from .cpu_server import TEST_RECIPE
    from .fake_hub import FakeHub, Repo
    from .prove import test_weights

    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    hub_recipe = recipes.load(str(test_weights.tiny_hub_recipe(tmp_path)), root=tmp_path / "recipes")
    opts = chain.Options(out=tmp_path / "v", hf_cache=str(tmp_path / "hf"))
    files = test_weights.model_files()
    with FakeHub({test_weights.REPO: Repo(test_weights.COMMIT, files, lfs={"model.safetensors"})}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_TOKEN", test_weights.SECRET)
        hub.token = test_weights.SECRET  # a gated model: the token is sent, never written under build/
        first = chain.Chain(hub_recipe, opts)
        assert first.step("weights", first.weights)
        assert first.outcomes[-1].status == "passed" and "verified" in first.outcomes[-1].detail
        assert (tmp_path / "v" / "weights.json").is_file() and (tmp_path / "v" / "weights.log").is_file()
        hub.requests.clear()
        again = chain.Chain(hub_recipe, opts)
        assert again.step("weights", again.weights) and "present and verified" in again.outcomes[-1].detail
        assert not hub.requests
    written = [p.read_text(errors="replace") for p in (tmp_path / "v").rglob("*") if p.is_file()]
    assert written and not any(test_weights.SECRET in text for text in written)
    mounted = chain.Chain(recipes.load(TEST_RECIPE, root=TEST_RECIPE.parents[2]), opts)
    assert mounted.step("weights", mounted.weights) and mounted.outcomes[-1].status == "skipped"


def test_dry_run_says_what_an_earlier_run_left(tmp_path):
    from cookbook.host import outdir

    outdir.mark(tmp_path, chain.MARKER, chain.MARKER_TEXT)
    chain.save_state(tmp_path / "state.json", chain.recorded({}, "test", A, "passed"))
    out = invoke("chain", "--recipe", "qwen3.6-27b-fp8", "--out", str(tmp_path), "--dry-run", "--runtime", "")
    assert out.returncode == 0, out.stderr
    assert f"earlier  test: passed for {A}" in out.stdout and "--runtime" not in out.stdout


@pytest.fixture(scope="module")
def cpu_recipe(docker_engine, tmp_path_factory):
    """The CPU image recipe (tests/cpu_image.py) on the vLLM CPU base, and the trained tiny model; the
    chain builds the image itself."""
    from cookbook.host.errors import BuildError
    from cookbook.image import cpubase

    from . import cpu_image
    from .conftest import unavailable
    from .cpu_server import tiny_model_dir

    try:
        base = cpubase.ensure()
    except BuildError as exc:  # no CPU vLLM environment (no registry), no mmdebstrap or Debian mirror
        unavailable(f"no vLLM CPU base image: {exc}")
    root = tmp_path_factory.mktemp("chain-cpu")
    return cpu_image.write_recipe(root / "recipes", base.image), cpu_image.write_pack(root / "pack"), tiny_model_dir()


def chain_command(cpu_recipe, name: str, out: Path, res: Path) -> tuple[list[str], dict]:
    import os

    from cookbook.host.paths import ROOT

    from . import cpu_image
    from .conftest import TEST_REPO
    from .cpu_server import free_port

    path, pack, model = cpu_recipe
    cmd = [sys.executable, "-m", "invoke", "chain", "--recipe", str(path), "--runtime=", "--hf-cache=",
           "--repo", TEST_REPO, "--name", name, "--port", str(free_port()), "--out", str(out), "--results", str(res),
           "--env", f"COOKBOOK_MODEL_PATH={cpu_image.MODEL_IN_IMAGE}",
           f"--option=--volume={model}:{cpu_image.MODEL_IN_IMAGE}:ro",
           "--skip", "test",  # the image suite checks vllm_gaudi, which a CPU image does not hold
           # The CPU base has no C++ compiler for the sampler the logprobs checks compile: a subset.
           "--smoke-only", "known-answers", "--smoke-only", "tool-call-streamed", "--smoke-only", "health",
           "--bench-only", "one-stream-short", "--bench-only", "cold-65k", "--scale", "0.01", "--repeats", "1",
           "--timeout", "600", "--", "--enforce-eager"]
    env = {**os.environ, "COOKBOOK_FIXES_DIR": str(pack),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return cmd, env


def built_tags(out: Path) -> list[str]:
    log = out / "build.log"
    lines = log.read_text().splitlines() if log.is_file() else []
    return [line.split()[1] for line in lines if line.startswith("tag ")]


@pytest.mark.docker
def test_the_whole_chain_on_cpu_then_again_resumed(cpu_recipe, made_images, tmp_path):
    """The chain proved on CPU: the one command builds the CPU image, serves it under Docker's default runtime,
    runs smoke and bench, writes the result files (the hardware as the server reported it, the scale, repeats,
    selection and added flags) and renders the page with the CPU figures of this very image, said to be a
    quick run's, not the recipe's; the container is gone afterwards. A second run of the same request redoes
    nothing; a third, asking other repeats after smoke.json was cut short, redoes smoke and bench."""
    import uuid

    from cookbook.host import engine
    from cookbook.host.paths import ROOT
    from cookbook.prove import docs, results
    from cookbook.recipe import recipes

    path, pack, _ = cpu_recipe
    name = f"cookbook-test-chain-{uuid.uuid4().hex[:8]}"
    out, res = tmp_path / "verify", tmp_path / "results"
    cmd, env = chain_command(cpu_recipe, name, out, res)
    first = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    made_images.extend(built_tags(out))
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    status = {line.split()[0]: line.split()[1] for line in first.stdout.splitlines()
              if line.split() and line.split()[0] in chain.STEPS}
    assert status == {"doctor": "skipped", "base": "skipped", "build": "passed", "test": "skipped",
                      "weights": "skipped", "serve": "passed",
                      "smoke": "passed", "bench": "passed", "results": "passed", "docs": "passed", "stop": "passed"}
    assert "all steps passed" in first.stdout and (out / "summary.txt").is_file()
    assert engine.docker("inspect", name, check=False).returncode != 0  # the server is stopped
    # The result files the pages read, measured on the image the recipe builds now, on a CPU.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COOKBOOK_FIXES_DIR", str(pack))
        loaded = recipes.load(str(path))
        for kind in ("smoke", "bench"):
            run = results.load(loaded.id, kind, res)
            assert run.hardware == "cpu" and run.content_hash == docs.current_image(loaded, run)
            assert run.args == ("--enforce-eager",) and run.base_name == loaded.recipe.base.image
        assert (run.scale, run.repeats, run.only) == (0.01, 1, ("cold-65k", "one-stream-short"))
    page = (out / f"{loaded.id}.md").read_text()
    assert "not measured on this image" not in page.lower()
    # a 1%-scale, one-repeat run on a local base with a flag added: its figures say so, never "measured"
    assert ("| 47.1 tokens/s | not a full run of this image (on a local base image of that name, no registry digest "
            "(the recipe pins none); at scale 0.01; median of 1 run; with vLLM flags added: --enforce-eager; "
            "last run: ") in page
    assert "One stream, short prompt, 256 tokens: 47.1 tokens/s | " in first.stdout  # the figures against the page's
    assert "Application startup complete" in (out / "server.log").read_text()
    for log in ("build", "smoke", "bench", "results", "docs"):
        assert (out / f"{log}.log").is_file(), log

    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    status = {line.split()[0]: " ".join(line.split()[1:3]) for line in again.stdout.splitlines()
              if line.split() and line.split()[0] in chain.STEPS}
    assert status["weights"].startswith("skipped") and status["serve"].startswith("skipped"), again.stdout[-3000:]
    assert status["stop"].startswith("skipped")
    assert all(status[s] == "done before" for s in ("smoke", "bench", "results", "docs"))

    smoke = out / "smoke" / "smoke.json"
    smoke.write_text(smoke.read_text()[:200])  # cut short: state.json still says smoke passed
    third = subprocess.run([*cmd[:cmd.index("--repeats") + 1], "2", *cmd[cmd.index("--repeats") + 2:]], cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=900)
    assert third.returncode == 0, third.stdout[-3000:] + third.stderr[-3000:]
    status = {line.split()[0]: line.split()[1] for line in third.stdout.splitlines()
              if line.split() and line.split()[0] in chain.STEPS}
    assert all(status[s] == "passed" for s in ("serve", "smoke", "bench", "results", "docs")), third.stdout[-3000:]
    assert json.loads(smoke.read_text())["passed"] and results.load(loaded.id, "bench", res).repeats == 2


@pytest.mark.docker
def test_a_quick_runs_state_never_stands_for_the_full_chain(cpu_recipe, made_images, tmp_path):
    """state.json and result files a quick run left (scale 0.01, one repeat) for the very image the chain
    builds: the full chain measures again instead of saying "all steps passed" over the quick figures.
    Kept cheap: the health wait is 1 s, so measuring again shows as the serve step failing."""
    import uuid

    from cookbook.host.paths import ROOT

    from .prove.test_docs import write_bench, write_smoke

    out, res = tmp_path / "verify", tmp_path / "results"
    cmd, env = chain_command(cpu_recipe, f"cookbook-test-chain-{uuid.uuid4().hex[:8]}", out, res)
    cmd[cmd.index("--timeout") + 1] = "1"
    first = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    made_images.extend(built_tags(out))
    image_id = json.loads((out / "state.json").read_text())["build"]["image_id"]
    assert first.returncode == 1 and image_id.startswith("sha256:"), first.stdout[-2000:] + first.stderr[-2000:]
    quick = {"image": image_id, "image_id": image_id, "hardware": "cpu", "args": ["--enforce-eager"]}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COOKBOOK_FIXES_DIR", env["COOKBOOK_FIXES_DIR"])
        write_smoke(out / "smoke", quick, [], rid=str(cpu_recipe[0]))
        write_bench(out / "bench", quick, {}, rid=str(cpu_recipe[0]), scale=0.01, repeats=1)
    state = json.loads((out / "state.json").read_text())
    state.update({step: {"image_id": image_id, "status": "passed"} for step in ("smoke", "bench", "results", "docs")})
    (out / "state.json").write_text(json.dumps(state))  # as a quick run left it
    full = [w for i, w in enumerate(cmd) if w not in ("--scale", "--repeats") and cmd[i - 1] not in ("--scale",
                                                                                                     "--repeats")]
    again = subprocess.run(full, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert again.returncode == 1 and "all steps passed" not in again.stdout, again.stdout[-3000:]
    assert "FAILED at serve" in again.stdout and "bench     not run" in again.stdout.splitlines()


@pytest.mark.parametrize("failed, blockers", [
    ([], []),
    (["image"], []),                      # built and checked by the chain's next steps
    (["runtime", "image"], ["runtime"]),
    (["cards", "memory"], ["cards", "memory"]),
])
def test_only_the_image_check_of_the_doctor_waits_for_the_build(failed, blockers):
    from cookbook.prove import doctor

    names = ["runtime", "driver", "cards", "memory", "image"]
    checks = [doctor.Check(n, doctor.FAIL if n in failed else doctor.OK, "") for n in names]
    assert doctor.blockers(checks, but=chain.BUILT_NEXT) == blockers


@pytest.mark.parametrize("skip, ok", [
    (None, ()), (["test"], ("test",)), (["doctor", "base"], ("doctor", "base")),
    (["weights"], ("weights",)), (["smoke"], None), (["build"], None), (["stop"], None),
])
def test_only_checks_may_be_skipped_never_the_steps_that_make_the_figures(skip, ok):
    from cookbook.host.errors import UsageError

    if ok is None:
        with pytest.raises(UsageError, match="may be skipped"):
            chain.check_skip(skip)
    else:
        assert chain.check_skip(skip) == ok


def test_a_step_that_may_not_be_skipped_is_one_message_exit_2(tmp_path):
    out = invoke("chain", "--recipe", "qwen3.6-27b-fp8", "--skip", "bench", "--out", str(tmp_path), "--dry-run")
    assert out.returncode == 2 and "only doctor, base, test, weights may be skipped" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.docker
def test_sigterm_during_smoke_stops_the_server_and_says_where_it_stopped(cpu_recipe, made_images, tmp_path):
    import signal
    import time
    import uuid

    from cookbook.host import engine
    from cookbook.host.paths import ROOT

    name = f"cookbook-test-chain-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "verify"
    cmd, env = chain_command(cpu_recipe, name, out, tmp_path / "results")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 900
        while not (out / "smoke.log").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        made_images.extend(built_tags(out))
        assert proc.poll() is None, "the chain ended before smoke started"
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, stderr[-3000:]
    assert "Traceback" not in stderr
    lines = stdout.splitlines()
    assert "smoke     failed       interrupted" in lines and "stop      passed       container removed" in lines
    assert "bench     not run" in lines and "FAILED at smoke" in lines
    assert engine.docker("inspect", name, check=False).returncode != 0
    assert chain.load_state(out / "state.json")["smoke"]["status"] == "failed"


def _checks_container(found: dict[int, str]) -> str:
    """The container the image checks' pytest was pointed at, once that pytest runs."""
    hosts = [c.split("--hosts=docker://")[1].split()[0] for c in found.values() if " -m pytest " in c]
    return hosts[0] if hosts else ""


def _build_client(found: dict[int, str]) -> str:
    """The `docker build` client, once it runs (its --iidfile is in the task's TMPDIR)."""
    return next((c for c in found.values() if " build " in c and "--iidfile" in c), "")


@pytest.mark.docker
@pytest.mark.parametrize("step, running", [("build", _build_client), ("test", _checks_container)])
def test_sigterm_in_a_step_cleans_up_and_writes_the_summary(cpu_recipe, made_images, tmp_path, step, running):
    """SIGTERM while the chain's build or test step runs its child (the `docker build` client; the image
    checks' pytest and their container): those are gone, the temporary folder is empty, and the summary
    says the chain was interrupted there.

    A build of an unchanged context is cached and ends in a fraction of a second, sooner than a poll of
    /proc may see it: the build case's docker client waits 60 s before a build (COOKBOOK_DOCKER, a
    wrapper that then runs the real client), so the signal always lands while the client runs."""
    import signal
    import uuid

    from cookbook.host import engine
    from cookbook.image import imagecheck

    from . import interrupts

    name = f"cookbook-test-chain-{uuid.uuid4().hex[:8]}"
    out, tmp = tmp_path / "verify", tmp_path / "tmp"
    cmd, env = chain_command(cpu_recipe, name, out, tmp_path / "results")
    at = cmd.index("--skip")
    args = cmd[3:at] + cmd[at + 2:]  # after `python -m invoke`; the test step runs this time
    extra = {"COOKBOOK_FIXES_DIR": env["COOKBOOK_FIXES_DIR"]}
    if step == "build":
        slow = tmp_path / "bin" / "docker"
        slow.parent.mkdir()
        slow.write_text(f'#!/bin/sh\n[ "$1" = build ] && sleep 60\nexec {engine.client().path} "$@"\n')
        slow.chmod(0o755)
        extra["COOKBOOK_DOCKER"] = str(slow)
    proc = interrupts.start(tmp, *args, env=extra)
    run_id = ""
    try:
        child = interrupts.wait_for(lambda: running(interrupts.processes_naming(str(tmp))), proc, 900, step)
        if step == "test":
            labels = json.loads(engine.docker("inspect", child).stdout)[0]["Config"]["Labels"]
            run_id = labels[imagecheck.RUN_LABEL]
        stdout, stderr = interrupts.interrupt(proc, signal.SIGTERM, timeout=120)
        made_images.extend(built_tags(out))
        assert proc.returncode == 1, stderr[-3000:]
        assert "Traceback" not in stderr
        assert interrupts.left(str(tmp)) == {}
        assert sorted(p.name for p in tmp.iterdir()) == []
        left = engine.docker("ps", "--all", "--quiet", "--filter", f"label={imagecheck.RUN_LABEL}={run_id}")
        assert not run_id or left.stdout.split() == []
        summary = (out / "summary.txt").read_text().splitlines()
        stopped = [line.split()[0] for line in summary if line.endswith("failed       interrupted")]
        assert stopped == [step] and f"FAILED at {step}" in summary, summary
        assert "serve     not run" in summary and summary == stdout.splitlines()[-len(summary):]
        assert chain.load_state(out / "state.json")[step]["status"] == "failed"
    finally:
        proc.kill()
        interrupts.kill_left(str(tmp))
        if run_id:
            imagecheck.sweep(run_id)


def test_cpu_figures_of_a_gaudi_recipe_never_go_where_the_pages_read(tmp_path, monkeypatch):
    """The results step refuses to copy a CPU run of a Gaudi recipe into results/ (what `invoke docs` publishes);
    into a folder of the run's own (--results) it may go, labelled as CPU figures there."""
    from cookbook.prove import results

    from .prove.test_docs import write_bench, write_smoke

    monkeypatch.setattr(results, "RESULTS", tmp_path / "results")
    out = tmp_path / "v"
    out.mkdir()
    (out / chain.MARKER).write_text("")
    cpu = results.image_target("img:tag", "sha256:" + "ab" * 32, "cpu", {})
    write_smoke(out / "smoke", cpu, [("known-answers", "passed", "8/8 (run)")])
    write_bench(out / "bench", cpu, {"one-stream-short": 51.25})
    c = chain.Chain(loaded(), chain.Options(out=out))
    assert not c.step("results", c.results)
    assert "qwen3.5-27b-fp8/smoke.json: measured on a CPU (target.hardware: cpu); qwen3.5-27b-fp8 is a Gaudi 2 " \
           "recipe" in c.outcomes[-1].detail
    assert not (tmp_path / "results").exists()
    own = chain.Chain(loaded(), chain.Options(out=out, results=tmp_path / "mine"))
    assert own.step("results", own.results) and (tmp_path / "mine" / "qwen3.5-27b-fp8" / "bench.json").is_file()


def test_out_is_a_folder_of_the_chains_own_or_refused(tmp_path):
    """`--out` follows the marker rule of render --out, docs --site and k8s --out: a user's folder (their
    doctor.log and state.json) is refused, before any step, dry run included; nothing in it is touched."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "doctor.log").write_text("my notes\n")
    (mine / "state.json").write_text('{"mine": true}\n')
    for dry in (["--dry-run"], ["--runtime", "", "--skip", "base"]):
        out = invoke("chain", "--recipe", "qwen3.6-27b-fp8", "--out", str(mine), *dry)
        assert out.returncode == 2, out.stdout + out.stderr
        assert f"{mine} is a folder the cookbook did not write (no .cookbook-verify in it)" in out.stderr
        assert "Traceback" not in out.stderr
    assert sorted(p.name for p in mine.iterdir()) == ["doctor.log", "state.json"]
    assert (mine / "doctor.log").read_text() == "my notes\n" and (mine / "state.json").read_text() == '{"mine": true}\n'
    new = tmp_path / "new"
    assert invoke("chain", "--recipe", "qwen3.6-27b-fp8", "--out", str(new), "--dry-run").returncode == 0


def test_the_chain_never_writes_through_a_symlink_in_its_folder(tmp_path):
    """A link named build.log in the chain's own folder, to a file outside: refused, the file outside intact."""
    out = tmp_path / "v"
    out.mkdir()
    (out / ".cookbook-verify").write_text("")  # the chain's own folder
    outside = tmp_path / "precious"
    outside.write_text("keep me\n")
    (out / "build.log").symlink_to(outside)
    (out / "smoke").mkdir()
    (out / "smoke" / "smoke.json").symlink_to(outside)
    for args in (["--dry-run"], ["--runtime", "", "--skip", "base"]):
        said = invoke("chain", "--recipe", "qwen3.6-27b-fp8", "--out", str(out), *args)
        assert said.returncode == 2 and f"{out / 'build.log'} is a symlink; the chain never writes through one" \
            in said.stderr, said.stderr
    linked = tmp_path / "linked"
    linked.symlink_to(out)  # the folder itself a link: refused as outdir refuses it
    said = invoke("chain", "--recipe", "qwen3.6-27b-fp8", "--out", str(linked), "--dry-run")
    assert said.returncode == 2 and "exists and is not a folder" in said.stderr
    assert outside.read_text() == "keep me\n"


def test_the_results_copy_replaces_a_link_never_writes_through_it(tmp_path):
    from .prove.test_docs import write_bench, write_smoke

    out, res = tmp_path / "v", tmp_path / "r"
    out.mkdir()
    (out / ".cookbook-verify").write_text("")  # the chain's own folder
    write_smoke(out / "smoke", gaudi_target(), [("known-answers", "passed", "8/8 (run)")])
    write_bench(out / "bench", gaudi_target(), {"one-stream-short": 51.25})
    outside = tmp_path / "precious"
    outside.write_text("keep me\n")
    (res / "qwen3.5-27b-fp8").mkdir(parents=True)
    (res / "qwen3.5-27b-fp8" / "smoke.json").symlink_to(outside)
    c = chain.Chain(loaded(), chain.Options(out=out, results=res))
    assert c.step("results", c.results), c.outcomes[-1]
    copy = res / "qwen3.5-27b-fp8" / "smoke.json"
    assert not copy.is_symlink() and copy.read_bytes() == (out / "smoke" / "smoke.json").read_bytes()
    assert outside.read_text() == "keep me\n"
    # the recipe's folder itself a link out: refused, nothing written where it points
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(res / "qwen3.5-27b-fp8")
    (res / "qwen3.5-27b-fp8").symlink_to(elsewhere)
    c = chain.Chain(loaded(), chain.Options(out=out, results=res))
    assert not c.step("results", c.results) and "is a symlink" in c.outcomes[-1].detail
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("args,said", [
    (["--hf-cache", "/"], "--hf-cache /: / is the host's own"),
    (["--hf-cache", "/etc"], "--hf-cache /etc: /etc is the host's own"),
    (["--option=--privileged=true"], "this docker run option is not one --option takes"),
    (["--name", "a/b"], "--name"),
    (["--smoke-only", "nope"], "--only names no check of this recipe: nope"),
    (["--bench-only", "nope"], "no scenario nope in qwen3.5-27b-fp8"),
])
@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "run"])
def test_what_serve_refuses_is_refused_before_any_step(tmp_path, args, said, dry):
    """The weights step writes into the Hub cache, and the build takes many minutes, before serve, smoke
    and bench start: what they would refuse (an --hf-cache mounted read-write, a check or scenario the
    recipe has not) is refused before any step."""
    out = invoke("chain", "--out", str(tmp_path / "v"), *args, *(["--dry-run"] if dry else []))
    assert out.returncode == 2 and said in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert not (tmp_path / "v").exists()
