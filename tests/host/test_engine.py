"""The Docker engine: which client builds, what a missing daemon says, the engine script."""

import subprocess

import pytest

from cookbook.host import engine
from cookbook.host.errors import EngineError
from cookbook.host.paths import ROOT

CLIENTS = [
    # (case, [(path, version, has buildx)], chosen path, buildkit)
    ("Debian's 20.10 client builds with BuildKit by itself",
     [("/usr/bin/docker", "20.10.24+dfsg1", False)], "/usr/bin/docker", True),
    ("a newer client without buildx first on PATH gives way to Debian's",
     [("/usr/local/bin/docker", "28.2.2", False), ("/usr/bin/docker", "20.10.24+dfsg1", False)],
     "/usr/bin/docker", True),
    ("a newer client with buildx is used", [("/usr/local/bin/docker", "28.2.2", True)], "/usr/local/bin/docker", True),
    ("only a newer client without buildx: the legacy builder", [("/usr/local/bin/docker", "28.2.2", False)],
     "/usr/local/bin/docker", False),
]


@pytest.mark.parametrize("case,found,path,buildkit", CLIENTS, ids=[c[0] for c in CLIENTS])
def test_client_choice(case, found, path, buildkit):
    chosen = engine.choose(found)
    assert (chosen.path, chosen.buildkit) == (path, buildkit)
    assert chosen.env()["DOCKER_BUILDKIT"] == ("1" if buildkit else "0")


@pytest.mark.parametrize("version,builtin", [("20.10.24+dfsg1", True), ("19.03.1", True), ("23.0.0", False),
                                             ("28.2.2", False), ("unknown", False)])
def test_builtin_buildkit(version, builtin):
    assert engine.builtin_buildkit(version) is builtin


def test_no_daemon_says_how_to_start_one(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    engine.client.cache_clear()
    try:
        with pytest.raises(EngineError) as err:
            engine.require_daemon()
        assert "no Docker daemon answers" in str(err.value) and "docker-engine.sh" in str(err.value)
    finally:
        engine.client.cache_clear()


@pytest.mark.docker
def test_engine_script_is_idempotent(docker_engine):
    for _ in range(2):
        out = subprocess.run(["bash", str(ROOT / "scripts" / "docker-engine.sh")], capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0 and "daemon answers" in out.stderr
