"""inimage/selection.py: which fixes a run applies, and the refusals of a selection (requirements, cycles,
unknown names, env guards, the HPU mode), each leaving the tree untouched."""

import pytest

from .tree import GDN_ENV, ORDER, PRISTINE, RUNNER, refused


def test_requirement_not_in_pack_refused(cb):
    del cb.fixes["hybrid-decode-pad"]
    cb.fixes["rope-cpu-cache"]["edits"] = [("vllm_gaudi", RUNNER, "self.rope_cache = None", "self.rope_cache = {}")]
    cb.write_pack()
    before = cb.snapshot()
    result = cb.apply("gdn-prefix-cache", env=GDN_ENV)
    refused(cb, before, result, "gdn-prefix-cache requires hybrid-decode-pad, which is not in this pack")


def test_requirement_later_in_order_refused(cb):
    cb.edit_pack(lambda p: p["fixes"]["hybrid-decode-pad"].update(requires=["rope-cpu-cache"]))
    before = cb.snapshot()
    result = cb.apply()
    refused(cb, before, result, "hybrid-decode-pad requires rope-cpu-cache, which comes later in the order")


def test_requires_cycle_refused(cb):
    cb.edit_pack(lambda p: p["fixes"]["hybrid-decode-pad"].update(requires=["gdn-prefix-cache"]))
    before = cb.snapshot()
    result = cb.apply("gdn-prefix-cache", env=GDN_ENV)
    refused(cb, before, result, "requires cycle: hybrid-decode-pad -> gdn-prefix-cache -> hybrid-decode-pad")


def test_unknown_name_lists_known_names(cb):
    before = cb.snapshot()
    result = cb.apply("no-such-fix")
    refused(cb, before, result, "unknown fix no-such-fix for profile v0.26.0", "known: " + ", ".join(ORDER))


def test_named_fix_not_in_pack_refused(cb):
    before = cb.snapshot()
    result = cb.apply("whitespace-free-forced-tool-calls")
    refused(cb, before, result, "whitespace-free-forced-tool-calls: in profile v0.26.0's order but not in this pack")


@pytest.mark.parametrize(
    ("env", "found"), [({}, "VLLM_COMPACT_GDN unset"), ({"VLLM_COMPACT_GDN": "0"}, "VLLM_COMPACT_GDN=0")]
)
def test_env_guard_refused(cb, env, found):
    before = cb.snapshot()
    result = cb.apply("gdn-prefix-cache", env=env)
    refused(cb, before, result, f"gdn-prefix-cache needs VLLM_COMPACT_GDN=1, found {found}")


def test_lazy_mode_skips_and_records_compile_only_profile_fix(cb):
    result = cb.apply(env={"PT_HPU_LAZY_MODE": "1"})
    assert result.code == 0, result.out
    assert cb.read("vllm", "v1/sample/sampler.py") == PRISTINE[("vllm", "v1/sample/sampler.py")]
    record = cb.record_json()
    assert record["fixes"] == ["hybrid-decode-pad", "rope-cpu-cache"]
    assert "lazy mode" in record["skipped"]["sampling-rows-refresh"]
    assert "skipped sampling-rows-refresh" in result.out


def test_lazy_mode_refuses_named_compile_only_opt_in(cb):
    before = cb.snapshot()
    result = cb.apply("strict-think-end", env={"PT_HPU_LAZY_MODE": "1"})
    refused(cb, before, result, "strict-think-end runs only in compile mode, but this build is lazy mode")
