"""`invoke test`: the image checks pass on a good stand-in image and each fails on an image built to
break it. Broken images are built FROM the good one with one line changed."""

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from cookbook.host import containers, engine
from cookbook.host.errors import CheckFailure
from cookbook.image import imagecheck, render, standin
from cookbook.recipe import recipes
from inimage import fixplan

from .. import interrupts, packs
from ..conftest import TEST_REPO

pytestmark = [pytest.mark.docker, pytest.mark.upstream]
RID = "qwen3.5-27b-fp8"
SITE = standin.SITE_PACKAGES


def check(image: str) -> imagecheck.Result:
    loaded = recipes.load(RID)
    return imagecheck.run(loaded, image, standin.base(loaded.recipe.base.vllm_gaudi.version))


def failed(result: imagecheck.Result) -> set[str]:
    return {c["check"] for c in result.report["checks"] if c["outcome"] == "failed"}


@pytest.fixture(scope="module")
def good(testpack_image, testpack):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COOKBOOK_FIXES_DIR", str(testpack))
        start = time.monotonic()
        result = check(testpack_image.tags[0])
        return result, time.monotonic() - start


@pytest.fixture(scope="module")
def derive(testpack_image, tmp_path_factory):
    """Build an image FROM the good one plus some Dockerfile lines; remove it afterwards."""
    made = []

    def build(name: str, *lines: str) -> str:
        ctx = tmp_path_factory.mktemp(name)
        (ctx / "Dockerfile").write_text("\n".join([f"FROM {testpack_image.tags[0]}", *lines]) + "\n")
        tag = f"{TEST_REPO}/broken-{name}:latest"
        engine.docker("build", "-q", "-t", tag, str(ctx))
        made.append(tag)
        return tag

    yield build
    for tag in made:
        engine.docker("rmi", "-f", tag, check=False)


def test_good_image_passes_and_leaves_evidence(good, testpack_image):
    result, seconds = good
    assert result.passed, json.dumps(result.report["checks"], indent=1)
    report = json.loads(result.evidence.read_text())
    assert report["image_id"] == testpack_image.image_id and report["recipe"] == RID
    assert report["standin"] is True and report["passed"] is True
    assert len(report["checks"]) >= 25
    skipped = [c for c in report["checks"] if c["outcome"] == "skipped"]
    assert [c["check"] for c in skipped] == ["test_versions.py::test_vllm_gaudi_imports"]
    assert imagecheck.require_passed(testpack_image.image_id)["passed"]
    assert seconds < 60


def test_no_container_left_behind(good):
    out = engine.docker("ps", "-a", "--filter", f"ancestor={good[0].report['image']}", "--format", "{{.ID}}")
    assert out.stdout.strip() == ""


def test_wrong_env_value_fails(derive, with_testpack):
    result = check(derive("env", "ENV VLLM_COMPACT_GDN=0"))
    assert not result.passed
    assert "test_env.py::test_recipe_env_set_with_values" in failed(result)


def test_lazy_mode_fails(derive, with_testpack):
    result = check(derive("lazy", "ENV PT_HPU_LAZY_MODE=1"))
    assert "test_env.py::test_mode_and_fix_env" in failed(result)


def test_edited_patched_file_and_manifest_fail(derive, with_testpack):
    result = check(derive("edited", f"RUN echo '# edited' >> {SITE}/vllm_gaudi/{packs.RUNNER} && "
                                    f"echo >> {fixplan.MANIFEST}"))
    assert failed(result) == {"test_fixes.py::test_fixed_sources_match_their_record",
                              "test_manifest.py::test_manifest_is_the_rendered_one",
                              "test_manifest.py::test_manifest_hash_label_is_the_shipped_file"}


def test_missing_or_lying_label_fails(derive, with_testpack):
    result = check(derive("label", 'LABEL cookbook.recipe.hash="" org.opencontainers.image.vendor="" '
                                   'cookbook.content.hash="0"'))
    assert failed(result) == {"test_labels.py::test_recipe_labels", "test_labels.py::test_oci_keys_present",
                              "test_manifest.py::test_content_hash_label"}


def test_leaked_token_fails(derive, with_testpack):
    token = "hf_" + "Ab1" * 10
    result = check(derive("token", f"ENV HF_TOKEN={token}"))
    assert {"test_secrets.py::test_no_secret_in_env", "test_secrets.py::test_no_secret_in_history"} <= failed(result)


def test_token_only_in_history_fails(derive, with_testpack):
    result = check(derive("history", f"RUN echo hf_{'Zz9' * 10} > /dev/null"))
    assert failed(result) == {"test_secrets.py::test_no_secret_in_history"}


def test_credential_file_fails(derive, with_testpack):
    result = check(derive("file", "RUN mkdir -p /root/.cache/huggingface && echo x > /root/.cache/huggingface/token"))
    assert failed(result) == {"test_secrets.py::test_no_credential_file[/root/.cache/huggingface/token]"}


