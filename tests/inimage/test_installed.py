"""inimage/installed.py: the installed packages (version, commit) and every target file (the pristine
release file's sha256) checked before anything changes."""

import shutil

from .tree import PRISTINE, RUNNER, refused, sha


def test_version_mismatch_refused(cb):
    cb.set_version("vllm_gaudi", "0.25.1")
    before = cb.snapshot()
    result = cb.apply()
    refused(cb, before, result, "vllm_gaudi: installed version 0.25.1, profile v0.26.0 is for 0.26.0")


def test_unaccepted_commit_refused(cb):
    cb.set_commit("vllm", "gdeadbeef0")
    before = cb.snapshot()
    result = cb.apply()
    refused(cb, before, result, "vllm: installed commit deadbeef0", "nor an accepted one (ffd46bfab)")


def test_accepted_commit_reported_and_applied(cb):
    result = cb.apply("--quiet")
    assert result.code == 0, result.out
    assert "note: vllm: installed commit ffd46bfab is not the profile's 568afb3a1380," in result.out
    assert "accepted: the PyPI wheel's build revision" in result.out
    assert "self.pad_id = -1" in cb.read("vllm_gaudi", RUNNER)


def test_missing_commit_is_not_recorded_but_fine(cb):
    cb.write("vllm_gaudi", "_version.py", "__version__ = version = '0.26.0'\n")
    result = cb.apply()
    assert result.code == 0, result.out
    assert cb.record_json()["packages"]["vllm_gaudi"]["commit"] is None


def test_wrong_file_hashes_all_listed_together(cb):
    edited, edited_too = "edited\n", "edited too\n"
    cb.write("vllm", "v1/sample/sampler.py", edited)
    cb.write("vllm_gaudi", RUNNER, edited_too)
    cb.set_version("vllm", "0.26.1")
    before = cb.snapshot()
    result = cb.apply()
    refused(
        cb,
        before,
        result,
        "(3 problems)",
        "vllm: installed version 0.26.1",
        f"vllm/v1/sample/sampler.py (target of sampling-rows-refresh): sha256 {sha(edited)}, "
        f"the pristine release file has {sha(PRISTINE[('vllm', 'v1/sample/sampler.py')])}",
        f"vllm_gaudi/{RUNNER} (target of hybrid-decode-pad, rope-cpu-cache): sha256 {sha(edited_too)}",
    )


def test_missing_target_file_refused(cb):
    (cb.site / "vllm" / "v1" / "sample" / "sampler.py").unlink()
    before = cb.snapshot()
    result = cb.apply()
    refused(cb, before, result, "vllm/v1/sample/sampler.py (target of sampling-rows-refresh) is missing")


def test_missing_package_refused(cb):
    shutil.rmtree(cb.site / "vllm")
    before = cb.snapshot()
    result = cb.apply()
    refused(cb, before, result, "package vllm is not installed in")
