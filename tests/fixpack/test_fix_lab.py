"""The fix lab (cookbook/fixpack/fix_lab.py): release trees laid out as the image has them, the pack applied by
apply_all.py, and each written fix's lab tests failing on the pristine tree and passing on the patched
one, with vllm-gaudi's own unit tests still passing on the patched tree."""

from __future__ import annotations

import signal
import textwrap

import pytest

from cookbook.fixpack import fix_lab

from .. import interrupts, lab_prefetch

WRITTEN = fix_lab.written_fixes()
VERDICTS = WRITTEN + ([fix_lab.PACK] if fix_lab.pack_modules() else [])


@pytest.fixture(scope="session")
def lab_report(fix_lab_env, tmp_path_factory):
    """The whole lab's report: started when collection ended (tests/lab_prefetch.py), waited for here."""
    return lab_prefetch.result(tmp_path_factory)


@pytest.mark.parametrize("module, fix", [
    ("test_fix_prompt_order.py", "prompt-order"),
    ("../../../fixes/gather-logprobs-int32/test_fix_gather_logprobs_int32.py", "gather-logprobs-int32"),
    ("test_fix_gdn_prefix_cache_engine.py", "gdn-prefix-cache"),
    ("test_lab.py", None),
    ("test_fixture.py", None),
])
def test_fix_of_maps_a_lab_module_to_its_fix(module, fix):
    assert fix_lab.fix_of(module) == fix
    if fix and not module.endswith(fix_lab.ENGINE_SUFFIX + ".py"):
        assert fix_lab.module_for(fix).name == module.rsplit("/", 1)[-1]


@pytest.mark.parametrize("module, owner", [
    ("test_fix_prompt_order.py", "prompt-order"),
    ("test_fix_gdn_prefix_cache_engine.py", "gdn-prefix-cache"),
    ("test_pack_serving.py", fix_lab.PACK),
    ("test_pack_serving.py::test_x[async]", fix_lab.PACK),
    ("test_gdn_layout.py", None),
])
def test_owner_of_counts_pack_modules_for_the_whole_pack(module, owner):
    assert fix_lab.owner_of(module.split("::")[0]) == owner


def test_the_serving_conditions_module_is_a_pack_module():
    assert "test_pack_serving.py" in [p.name for p in fix_lab.pack_modules()]


@pytest.mark.parametrize("names, want", [
    (["prompt-order"], {"prompt-order"}),
    (["gdn-prefix-cache"], {"gdn-prefix-cache", "hybrid-decode-pad"}),
])
def test_with_requirements_adds_what_a_fix_requires(names, want):
    assert set(fix_lab.with_requirements(names)) == want


@pytest.mark.parametrize("outcomes, error, problems", [
    ({"t::a": "passed"}, "", 0),
    ({"t::a": "passed", "t::b": "failed"}, "", 1),
    ({}, "", 1),                               # nothing ran
    ({}, "x does not apply", 1),               # the patch needs another fix's lines
])
def test_alone_holds_a_fix_to_pass_without_the_others(outcomes, error, problems):
    assert len(fix_lab.Alone("x", outcomes, error).problems) == problems


def test_modules_for_lists_a_fixs_own_module_then_its_end_to_end_one(tmp_path):
    assert fix_lab.modules_for("gdn-prefix-cache", tmp_path) == []
    (tmp_path / "gdn-prefix-cache").mkdir()
    for name in ("test_fix_gdn_prefix_cache_engine.py", "test_fix_gdn_prefix_cache.py", "test_fix_gdn_other.py"):
        (tmp_path / "gdn-prefix-cache" / name).write_text("")
    assert [p.name for p in fix_lab.modules_for("gdn-prefix-cache", tmp_path)] == [
        "test_fix_gdn_prefix_cache.py", "test_fix_gdn_prefix_cache_engine.py"]


def test_every_written_fix_keeps_its_lab_tests_in_its_own_folder():
    for fix in WRITTEN:
        assert fix_lab.modules_for(fix), f"fixes/{fix}/ holds no test_fix_*.py"
    stray = [p.name for p in fix_lab.LAB_TESTS.glob("test_fix_*.py")]
    assert stray == [], "a fix's lab module belongs in its fix's folder"


@pytest.mark.parametrize("contained, want", [
    (False, ["test_pack_serving.py", "../../../fixes/prompt-order/test_fix_prompt_order.py"]),
    (True, ["test_pack_serving.py", "../../../fixes/prompt-order/test_fix_prompt_order.py"]),
])
def test_targets_reach_a_fixs_module_from_the_harness(contained, want):
    modules = [fix_lab.LAB_TESTS / "test_pack_serving.py", *fix_lab.modules_for("prompt-order")]
    assert fix_lab.targets_of(modules, None, contained) == want


