"""inimage/commands.py: applying a profile's fixes in order, a second run, --dry-run, --check against the
record, --revert and --list, run as the image runs them on a synthetic release (tests/inimage/tree.py)."""

import pytest

from .tree import ALL_PACKED, GDN_ENV, ORDER, PRISTINE, PROFILE, RUNNER


def test_applies_in_profile_order_two_fixes_on_one_file(cb):
    result = cb.apply()
    assert result.code == 0, result.out
    runner = cb.read("vllm_gaudi", RUNNER)
    assert "self.pad_id = -1" in runner and "self.rope_cache = {}" in runner
    record = cb.record_json()
    assert record["fixes"] == ["sampling-rows-refresh", "hybrid-decode-pad", "rope-cpu-cache"]
    [entry] = [f for f in record["files"] if f["path"] == RUNNER]
    assert entry["fixes"] == ["hybrid-decode-pad", "rope-cpu-cache"]
    assert "applied 3 fixes to 2 files" in result.out


def test_opt_ins_apply_only_when_named(cb):
    assert cb.apply().code == 0
    assert cb.read("vllm_gaudi", "ops/hpu_gdn.py") == PRISTINE[("vllm_gaudi", "ops/hpu_gdn.py")]
    assert cb.read("vllm", "reasoning/think.py") == PRISTINE[("vllm", "reasoning/think.py")]
    assert "strict-think-end" not in cb.record_json()["fixes"]

    assert cb.run("--revert").code == 0
    result = cb.apply("strict-think-end", "hybrid-decode-pad")  # naming a profile fix is allowed
    assert result.code == 0, result.out
    assert 'text.rstrip() == "</think>"' in cb.read("vllm", "reasoning/think.py")
    assert "gdn-prefix-cache" not in cb.record_json()["fixes"]
    assert cb.record_json()["fixes"][-1] == "strict-think-end"


def test_all_fixes_give_the_expected_tree(cb):
    result = cb.apply("gdn-prefix-cache", "strict-think-end", env=GDN_ENV)
    assert result.code == 0, result.out
    for (package, path), text in cb.expected.items():
        assert cb.read(package, path) == text, path
    assert cb.record_json()["fixes"] == ALL_PACKED


def test_second_run_is_already_applied_and_changes_nothing(cb):
    assert cb.apply().code == 0
    before, mtimes, record_mtime = cb.snapshot(), cb.mtimes(), cb.record.stat().st_mtime_ns
    result = cb.apply()
    assert result.code == 0, result.out
    assert "already applied: 3 fixes, 2 files match the record" in result.out
    assert cb.snapshot() == before and cb.mtimes() == mtimes
    assert cb.record.stat().st_mtime_ns == record_mtime


def test_different_selection_on_applied_tree_refused(cb):
    assert cb.apply().code == 0
    before, record = cb.snapshot(), cb.record.read_bytes()
    result = cb.apply("gdn-prefix-cache", env=GDN_ENV)
    assert result.code == 1
    assert "but this run selects profile v0.26.0 with" in result.out and "revert first" in result.out
    assert cb.snapshot() == before and cb.record.read_bytes() == record


def test_edited_tree_with_record_refused(cb):
    assert cb.apply().code == 0
    cb.write("vllm", "v1/sample/sampler.py", "edited\n")
    before = cb.snapshot()
    result = cb.apply()
    assert result.code == 1
    assert "tree changed since" in result.out and "vllm/v1/sample/sampler.py" in result.out
    assert cb.snapshot() == before


def test_dry_run_changes_nothing(cb):
    before, mtimes = cb.snapshot(), cb.mtimes()
    result = cb.apply("--dry-run")
    assert result.code == 0, result.out
    assert f"would change vllm_gaudi/{RUNNER} (hybrid-decode-pad, rope-cpu-cache)" in result.out
    assert cb.snapshot() == before and cb.mtimes() == mtimes
    assert not cb.record.exists()