def test_wrong_entrypoint_fails(derive, with_testpack):
    result = check(derive("entrypoint", 'ENTRYPOINT ["python3", "-c", "print(\'vllm serve x\')"]'))
    assert {"test_entrypoint.py::test_entrypoint_is_the_cookbooks",
            "test_entrypoint.py::test_dry_run_prints_the_recipe_command"} <= failed(result)


def test_failed_image_is_refused_as_evidence(derive, with_testpack):
    tag = derive("refused", "ENV VLLM_COMPACT_GDN=0")
    check(tag)
    with pytest.raises(CheckFailure, match="failed its image checks"):
        imagecheck.require_passed(engine.inspect(tag)["Id"])


def test_unchecked_image_has_no_evidence():
    with pytest.raises(CheckFailure, match="has no image-check result"):
        imagecheck.require_passed("sha256:" + "0" * 64)


def test_expectations_are_the_rendered_manifest(with_testpack):
    loaded = recipes.load(RID)
    files = render.context_files(loaded, standin.base("v0.26.0"))
    e = imagecheck.expectations(files, "img")
    assert e["fixes"] == ["selftest-runner", "selftest-request"] and "gdn-prefix-cache" in e["not_written"]
    assert e["mode"] == "compile" and e["fix_env"] == {}
    assert e["command"][:3] == ["vllm", "serve", "Qwen/Qwen3.5-27B-FP8"] and e["python"] == "3.11"
    assert len(e["env"]) == 23
    assert e["manifest_sha256"] == fixplan.sha256_bytes(files["manifest.json"])
    assert e["content_hash"] == render.content_hash(files) and e["paths"]["record"] == fixplan.RECORD


# --- A check cut short by its time limit leaves no container ------------------------------------------

def leftover(marker: str) -> list[str]:
    out = engine.docker("ps", "--all", "--no-trunc", "--format", "{{.ID}} {{.Command}}")
    return [line.split()[0] for line in out.stdout.splitlines() if marker in line]


def test_a_timed_out_check_leaves_no_container(docker_engine, monkeypatch):
    """Killing `docker run --rm`'s client does not stop its container: the check removes it by id, and
    `invoke test` sweeps whatever its run's label still finds."""
    import importlib.util
    import subprocess
    import uuid

    if not engine.image_exists(standin.ROOTFS_IMAGE):
        standin.ensure_rootfs_image()
    spec = importlib.util.spec_from_file_location("image_checks_conftest", imagecheck.CHECKS / "conftest.py")
    checks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(checks)
    monkeypatch.setattr(checks, "RUN_TIMEOUT_S", 3, raising=False)
    run_id = uuid.uuid4().hex
    monkeypatch.setenv("COOKBOOK_CHECK_RUN", run_id)
    marker = uuid.uuid4().hex
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            checks.docker_run(standin.ROOTFS_IMAGE, "sh", "-c", f"sleep 150 # {marker}")
        assert leftover(marker) == []
        # A check process killed outright: its container is found by the run's label and removed by id.
        engine.docker("run", "--detach", "--label", f"{imagecheck.RUN_LABEL}={run_id}", standin.ROOTFS_IMAGE,
                      "sh", "-c", f"sleep 150 # {marker}")
        assert len(imagecheck.sweep(run_id)) == 1 and leftover(marker) == []
    finally:
        for cid in leftover(marker):
            engine.docker("rm", "--force", cid, check=False)


def test_an_image_the_checks_cannot_start_fails_them_and_leaves_no_container(docker_engine, tmp_path):
    """`invoke test` on an image with no `sleep` in it (FROM scratch): the engine refuses to start the
    checks' container. The image failed its checks (exit 1: the engine answered; it is the image that
    cannot run), one line, no traceback, and the container the SDK created before the refusal is removed.
    publish refuses such an image the same way (tests/release/test_publish.py's forgery)."""
    from ..test_tasks import invoke

    (tmp_path / "Dockerfile").write_text("FROM scratch\nLABEL cookbook.test=cannot-start\n")
    tag = f"{TEST_REPO}/cannot-start:latest"
    engine.docker("build", "-q", "-t", tag, str(tmp_path))
    image_id = engine.inspect(tag)["Id"]
    try:
        out = invoke("test", "--recipe", RID, "--standin", "--image", tag)
        assert out.returncode == 1, out.stderr
        assert out.stderr.startswith(f"error: the image-check container of {tag} did not start: the Docker "
                                     "engine said: ") and "Traceback" not in out.stderr
        assert engine.docker("ps", "--all", "--quiet", "--filter", f"ancestor={image_id}").stdout.split() == []
    finally:
        engine.docker("rmi", "-f", tag, check=False)



