"""Fixtures for the image checks: the testinfra host (a container of the image, entrypoint
overridden), what the recipe expects, and the image's own configuration from the engine."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from cookbook.host.names import Label

DOCKER = os.environ.get("COOKBOOK_DOCKER_CLI", "docker")
OUTCOMES: list[dict] = []


def pytest_addoption(parser):
    parser.addoption("--cookbook-expect", help="JSON file of what the image must show")
    parser.addoption("--cookbook-report", help="where to write the per-check outcomes as JSON")


def _expect(config) -> dict:
    path = config.getoption("--cookbook-expect")
    if not path:
        raise pytest.UsageError("image checks run through `invoke test`, which passes --cookbook-expect")
    with open(path) as f:
        return json.load(f)


def pytest_report_header(config):
    e = _expect(config)
    kind = "stand-in base" if e["standin"] else "vllm-gaudi base"
    return [f"cookbook image checks: recipe {e['recipe']} ({e['recipe_hash'][:12]}), image {e['image']} ({kind})"]


def pytest_collection_modifyitems(config, items):
    if _expect(config)["standin"]:
        skip = pytest.mark.skip(reason="needs the real vllm-gaudi base (Gaudi software); this is a stand-in image")
        for item in items:
            if "gaudi" in item.keywords:
                item.add_marker(skip)


def pytest_runtest_logreport(report):
    # One row per check: its call, or the setup that skipped or broke it.
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        OUTCOMES.append({"check": _check_name(report.nodeid), "outcome": report.outcome,
                         "seconds": round(report.duration, 3),
                         "message": str(report.longrepr)[-600:] if report.outcome != "passed" else ""})


def _check_name(nodeid: str) -> str:
    """The check's id without testinfra's host parameter (the container id changes every run)."""
    name = re.sub(r"docker://[0-9a-f]+-?", "", nodeid)
    return name.replace("[]", "")


def pytest_sessionfinish(session, exitstatus):
    path = session.config.getoption("--cookbook-report")
    if path:
        with open(path, "w") as f:
            json.dump(OUTCOMES, f, indent=2)


@pytest.fixture(scope="session")
def expect(pytestconfig) -> dict:
    return _expect(pytestconfig)


@pytest.fixture(scope="session")
def image_config(expect) -> dict:
    out = subprocess.run([DOCKER, "image", "inspect", expect["image"]], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)[0]


@pytest.fixture(scope="session")
def image_env(image_config) -> dict:
    return dict(item.split("=", 1) for item in image_config["Config"]["Env"] or [])


@pytest.fixture(scope="session")
def labels(image_config) -> dict:
    return image_config["Config"]["Labels"] or {}


@pytest.fixture(scope="session")
def history(expect) -> list[str]:
    out = subprocess.run([DOCKER, "history", "--no-trunc", "--format", "{{.CreatedBy}}", expect["image"]],
                         capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


RUN_TIMEOUT_S = 120
# `invoke test` names its run; every container a check starts carries it, so what a killed check leaves
# behind is found by label (imagecheck.sweep) even when this process is gone.
RUN_LABEL = Label.CHECK_RUN


def docker_run(image: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`docker run --rm` of the image, labelled, through the cookbook's one container lifecycle: when the
    time is up only the client is killed, so the container (still running) is removed by its id."""
    from cookbook.host import containers

    run = os.environ.get("COOKBOOK_CHECK_RUN", "none")
    options = ["--rm", "--network=none", *(f"--env={k}={v}" for k, v in (env or {}).items())]
    argv = containers.argv("run", image, args, role="image-check", labels={RUN_LABEL: run}, options=options)
    return containers.attached(argv, timeout=RUN_TIMEOUT_S, text=True)
