"""fixes.verify and fixes.new against the real release sources in the upstream cache."""

import hashlib

import pytest

from cookbook.fixpack import fix_new, fix_verify
from cookbook.host.errors import FixError, UsageError
from cookbook.recipe import fixes

from .. import packs

pytestmark = pytest.mark.upstream


@pytest.fixture
def pack(tmp_path, upstream_cache):
    return packs.make(tmp_path)


def statuses(pack):
    return {o.fix: (o.status, o.detail) for o in fix_verify.verify("v0.26.0", pack)}


def test_new_fix_has_real_hashes_and_a_p1_patch(pack, upstream_cache):
    spec = fixes.load_fix("selftest-runner", pack)
    assert spec.targets[0].package == "vllm_gaudi" and list(spec.targets[0].files) == [packs.RUNNER]
    pristine = (upstream_cache[0] / "vllm_gaudi" / packs.RUNNER).read_bytes()
    assert spec.targets[0].files[packs.RUNNER] == hashlib.sha256(pristine).hexdigest()
    patch = (pack / "selftest-runner" / spec.patches[0].file).read_text()
    assert patch.startswith(f"--- a/{packs.RUNNER}\n+++ b/{packs.RUNNER}\n")
    assert "+" + packs.MARK in patch
    assert fixes.load_fix("selftest-request", pack).requires == ["selftest-runner"]


def test_verify_reports_applies_and_not_written(pack):
    got = statuses(pack)
    assert got["selftest-runner"][0] == "applies" and got["selftest-request"][0] == "applies"
    assert got["prompt-order"][0] == "not written"


def test_verify_reports_conflict_with_the_failing_hunk(pack):
    patch = pack / "selftest-request" / "0001-selftest-request.patch"
    text = patch.read_text()
    context = next(line for line in text.splitlines() if line.startswith(" ") and line.strip())
    patch.write_text(text.replace(context, " this line is not in the release", 1))
    fixes.write_index(fixes_dir=pack)
    status, detail = statuses(pack)["selftest-request"]
    assert status == "conflicts"
    assert "patch failed" in detail and packs.REQUEST in detail


def _second_runner_patch(pack, upstream_cache, context_ok=True):
    """A second patch of selftest-runner on the same file, made against the first (its context holds
    the first patch's marker line); with `context_ok` False its context is not in the file."""
    pristine = (upstream_cache[0] / "vllm_gaudi" / packs.RUNNER).read_text()
    first = packs.mark_first_line(pristine)
    second = first.replace(packs.MARK, packs.MARK + "# and a second patch on top of it\n", 1)
    if not context_ok:
        first = first.replace(packs.MARK, "# a line the file never had\n", 1)
        second = second.replace(packs.MARK, "# a line the file never had\n", 1)
    (pack / "selftest-runner" / "0002-on-top.patch").write_text(
        fix_new.unified_diff(packs.RUNNER, first.encode(), second.encode()))
    spec = pack / "selftest-runner" / "fix.yaml"
    text = spec.read_text()
    first_ref = next(line for line in text.splitlines() if "file: " in line and line.strip().endswith(".patch"))
    spec.write_text(text.replace(first_ref, first_ref + "\n- package: vllm_gaudi\n  file: 0002-on-top.patch", 1))
    fixes.write_index(fixes_dir=pack)


@pytest.mark.parametrize("context_ok, status", [(True, "applies"), (False, "conflicts")])
def test_verify_applies_a_fixs_patches_to_one_file_in_order(pack, upstream_cache, context_ok, status):
    _second_runner_patch(pack, upstream_cache, context_ok)
    assert [p.file for p in fixes.load_fix("selftest-runner", pack).patches][1] == "0002-on-top.patch"
    got = statuses(pack)
    assert got["selftest-runner"][0] == status, got["selftest-runner"]
    # the fixes after it are still checked
    assert got["selftest-request"][0] == "applies"


def test_verify_reports_already_upstream(pack, upstream_cache):
    # A patch whose result is the release itself: it adds a line the release already has.
    rel = packs.REQUEST
    pristine = (upstream_cache[1] / "vllm" / rel).read_bytes()
    lines = pristine.splitlines(keepends=True)
    before = b"".join(lines[:5] + lines[6:])
    patch = pack / "selftest-request" / "0001-selftest-request.patch"
    patch.write_text(fix_new.unified_diff(rel, before, pristine))
    fixes.write_index(fixes_dir=pack)
    status, detail = statuses(pack)["selftest-request"]
    assert status == "already upstream", detail


def test_verify_reports_a_wrong_pristine_hash(pack):
    spec = pack / "selftest-runner" / "fix.yaml"
    text = spec.read_text()
    sha = fixes.load_fix("selftest-runner", pack).targets[0].files[packs.RUNNER]
    spec.write_text(text.replace(sha, "f" * 64))
    status, detail = statuses(pack)["selftest-runner"]
    assert status == "target differs" and "ffffffffffff" in detail