def test_a_contained_run_reaches_a_candidate_packs_module_through_its_mount(tmp_path):
    module = tmp_path / "candidate" / "prompt-order" / "test_fix_prompt_order.py"
    assert fix_lab.targets_of([module], tmp_path / "candidate", True) == [
        "../../../fixes/prompt-order/test_fix_prompt_order.py"]
    assert fix_lab.targets_of([module], tmp_path / "candidate", False) == [
        __import__("os").path.relpath(module, fix_lab.LAB_TESTS)]


def test_parse_junit_reads_each_outcome(tmp_path):
    junit = tmp_path / "j.xml"
    junit.write_text(textwrap.dedent("""\
        <testsuites><testsuite>
          <testcase classname="test_fix_a" file="test_fix_a.py" name="test_ok"/>
          <testcase classname="test_fix_a" file="test_fix_a.py" name="test_bad"><failure message="x"/></testcase>
          <testcase classname="test_fix_a" file="test_fix_a.py" name="test_err"><error message="x"/></testcase>
          <testcase classname="test_fix_a" file="test_fix_a.py" name="test_skip"><skipped message="x"/></testcase>
          <testcase classname="sub.test_b.TestC" file="sub/test_b.py" name="test_in_class[1-x]"/>
        </testsuite></testsuites>"""))
    assert fix_lab.parse_junit(junit, tmp_path) == {
        "test_fix_a.py::test_ok": "passed", "test_fix_a.py::test_bad": "failed",
        "test_fix_a.py::test_err": "failed", "test_fix_a.py::test_skip": "skipped",
        "sub/test_b.py::TestC::test_in_class[1-x]": "passed"}


@pytest.mark.parametrize("text", ["<testsuites><testcase", "not xml at all", None])
def test_parse_junit_reads_nothing_from_a_file_that_is_not_junit(tmp_path, monkeypatch, text):
    junit = tmp_path / "j.xml"
    if text is None:  # over the bound: a contained run's tree wrote it
        monkeypatch.setattr(fix_lab, "JUNIT_LIMIT", 10)
        text = '<testsuites><testcase classname="t" file="t.py" name="test_x"/></testsuites>'
    junit.write_text(text)
    assert fix_lab.parse_junit(junit, tmp_path) == {}


SECRETS = {"HF_TOKEN": "hf_x", "HUGGING_FACE_HUB_TOKEN": "hf_y", "AWS_SECRET_ACCESS_KEY": "k",
           "GITHUB_TOKEN": "g", "DOCKER_CONFIG": "/root/.docker", "SSH_AUTH_SOCK": "/s", "VLLM_X": "1",
           "PT_HPU_LAZY_MODE": "1", "PYTHONPATH": "/evil", "LD_PRELOAD": "/evil.so"}


@pytest.mark.parametrize("environ, want", [
    ({}, {}),
    ({"PATH": "/bin", "HOME": "/root", "OMP_NUM_THREADS": "4"},
     {"PATH": "/bin", "HOME": "/root", "OMP_NUM_THREADS": "4"}),
    ({**SECRETS, "LANG": "C.UTF-8"}, {"LANG": "C.UTF-8"}),  # an allow-list: what it does not name is dropped
])
def test_minimal_env_keeps_only_the_allow_list(environ, want):
    assert fix_lab.minimal_env(environ) == want
    assert fix_lab.minimal_env(environ, A="1") == {**want, "A": "1"}


def test_lab_env_vars_carry_no_secret_of_the_caller(tmp_path):
    env = fix_lab.lab_env_vars(tmp_path, environ={**SECRETS, "PATH": "/bin"})
    assert not set(env) & (set(SECRETS) - {"PT_HPU_LAZY_MODE", "PYTHONPATH"})
    assert env["PT_HPU_LAZY_MODE"] == "0" and env["PYTHONPATH"].split(":")[0] == str(tmp_path)
    assert env["PATH"] == "/bin" and env["HF_HUB_OFFLINE"] == "1"


