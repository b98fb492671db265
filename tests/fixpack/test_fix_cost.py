"""What the pack costs on the hot path (cookbook/fixpack/fix_cost.py, cookbook/fixpack/lab/_hostsync.py): the
release's
engine on the CPU serves the same 8 requests on the pristine and on the patched tree, and the patched
tree makes no more host synchronisations per steady decode step than the pristine one, call site by
call site, unless a fix.yaml declares the site in `host_syncs` with its cost and reason."""

from __future__ import annotations

import pytest

from cookbook.fixpack import fix_cost
from cookbook.recipe import fixes

RUNNER = "vllm_gaudi/v1/worker/hpu_model_runner.py"


def figures(steps: int = 22, **sites: dict[str, float]) -> dict:
    """Counter figures: {function name in the runner: {kind: calls per step}}."""
    return {"steps": steps, "syncs_per_step": 0.0, "sites": {
        f"{RUNNER}::{fn}::code": {"site": f"{RUNNER}:1 {fn}: code", "function": f"{RUNNER}::{fn}", "kinds": kinds}
        for fn, kinds in sites.items()}}


SAME = {"get_output": {"event.synchronize()": 1.0}, "__init__": {"d2h async": 1.0}}


@pytest.mark.parametrize("patched, declared, problems", [
    (SAME, {}, 0),
    (SAME | {"_gdn_copy_states": {"h2d async": 1.1}}, {}, 0),                      # asynchronous: no sync
    (SAME | {"_gdn_copy_states": {"h2d torch.tensor(device=hpu)": 0.36}}, {}, 1),  # the first gdn-prefix-cache
    (SAME | {"_gdn_copy_states": {"h2d torch.tensor(device=hpu)": 0.36}},
     {f"{RUNNER}::_gdn_copy_states": "gdn-prefix-cache"}, 0),                     # declared in its fix.yaml
    (SAME | {"execute_model": {"item()": 1.0}}, {}, 1),                            # an injected .item()
    (SAME | {"get_output": {"event.synchronize()": 2.0}}, {}, 1),                  # one more at a known site
    ({"get_output": {"event.synchronize()": 0.5}}, {}, 0),                         # fewer is fine
    (SAME | {"forward": {"mixed host/device operands of mul_": 1.0}}, {}, 0),       # a lab artifact, no sync
])
def test_the_patched_tree_may_not_add_a_host_sync_no_fix_declares(patched, declared, problems):
    assert len(fix_cost.Cost(figures(**SAME), figures(**patched), declared).problems) == problems


def test_a_run_too_short_or_of_another_workload_compares_nothing():
    assert fix_cost.Cost(figures(3, **SAME), figures(3, **SAME)).problems
    assert fix_cost.Cost(figures(22, **SAME), figures(21, **SAME)).problems


def test_a_function_keeps_its_count_when_a_fix_edits_the_line():
    a = figures(**SAME)
    b = figures(**SAME)
    site = b["sites"].pop(f"{RUNNER}::get_output::code")
    b["sites"][f"{RUNNER}::get_output::edited code"] = site
    assert not fix_cost.Cost(a, b).problems


def test_a_fix_declares_a_host_sync_with_its_site_cost_and_reason(tmp_path):
    spec = fixes.HostSync(site=f"{RUNNER}::_gdn_copy_states", cost="one blocking copy of 4 int64 per checkpoint",
                          why="the index is known on the host only after the step's forwards")
    assert spec.site.endswith("::_gdn_copy_states")
    with pytest.raises(ValueError):
        fixes.HostSync(site="hpu_model_runner.py:1718", cost="x", why="y")
    # The one the pack declares: penalties and bad words under async scheduling.
    assert fix_cost.declared_host_syncs() == {
        "vllm_gaudi/v1/worker/hpu_input_batch.py::update_async_output_token_ids": "async-penalty-tokens"}


@pytest.fixture(scope="module")
def cost(fix_lab_env, tmp_path_factory):
    return fix_cost.cost(tmp_path_factory.mktemp("cost"))


def test_the_pack_adds_no_host_sync_to_a_steady_decode_step(cost):
    assert not cost.problems, "\n".join(fix_cost.describe_cost(cost))


def test_the_counter_saw_the_steps_and_the_syncs_it_must_see(cost):
    # The run is alive: a full decode batch for the whole window, and on both trees the step's own wait
    # for its sampled tokens (async scheduling) and the logprobs request's copy to the host.
    for fig in (cost.pristine, cost.patched):
        assert fig["steps"] >= 16 and fig["batch"] == [8]
        rates = fix_cost.sync_rates(fig)
        assert rates[(f"{RUNNER}::get_output", "event.synchronize()")] == 1.0
        assert rates[("vllm/v1/outputs.py::tolists", "d2h cpu()")] == 3.0


def test_a_workload_the_counter_has_not_is_refused_before_any_tree():
    from ..test_tasks import invoke

    out = invoke("fixes.cost", "--workload", "nope")
    assert out.returncode == 2 and "--workload 'nope' is not one of the counter's" in out.stderr
    assert "serving" in out.stderr and "laying out" not in out.stderr + out.stdout and "Traceback" not in out.stderr