def test_new_refuses_a_name_not_in_the_order(pack, tmp_path):
    with pytest.raises(FixError, match="not in profile v0.26.0's order"):
        fix_new.new_fix("no-such", tmp_path, "vllm_gaudi", "v0.26.0", fixes_dir=pack)


def test_new_refuses_an_unedited_copy(pack, tmp_path):
    (tmp_path / "same" / "v1").mkdir(parents=True)
    with pytest.raises(FixError, match="does not differ"):
        fix_new.new_fix("prompt-order", tmp_path / "same", "vllm_gaudi", "v0.26.0", fixes_dir=pack)


def test_new_refuses_a_copy_that_would_undo_an_earlier_fix(pack, tmp_path, upstream_cache):
    # selftest-runner (earlier in the order) marks the runner's first line; a copy made from the
    # pristine release lacks that mark, so its diff would take it out again.
    pristine = (upstream_cache[0] / "vllm_gaudi" / packs.RUNNER).read_text()
    target = tmp_path / "edit" / packs.RUNNER
    target.parent.mkdir(parents=True)
    target.write_text(pristine + "# a later fix\n")
    with pytest.raises(FixError, match="lacks changes of earlier fix.*selftest-runner"):
        fix_new.new_fix("prompt-order", tmp_path / "edit", "vllm_gaudi", "v0.26.0", fixes_dir=pack)


def test_new_from_a_copy_with_the_earlier_fixes_keeps_only_its_own_changes(pack, tmp_path, upstream_cache):
    # A copy of the tree with selftest-runner applied: the runner carries that fix's mark (and
    # nothing of the new fix), another file carries the new fix's change.
    root = upstream_cache[0] / "vllm_gaudi"
    edit = tmp_path / "edit"
    runner = edit / packs.RUNNER
    runner.parent.mkdir(parents=True)
    runner.write_text(packs.mark_first_line((root / packs.RUNNER).read_text()))
    other = "platform.py"
    (edit / other).write_text((root / other).read_text() + "# the new fix\n")
    fix_new.new_fix("prompt-order", edit, "vllm_gaudi", "v0.26.0", title="t", why="w", how="h",
                    upstream=packs.NONE_FOUND, fixes_dir=pack)
    spec = fixes.load_fix("prompt-order", pack)
    assert list(spec.targets[0].files) == [other]
    patch = (pack / "prompt-order" / spec.patches[0].file).read_text()
    assert patch.startswith(f"--- a/{other}\n") and packs.MARK not in patch
    # a fix is one folder: its lab test starts beside its patch, where the lab finds it, failing until written
    from cookbook.fixpack import fix_lab

    [lab_test] = fix_lab.modules_for("prompt-order", pack)
    assert lab_test.parent == pack / "prompt-order" and "pytest.fail(" in lab_test.read_text()


def test_new_scaffolds_upstream_as_a_todo_the_loader_refuses(pack, tmp_path, upstream_cache):
    """Where upstream stands is looked up by hand: fixes.new leaves a TODO that no build gets past."""
    edit = tmp_path / "edit"
    edit.mkdir()
    root = upstream_cache[0] / "vllm_gaudi"
    (edit / "platform.py").write_text((root / "platform.py").read_text() + "# the new fix\n")
    (edit / packs.RUNNER).parent.mkdir(parents=True)  # with the earlier test fix's change, as fixes.new wants
    (edit / packs.RUNNER).write_text(packs.mark_first_line((root / packs.RUNNER).read_text()))
    fix_new.new_fix("prompt-order", edit, "vllm_gaudi", "v0.26.0", title="t", why="w", how="h", fixes_dir=pack)
    with pytest.raises(FixError, match="`upstream` is still the scaffold's TODO") as err:
        fixes.load_fix("prompt-order", pack)
    assert "fix.yaml:" in str(err.value) and "docs/fix-lab.md" in str(err.value)


def test_new_keeps_a_lab_test_written_first_and_refuses_anything_else(pack, tmp_path, upstream_cache):
    root = upstream_cache[0] / "vllm_gaudi"
    edit = tmp_path / "edit"
    (edit / packs.RUNNER).parent.mkdir(parents=True)
    (edit / packs.RUNNER).write_text(packs.mark_first_line((root / packs.RUNNER).read_text()))
    (edit / "platform.py").write_text((root / "platform.py").read_text() + "# the new fix\n")
    folder = pack / "prompt-order"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    with pytest.raises(UsageError, match="holds more than the fix's lab tests"):
        fix_new.new_fix("prompt-order", edit, "vllm_gaudi", "v0.26.0", title="t", why="w", how="h", fixes_dir=pack)
    (folder / "notes.txt").unlink()
    (folder / "test_fix_prompt_order.py").write_text("def test_mine(tree):\n    assert tree\n")
    fix_new.new_fix("prompt-order", edit, "vllm_gaudi", "v0.26.0", title="t", why="w", how="h", fixes_dir=pack)
    assert (folder / "test_fix_prompt_order.py").read_text() == "def test_mine(tree):\n    assert tree\n"
    assert (folder / "fix.yaml").is_file()
