"""`invoke test`: the gate between build and any Gaudi run. Starts a container from the image with
the entrypoint overridden, runs the checks in cookbook/image/image_checks/ through pytest-testinfra's docker
backend, always removes the container, and writes the result as evidence tied to the image id."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from inimage import fixplan

from ..host import containers, engine, signals
from ..host.errors import CheckFailure
from ..host.names import Label
from ..host.paths import ROOT, cache_dir
from ..host.progress import say
from ..recipe.recipes import LoadedRecipe
from . import build, render, steps

CHECKS = Path(__file__).parent / "image_checks"
RUN_LABEL = Label.CHECK_RUN  # on every container of one `invoke test` run (image_checks/conftest.py)


def expected_context(loaded: LoadedRecipe, base: render.Base, labels: dict[str, str]) -> dict[str, bytes]:
    """The context this checkout renders for the image: the recipe, the host's fix pack and the base as
    the engine holds it now (never read back from the image under test). Only whether it was built with
    --allow-unwritten-fixes is taken from its label, and that label is checked against the manifest."""
    allow = labels.get(Label.ALLOW_UNWRITTEN) == "true"
    return render.context_files(loaded, build.resolve_base(base), allow_unwritten=allow)


def expectations(files: dict[str, bytes], image: str) -> dict:
    """What a correct image must show: its rendered manifest, as the checks read it. Nothing here is
    derived again from the recipe; the manifest is the one record of what the image holds."""
    m = json.loads(files["manifest.json"])
    order = m["fixes"]["order"]
    return {
        "image": image,
        "recipe": m["recipe"]["id"],
        "recipe_hash": m["recipe"]["hash"],
        "standin": m["base"]["standin"],
        "base_image": m["base"]["image"],
        "python": m["base"]["python"],
        "site_packages": m["base"]["site_packages"],
        "versions": {"vllm": m["vllm"]["version"], "vllm_gaudi": m["vllm_gaudi"]["version"].lstrip("v")},
        "commits": {"vllm_gaudi": m["vllm_gaudi"]["commit"], "vllm": m["vllm"]["commit"]},
        "profile": m["fixes"]["profile"],
        "fixes": [f["name"] for f in order if f["status"] == "in-pack"],
        "not_written": [f["name"] for f in order if f["status"] != "in-pack"],
        "mode": m["fixes"]["mode"],
        "fix_env": m["fixes"]["env"],
        "env": m["env"],
        "command": m["command"],
        "port": m["port"],
        "health_path": m["health_path"],
        "manifest_sha256": fixplan.sha256_bytes(files["manifest.json"]),
        "content_hash": render.content_hash(files),
        "paths": render.IMAGE_PATHS,
    }


@dataclass(frozen=True)
class Result:
    passed: bool
    evidence: Path
    report: dict


def verdict(result: Result | None, image: str) -> None:
    """CheckFailure (exit 1) when the checks ran and failed; None from a dry run passes."""
    if result is not None and not result.passed:
        raise CheckFailure(f"image checks failed for {image}; evidence in {result.evidence}")


def suite_hash() -> str:
    """The sha256 of the check suite itself (every file under image_checks/, by name and content):
    evidence names the suite it came from, so a result of another suite is never taken for this one."""
    files = sorted(p for p in CHECKS.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return fixplan.sha256_bytes(b"".join(f"{p.relative_to(CHECKS)}\0".encode() + fixplan.sha256_bytes(p.read_bytes())
                                         .encode() + b"\n" for p in files))


def evidence_path(image_id: str) -> Path:
    return cache_dir() / "evidence" / image_id.replace("sha256:", "") / "image-checks.json"


# SIGTERM or Ctrl-C: the checks' pytest group is killed, the container is removed by id (containers.made),
# and every container a check started is found by this run's label.
@signals.interruptible()
def run(loaded: LoadedRecipe, image: str, base: render.Base, dry_run: bool = False) -> Result | None:
    if dry_run:
        print(f"docker run -d --network none --entrypoint sleep {image} infinity")
        print(f"{sys.executable} -m pytest {CHECKS} --hosts=docker://<container> --cookbook-expect=<file>")
        print("docker rm -f <container>")
        return None
    engine.require_daemon()
    found = engine.inspect(image)
    image_id = found["Id"]
    expect = expectations(expected_context(loaded, base, found["Config"]["Labels"] or {}), image)
    run_id = uuid.uuid4().hex
    labels = {Label.IMAGE_CHECK: loaded.id, Label.RECIPE: loaded.id, RUN_LABEL: run_id}
    # By id, not by name: the name may be re-pointed meanwhile, and the evidence is filed under this id.
    args = containers.argv("run", image_id, ["infinity"], role="image-check", labels=labels,
                           options=["--detach", "--network=none", "--entrypoint=sleep"])
    try:
        with containers.made(args, what=f"the image-check container of {image} did not start",
                             refused=CheckFailure) as cid, tempfile.TemporaryDirectory(prefix="cookbook-test.") as tmp:
            expect_file = Path(tmp) / "expect.json"
            expect_file.write_text(json.dumps(expect, indent=2))
            report_file = Path(tmp) / "report.json"
            started = time.time()
            say(f"checking {image} ({image_id[:19]}) for recipe {loaded.id} in container {cid[:12]}")
            args = [str(CHECKS), f"--hosts=docker://{cid}", f"--cookbook-expect={expect_file}",
                    f"--cookbook-report={report_file}", "-p", "no:cacheprovider", "-c", str(CHECKS / "pytest.ini"),
                    "--rootdir", str(CHECKS), "-rfEs"]
            # The checks' own docker calls use the client the cookbook chose (engine.py); testinfra's
            # docker backend calls `docker` from PATH, which only needs `exec`.
            # Its docker_run imports this checkout's cookbook (host/containers.py), wherever the task runs from.
            env = {**engine.client().env(), "COOKBOOK_DOCKER_CLI": engine.client().path, "COOKBOOK_CHECK_RUN": run_id,
                   "COOKBOOK_DOCKER": engine.client().path,
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
            proc = signals.run([sys.executable, "-m", "pytest", *args], env=env)
            checks = json.loads(report_file.read_text()) if report_file.is_file() else []
    finally:
        sweep(run_id)  # by label: any container a check started and its killed process left
    report = {
        "kind": "image-checks",
        "image": image,
        "image_id": image_id,
        "recipe": loaded.id,
        "recipe_hash": loaded.hash,
        "standin": base.standin,
        "suite_sha256": suite_hash(),
        "revision": steps.revision(),  # the checkout whose suite and expectations judged the image
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started, 2),
        "pytest_exit": proc.returncode,
        "passed": proc.returncode == 0 and bool(checks) and all(c["outcome"] != "failed" for c in checks),
        "checks": checks,
    }
    path = evidence_path(image_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = path.with_suffix(".tmp")
    tmp_path.write_text(json.dumps(report, indent=2) + "\n")
    tmp_path.replace(path)
    say(f"evidence: {path}")
    return Result(report["passed"], path, report)


def sweep(run_id: str) -> list[str]:
    """Remove, by id, every container this run's checks started that is still there (a check whose
    `docker run --rm` was cut short, or a pytest that was killed, leaves its container running)."""
    return containers.sweep(RUN_LABEL, run_id)


def read_evidence(path: Path) -> dict:
    """An evidence file's JSON object; a truncated or foreign file is a failure to say, not a traceback."""
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CheckFailure(f"the image-check evidence {path} does not read ({exc})",
                           hint="run the image checks again: invoke test --image ...") from None
    if not isinstance(report, dict):
        raise CheckFailure(f"the image-check evidence {path} is not a JSON object",
                           hint="run the image checks again: invoke test --image ...")
    return report


def require_passed(image_id: str) -> dict:
    """For later steps (smoke, publish): the image's passing check result, or a clear refusal."""
    path = evidence_path(image_id)
    if not path.is_file():
        raise CheckFailure(f"image {image_id[:19]} has no image-check result", hint="run: invoke test --image ...")
    report = read_evidence(path)
    if not report.get("passed"):
        raise CheckFailure(f"image {image_id[:19]} failed its image checks ({path})")
    return report