# The docker client, and after `docker run` a pause: the engine has made the container, its client still runs.
SLOW_DOCKER = """#!/bin/sh
{docker} "$@"; code=$?
[ "$1" = run ] && sleep 120
exit $code
"""


@pytest.mark.parametrize("moment", ["while-made", "while-checking"])
def test_sigterm_to_invoke_test_leaves_no_container_child_or_temp_folder(testpack_image, testpack, tmp_path, moment):
    """`invoke test` signalled (a CI cancel, `timeout`) while the engine makes the image-check container
    (it exists, its `docker run` client has not returned) and while its checks run: the container and
    every container of the run are removed, the checks' pytest process is gone, and so is the temporary
    folder."""
    tmp = tmp_path / "tmp"  # the task's TMPDIR: the checks' pytest names its files in there
    env = {"COOKBOOK_FIXES_DIR": str(testpack)}
    mine = f"ancestor={testpack_image.image_id}"

    def made() -> str:
        return engine.docker("ps", "--all", "--quiet", "--filter", mine, "--filter",
                             "label=cookbook.container=image-check").stdout.strip()

    def checks_running() -> str:
        found = [c for c in interrupts.processes_naming(str(tmp)).values() if " -m pytest " in c]
        return found[0] if found else ""

    if moment == "while-made":
        slow = tmp_path / "slow-docker"
        slow.write_text(SLOW_DOCKER.format(docker=engine.client().path))
        slow.chmod(0o755)
        env["COOKBOOK_DOCKER"] = str(slow)
    proc = interrupts.start(tmp, "test", "--recipe", RID, "--image", testpack_image.tags[0], "--standin", env=env)
    try:
        interrupts.wait_for(made if moment == "while-made" else checks_running, proc, 300, moment)
        _, stderr = interrupts.interrupt(proc, signal.SIGTERM, timeout=60)
        assert proc.returncode == 1  # invoke's exit on KeyboardInterrupt
        assert "Traceback" not in stderr
        left = engine.docker("ps", "--all", "--quiet", "--filter", mine, "--filter", "label=cookbook.container")
        assert left.stdout.split() == []
        assert interrupts.left(str(tmp)) == {}
        assert sorted(p.name for p in tmp.iterdir()) == []
    finally:
        proc.kill()
        interrupts.kill_left(str(tmp))
        for cid in engine.docker("ps", "--all", "--quiet", "--filter", mine, "--filter",
                                 "label=cookbook.container=image-check").stdout.split():
            containers.remove(cid)


CATALOGUE = sorted(recipes.known_ids())
AT_ONCE = 3  # the checks mostly wait on the engine: 41 recipes in 165 s so, 260 s one at a time (4: no better)


@pytest.fixture(scope="module")
def catalogue_runs(made_images, upstream_cache) -> dict[str, tuple[subprocess.CompletedProcess, ...]]:
    """Every recipe through the real tasks, `invoke build --standin` then `invoke test --standin`, AT_ONCE
    recipes at a time (each a process of its own, as a user runs them), the stand-in base made first."""
    from cookbook.host.paths import ROOT
    from cookbook.image import steps

    steps.ensure_standin(recipes.load(CATALOGUE[0]))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}

    def both(rid: str) -> tuple[subprocess.CompletedProcess, ...]:
        runs = []
        for task in ("build", "test"):
            runs.append(subprocess.run([sys.executable, "-m", "invoke", task, "--recipe", rid, "--standin", "--repo",
                                        TEST_REPO], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900))
            if task == "build":
                made_images.extend(line.split()[1] for line in runs[0].stdout.splitlines() if line.startswith("tag "))
            if runs[-1].returncode != 0:
                break
        return tuple(runs)

    with concurrent.futures.ThreadPoolExecutor(AT_ONCE) as pool:
        return dict(zip(CATALOGUE, pool.map(both, CATALOGUE), strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("rid", CATALOGUE)
def test_every_recipe_builds_on_the_standin_and_passes_its_checks(rid, catalogue_runs):
    """The whole catalogue, each recipe as `invoke build --standin` and `invoke test --standin` make and check
    it, with the real fix pack: an imported recipe is buildable and checked as any other. Warm (the build
    cache and the stand-in base kept between runs) a recipe costs about 2 s of build and 5 s of checks."""
    runs = catalogue_runs[rid]
    assert runs[0].returncode == 0, runs[0].stderr[-3000:]
    assert len(runs) == 2 and runs[1].returncode == 0, runs[-1].stdout[-3000:] + runs[-1].stderr[-3000:]
    image_id = next(line.split()[1] for line in runs[0].stdout.splitlines() if line.startswith("image "))
    report = imagecheck.read_evidence(imagecheck.evidence_path(image_id))
    assert report["passed"] is True and report["recipe"] == rid and report["standin"] is True
    assert report["checks"] and not [c for c in report["checks"] if c["outcome"] == "failed"]
