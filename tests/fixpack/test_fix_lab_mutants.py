"""The pack's serving test (cookbook/fixpack/lab/test_pack_serving.py) can fail: on a patched tree with one of
gdn-prefix-cache's guarantees taken out again (cookbook/fixpack/lab/_mutants.py), the conv state not restored on a
hit, new pages and slots not zeroed, or the checkpoints inside a prefill chunk taken one kernel chunk
early, it must fail where the patched tree passes (test_fix_lab.py holds that). The float32 comparison
catches the first and the last; unzeroed pages show as NaN logprobs in its bf16 run.

Serving each mutant costs a run of the serving test (its async case, about a minute on a quiet 2-core
machine), too much for every suite run: those runs are opt-in, COOKBOOK_LAB_MUTANTS=1
(docs/fix-lab.md). That each mutant still lands on the patched tree is checked in every run."""

from __future__ import annotations

import importlib.util
import os

import pytest

from cookbook.fixpack import fix_lab


def _mutants():
    spec = importlib.util.spec_from_file_location("lab_mutants", fix_lab.LAB_TESTS / "_mutants.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mutants = _mutants()


@pytest.fixture(scope="module")
def patched_tree(fix_lab_env, tmp_path_factory):
    return fix_lab.make_tree(tmp_path_factory.mktemp("mutants") / "patched", patched=True)


@pytest.mark.parametrize("name", sorted(mutants.MUTANTS))
def test_each_mutant_lands_on_the_patched_tree(patched_tree, tmp_path, name):
    tree = mutants.lay_out(patched_tree, tmp_path / name, name)
    for rel, old, new in mutants.MUTANTS[name]:
        assert new in (tree / rel).read_text() and old not in (tree / rel).read_text()


def test_a_mutant_whose_text_is_gone_is_refused(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\nx = 1\n")
    (tmp_path / "b.py").write_text("y = 1\n")
    edits = [("b.py", "y = 1\n", "y = 2\n"), ("a.py", "x = 1\n", "x = 2\n")]
    with pytest.raises(mutants.MutantError, match="2 times"):
        mutants.apply(tmp_path, "test", edits)
    assert (tmp_path / "b.py").read_text() == "y = 1\n"  # nothing written before every edit is found
    with pytest.raises(mutants.MutantError, match="0 times"):
        mutants.apply(tmp_path, "test", [("b.py", "z = 1\n", "z = 2\n")])


@pytest.mark.skipif(os.environ.get("COOKBOOK_LAB_MUTANTS") != "1",
                    reason="a serving run per mutant: opt in with COOKBOOK_LAB_MUTANTS=1")
@pytest.mark.parametrize("name", sorted(mutants.MUTANTS))
def test_the_serving_test_fails_on_each_mutant_of_the_pack(patched_tree, tmp_path, name):
    tree = mutants.lay_out(patched_tree, tmp_path / name, name)
    run = fix_lab.run(tree, ["test_pack_serving.py"], extra=["-k", "async"])
    assert run.outcomes, run.output[-3000:]
    failed = sorted(node for node, outcome in run.outcomes.items() if outcome == "failed")
    assert failed, f"the serving test passed on mutant {name}: {run.outcomes}"
