"""The stand-in base: a real Debian rootfs from Debian's packages, and its refusals."""

import shutil
import tarfile

import pytest

from cookbook.host import upstream
from cookbook.host.errors import UpstreamError
from cookbook.image import standin

from ..conftest import unavailable


def test_refuses_an_empty_cache_with_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("COOKBOOK_CACHE", str(tmp_path))
    with pytest.raises(UpstreamError) as err:
        standin.ensure(upstream.Pins("v0.26.0", "b" * 40, "0.26.0"), "v0.26.0")
    assert "invoke upstream.fetch" in str(err.value)


def test_standin_images_say_so():
    base = standin.base("v0.26.0")
    assert base.standin and base.image == "gaudi-cookbook/standin-base:v0.26.0"
    assert base.site_packages == "/usr/local/lib/python3.11/dist-packages"


METADATA = ("Name: vllm\nRequires-Dist: xgrammar<1.0.0,>=0.2.1; platform_machine == \"x86_64\"\n"
            "Requires-Dist: llguidance<1.8.0,>=1.7.0\n")


@pytest.mark.parametrize("dists, recorded", [
    ({"xgrammar": [">=0.2.4,<1.0"]}, {"xgrammar": "0.2.4"}),           # the fix's floor is above vLLM's
    ({"xgrammar": [">=0.1,<1.0"]}, {"xgrammar": "0.2.1"}),             # vLLM's floor is above the fix's
    ({"llguidance": [">=1.7.2", "<1.7.9"]}, {"llguidance": "1.7.2"}),  # two fixes ask for one dist
    ({"jinja2": [">=3.1"]}, {"jinja2": "3.1"}),                        # a dist vLLM does not require
    ({}, {}),
])
def test_the_dists_the_fixes_require_are_recorded_at_the_lowest_version_all_accept(tmp_path, dists, recorded):
    assert standin.dependency_records(dists, METADATA, tmp_path) == recorded
    for dist, version in recorded.items():
        meta = (tmp_path / f"{dist}-{version}.dist-info" / "METADATA").read_text()
        assert f"Name: {dist}\nVersion: {version}\n" in meta


def test_a_dist_no_version_fits_is_refused(tmp_path):
    from cookbook.host.errors import BuildError

    with pytest.raises(BuildError, match="no version of xgrammar fits"):
        standin.dependency_records({"xgrammar": [">=1.2"]}, METADATA, tmp_path)


def test_the_release_pack_asks_the_stand_in_for_xgrammar():
    assert standin.pack_dists("v0.26.0") == {"xgrammar": [">=0.2.4,<1.0"]}


def test_vllm_gaudi_version_file_as_setuptools_scm_writes_it():
    text = standin._scm_version_file("0.26.0", "b059f9c95d6a07f19eb00aa06d1ec8b87b296437")
    assert "__version__ = version = '0.26.0'" in text and "commit_id = 'gb059f9c95'" in text


@pytest.mark.slow  # a real mmdebstrap run, about half a minute
def test_rootfs_is_a_debian_tarball_with_python_and_git(tmp_path, monkeypatch):
    """Really runs mmdebstrap into an empty cache (about half a minute, Debian's package mirror)."""
    if shutil.which("mmdebstrap") is None:
        unavailable("mmdebstrap is missing (apt-get install mmdebstrap)")
    monkeypatch.setenv("COOKBOOK_CACHE", str(tmp_path))
    tar = standin.ensure_rootfs()
    assert tar == tmp_path / "standin" / "rootfs-bookworm.tar" and tarfile.is_tarfile(tar)
    with tarfile.open(tar) as t:
        names = set(t.getnames())
    assert {"./usr/bin/python3", "./usr/bin/git", "./usr/bin/patch"} <= names
    assert [p.name for p in tar.parent.iterdir()] == ["rootfs-bookworm.tar"]  # no partial left behind
    assert standin.ensure_rootfs() == tar  # cached: a second call does nothing


def test_a_failed_rootfs_build_leaves_nothing_and_says_why(tmp_path, monkeypatch):
    """The one rootfs builder (stand-in and CPU base): an mmdebstrap that writes half a tarball and fails
    leaves neither tarball nor partial, and its last words are in the error."""
    from cookbook.host.errors import BuildError

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mmdebstrap").write_text('#!/bin/sh\nfor a; do out=$prev; prev=$a; done\n'
                                        'echo half > "$out"\necho "E: mirror unreachable" >&2\nexit 1\n')
    (bin_dir / "mmdebstrap").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    tar = tmp_path / "cache" / "rootfs-bookworm-x.tar"
    with pytest.raises(BuildError, match="mmdebstrap failed: E: mirror unreachable"):
        standin.build_rootfs(tar, ["python3"], "test rootfs")
    assert list(tar.parent.iterdir()) == []
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(BuildError, match="mmdebstrap is not installed"):
        standin.build_rootfs(tar, ["python3"], "test rootfs")


def test_the_vllm_script_runs_vllms_cli_and_only_as_main(tmp_path):
    """The one `vllm` console script (stand-in and CPU base): it calls vLLM's CLI main and exits with its
    code, and importing it again (as spawn imports __main__) runs nothing."""
    import subprocess
    import sys

    cli = tmp_path / "lib" / "vllm" / "entrypoints" / "cli"
    cli.mkdir(parents=True)
    (cli / "main.py").write_text("import sys\n\ndef main():\n    print('main', sys.argv[1:])\n    return 7\n")
    standin.write_vllm_script(tmp_path / "bin")
    script = tmp_path / "bin" / "vllm"
    assert script.stat().st_mode & 0o111
    env = {"PYTHONPATH": str(tmp_path / "lib"), "PATH": "/usr/bin:/bin"}
    ran = subprocess.run([sys.executable, str(script), "serve", "m"], env=env, capture_output=True, text=True)
    assert (ran.returncode, ran.stdout) == (7, "main ['serve', 'm']\n"), ran.stderr
    imported = subprocess.run([sys.executable, "-c", f"import runpy; runpy.run_path({str(script)!r}, run_name='x')"],
                              env=env, capture_output=True, text=True)
    assert (imported.returncode, imported.stdout) == (0, ""), imported.stderr
