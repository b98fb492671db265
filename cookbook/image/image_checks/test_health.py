"""The healthcheck and the exposed port: declared, and the probe really answers."""

import pytest


def test_exposed_port(image_config, expect):
    assert f"{expect['port']}/tcp" in (image_config["Config"]["ExposedPorts"] or {})


def test_healthcheck_declared(image_config, expect):
    test = image_config["Config"]["Healthcheck"]["Test"]
    assert test[0] == "CMD" and test[1:] == ["python3", expect["paths"]["entrypoint"], "--health"]


@pytest.fixture
def health_server(host, expect):
    """A stand-in for vLLM's /health on the recipe's port, inside the container."""
    path = expect["health_path"].strip("/")
    host.run(f"mkdir -p /tmp/health-www && touch /tmp/health-www/{path}")
    host.run(f"nohup python3 -m http.server {expect['port']} --bind 127.0.0.1 -d /tmp/health-www "
             ">/tmp/health.log 2>&1 & echo $! > /tmp/health.pid")
    probe = f"python3 -c \"import urllib.request as u; u.urlopen('http://127.0.0.1:{expect['port']}/')\""
    ready = host.run(f"for i in $(seq 50); do {probe} 2>/dev/null && exit 0; sleep 0.1; done; exit 1")
    assert ready.rc == 0, host.run("cat /tmp/health.log").stdout
    yield
    host.run("kill $(cat /tmp/health.pid)")


def test_probe_fails_without_a_server(host, expect):
    assert host.run(f"python3 {expect['paths']['entrypoint']} --health").rc == 1


def test_probe_passes_with_a_server(host, health_server, expect):
    out = host.run(f"python3 {expect['paths']['entrypoint']} --health")
    assert out.rc == 0, out.stderr
