"""The Python version, and vllm and vllm_gaudi versions from package metadata (never imported here)."""

import pytest

METADATA = "python3 -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' {}"


def test_python_version(host, expect):
    out = host.run("python3 -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])'")
    assert out.rc == 0 and out.stdout.strip() == expect["python"]


@pytest.mark.parametrize("dist", ["vllm", "vllm_gaudi"])
def test_package_versions(host, expect, dist):
    out = host.run(METADATA.format(dist))
    assert out.rc == 0, out.stderr
    assert out.stdout.strip() == expect["versions"][dist]


def test_packages_where_the_base_keeps_them(host, expect):
    for package in ("vllm", "vllm_gaudi"):
        assert host.file(f"{expect['site_packages']}/{package}/__init__.py").exists


@pytest.mark.gaudi
def test_vllm_gaudi_imports(host):
    out = host.run("python3 -c 'import vllm_gaudi, vllm; print(vllm.__version__)'")
    assert out.rc == 0, out.stderr