def test_a_contained_run_has_no_network_no_root_and_writes_only_its_scratch_folder(tmp_path):
    mounts = {name: tmp_path / name for name in ("python", "env", "venv", "tree", "lab", "fixes", "recipes", "out")}
    argv = fix_lab.contained_argv("img", mounts, fix_lab.IN["lab"], {"A": "1"}, ["-m", "pytest"], "lab")
    image = argv.index("img")
    options, command = argv[:image], argv[image + 1:]
    assert argv[:3] == ["run", "--label", "cookbook.container=lab"] and "--rm" in options
    for want in ["--network=none", f"--user={fix_lab.NOBODY}", "--cap-drop=ALL", "--security-opt=no-new-privileges",
                 "--read-only", "--env=A=1", f"--workdir={fix_lab.IN['lab']}"]:
        assert want in options
    assert not [o for o in options if o.startswith("--env=") and o != "--env=A=1"]  # nothing but what was given
    volumes = [o.removeprefix("--volume=") for o in options if o.startswith("--volume=")]
    assert [v for v in volumes if not v.endswith(":ro")] == [f"{tmp_path / 'out'}:{fix_lab.IN['out']}:rw"]
    assert f"{tmp_path / 'tree'}:{fix_lab.IN['tree']}:ro" in volumes and len(volumes) == len(mounts)
    # every folder under OPT, where nobody reaches it whatever its host path (a checkout under /root)
    assert all(v.split(":")[1].startswith(fix_lab.OPT + "/") for v in volumes)
    assert not [o for o in options if o.startswith(("--privileged", "--network=host", "--pid", "--ipc", "--cap-add"))]
    assert command == [f"{fix_lab.IN['venv']}/bin/python", "-m", "pytest"]


@pytest.mark.parametrize("pristine, patched, problems", [
    ({"t::a": "failed"}, {"t::a": "passed"}, 0),
    ({"t::a": "passed"}, {"t::a": "passed"}, 1),   # cannot show the bug
    ({"t::a": "failed"}, {"t::a": "failed"}, 1),   # the fix does not fix it
    ({"t::a": "failed"}, {"t::a": "skipped"}, 1),  # a skip proves nothing
    ({}, {}, 1),                                   # no lab tests at all
])
def test_verdict_holds_each_fix_to_fail_pristine_and_pass_patched(pristine, patched, problems):
    assert len(fix_lab.Verdict("x", pristine, patched).problems) == problems


@pytest.mark.parametrize("task", [("fixes.lab", "--fix"), ("fixes.rebase", "--base", "busybox:latest", "--lab-fix")])
def test_a_dry_run_refuses_a_fix_name_the_run_would(task):
    from ..test_tasks import invoke

    out = invoke(*task, "no-such-fix", "--dry-run")
    assert out.returncode == 2 and "no written fix of profile v0.26.0 is named 'no-such-fix'" in out.stderr
    assert "rope-cpu-cache" in out.stderr and "Traceback" not in out.stderr and out.stdout == ""


def test_check_named_passes_written_fixes_and_none():
    assert fix_lab.check_named(None, "v0.26.0") is None
    assert fix_lab.check_named(WRITTEN[:2], "v0.26.0") == WRITTEN[:2]


def test_keep_never_replaces_a_folder_the_lab_did_not_lay_out(tmp_path):
    (tmp_path / "patched").mkdir()
    (tmp_path / "patched" / "notes.txt").write_text("mine")
    with pytest.raises(fix_lab.UsageError, match="not a tree the fix lab laid out"):
        fix_lab.lab(keep=tmp_path)
    assert (tmp_path / "patched" / "notes.txt").read_text() == "mine"
    (tmp_path / "pristine").symlink_to(tmp_path / "patched")
    with pytest.raises(fix_lab.UsageError, match="not a folder"):
        fix_lab.lab(keep=tmp_path)


def test_the_labs_own_modules_pass_on_both_trees(lab_report):
    # test_lab.py (the release imports from the tree on CPU) and the design proofs that are no fix's
    # module (test_gdn_layout.py): they hold on the pristine and on the patched tree alike.
    own = sorted(p.name for p in fix_lab.LAB_TESTS.glob("test_*.py") if fix_lab.owner_of(p.name) is None)
    assert {"test_lab.py", "test_gdn_layout.py"} <= set(own)
    pristine, patched = lab_report.runs
    for run in (pristine, patched):
        lab = {n: o for n, o in fix_lab.run(run.tree, own).outcomes.items()}
        assert lab and set(lab.values()) == {"passed"}, run.tree


def test_the_patched_tree_is_the_pack_applied_by_apply_all(lab_report):
    pristine, patched = lab_report.runs
    assert (pristine.tree / fix_lab.TREE_MARKER).is_file() and (patched.tree / fix_lab.TREE_MARKER).is_file()
    assert not (pristine.tree / "fix-record.json").exists()
    assert (patched.tree / "fix-record.json").is_file()