def test_check_ok(cb):
    assert cb.apply("gdn-prefix-cache", env=GDN_ENV).code == 0
    result = cb.run("--check", env=GDN_ENV)
    assert result.code == 0, result.out
    assert result.out == "apply_all: ok: 4 fixes, 3 files match the record (profile v0.26.0)\n"


def test_check_catches_edited_and_missing_files(cb):
    assert cb.apply().code == 0
    cb.write("vllm_gaudi", RUNNER, "edited\n")
    (cb.site / "vllm" / "v1" / "sample" / "sampler.py").unlink()
    result = cb.run("--check")
    assert result.code == 1
    assert f"vllm_gaudi/{RUNNER} (patched by hybrid-decode-pad, rope-cpu-cache) was edited" in result.out
    assert "vllm/v1/sample/sampler.py (patched by sampling-rows-refresh) is missing" in result.out


def test_check_without_record(cb):
    result = cb.run("--check")
    assert result.code == 1
    assert f"no fix record at {cb.record}: this image was not built by the cookbook" in result.out


@pytest.mark.parametrize(
    ("env", "found"), [({"VLLM_COMPACT_GDN": "0"}, "VLLM_COMPACT_GDN=0"), ({}, "VLLM_COMPACT_GDN unset")]
)
def test_check_refuses_wrong_env(cb, env, found):
    assert cb.apply("gdn-prefix-cache", env=GDN_ENV).code == 0
    result = cb.run("--check", env=env)
    assert result.code == 1
    assert f"need VLLM_COMPACT_GDN=1, found {found}" in result.out
    assert "-e VLLM_COMPACT_GDN=1" in result.out


def test_check_refuses_the_other_mode(cb):
    assert cb.apply().code == 0  # built in compile mode
    result = cb.run("--check", env={"PT_HPU_LAZY_MODE": "1"})
    assert result.code == 1
    assert "applied for compile mode, but PT_HPU_LAZY_MODE says lazy mode" in result.out
    assert cb.run("--check", env={"PT_HPU_LAZY_MODE": "0"}).code == 0


def test_revert_restores_byte_identical_tree(cb):
    pristine = cb.snapshot()
    assert cb.apply("gdn-prefix-cache", "strict-think-end", env=GDN_ENV).code == 0
    assert cb.snapshot() != pristine
    applied = cb.snapshot()
    dry = cb.run("--revert", "--dry-run")
    assert dry.code == 0 and "would revert 5 fixes" in dry.out
    assert cb.snapshot() == applied and cb.record.exists()
    result = cb.run("--revert")
    assert result.code == 0, result.out
    assert "reverted 5 fixes: 4 files restored" in result.out
    assert cb.snapshot() == pristine
    assert not cb.record.exists()


def test_revert_refuses_edited_tree(cb):
    assert cb.apply().code == 0
    cb.write("vllm_gaudi", RUNNER, cb.read("vllm_gaudi", RUNNER) + "# local edit\n")
    before = cb.snapshot()
    result = cb.run("--revert")
    assert result.code == 1
    assert "cannot revert" in result.out and f"vllm_gaudi/{RUNNER}" in result.out
    assert cb.snapshot() == before and cb.record.exists()


def test_list(cb):
    result = cb.run("--list", "--profile", PROFILE)
    assert result.code == 0, result.out
    lines = result.out.splitlines()
    assert lines[0] == "apply_all: profile v0.26.0 (gaudi_sw 1.24.1): 7 fixes, 5 in this pack"
    rows = {line.split()[1]: line.split()[2:] for line in lines[1:]}
    assert list(rows) == ORDER
    assert rows["prompt-order"] == ["profile", "not", "in", "this", "pack"]
    assert rows["gdn-prefix-cache"][:3] == ["opt-in", "in", "pack"]
    assert "gdn-prefix-cache (test fix)" in result.out
    assert rows["whitespace-free-forced-tool-calls"] == ["opt-in", "not", "in", "this", "pack"]