@pytest.mark.parametrize("fix", VERDICTS)
def test_each_fix_fails_on_the_pristine_tree_and_passes_on_the_patched_one(lab_report, fix):
    verdict = next(v for v in lab_report.verdicts if v.fix == fix)
    assert not verdict.problems, "\n".join(verdict.problems)


@pytest.mark.parametrize("fix", WRITTEN)
def test_each_fix_passes_alone_on_the_pristine_tree(lab_report, fix):
    alone = next(a for a in lab_report.alone if a.fix == fix)
    assert not alone.problems, "\n".join(alone.problems)


# vllm-gaudi's unit tests that pass in the lab on the pristine release, measured
# (cookbook/fixpack/lab/upstream-excluded.txt names the rest, each with its reason): fewer on the
# patched tree means an exclusion grew or a test vanished.
UPSTREAM_PASSED_AT_LEAST = 491


def test_all_of_upstreams_unit_tests_pass_on_the_patched_tree_but_the_excluded(lab_report):
    outcomes = list(lab_report.upstream.outcomes.values())
    assert not lab_report.upstream_broken, "\n".join(lab_report.upstream_broken)
    assert outcomes.count("passed") >= UPSTREAM_PASSED_AT_LEAST, (
        f"{outcomes.count('passed')} upstream unit tests passed, {UPSTREAM_PASSED_AT_LEAST} expected")


def test_every_upstream_exclusion_names_a_unit_test_and_gives_its_reason():
    excluded = fix_lab.upstream_excluded()
    assert excluded
    for node, why in excluded.items():
        assert node.startswith(fix_lab.UPSTREAM_TESTS + "/"), node
        assert len(why.split()) >= 4, f"{node}: {why!r} is no reason"


@pytest.mark.parametrize("text, expected", [
    ("# needs a Gaudi kernel\ntests/unit_tests/a.py\ntests/unit_tests/b.py::t\n",
     {"tests/unit_tests/a.py": "needs a Gaudi kernel", "tests/unit_tests/b.py::t": "needs a Gaudi kernel"}),
    ("# header\n\n# two\n# lines\ntests/unit_tests/a.py\n\n# other\ntests/unit_tests/c.py\n",
     {"tests/unit_tests/a.py": "two lines", "tests/unit_tests/c.py": "other"}),
    ("", {}),
])
def test_upstream_excluded_reads_entries_under_their_reason(tmp_path, text, expected):
    path = tmp_path / "excluded.txt"
    path.write_text(text)
    assert fix_lab.upstream_excluded(path) == expected


def test_upstream_excluded_refuses_an_entry_without_a_reason(tmp_path):
    path = tmp_path / "excluded.txt"
    path.write_text("# header\n\ntests/unit_tests/a.py\n")
    with pytest.raises(fix_lab.LabError, match=r"excluded.txt:3: tests/unit_tests/a.py has no reason"):
        fix_lab.upstream_excluded(path)


# --- SIGTERM and Ctrl-C: the lab's pytest processes end with it, and its trees go --------------------

# Long enough for a lab pytest to go on running (it imports the release and CPU torch first), short
# against its 3,600 s timeout: a lab that ends only when its pytests end fails here.
ENDS_WITHIN_S = 20


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)  # kill, CI; Ctrl-C
def test_an_interrupted_lab_leaves_no_pytest_running_and_no_tree(fix_lab_env, upstream_cache, tmp_path, sig):
    """`invoke fixes.lab` for one fix, signalled as soon as both its pytest processes (pristine and patched
    tree) run: they are gone with it, and so is its temporary folder with the two trees."""
    tmp = tmp_path / "tmp"  # the task's TMPDIR: its trees, and every lab pytest's command line, name it

    def pytests() -> dict[int, str]:
        return {p: c for p, c in interrupts.processes_naming(str(tmp)).items() if " -m pytest " in c}

    proc = interrupts.start(tmp, "fixes.lab", "--fix", "prompt-order")
    try:
        interrupts.wait_for(lambda: len(pytests()) == 2, proc, 600, "two lab pytest processes")
        interrupts.interrupt(proc, sig, timeout=ENDS_WITHIN_S)
        assert proc.returncode == 1  # invoke's exit on KeyboardInterrupt
        assert interrupts.left(str(tmp)) == {}
        assert sorted(p.name for p in tmp.iterdir()) == []
    finally:
        proc.kill()
        interrupts.kill_left(str(tmp))
