"""The host side of the fix pack: profiles, fix.yaml, order and requirements, pack.json and its drift."""

import json
import shutil

import pytest
import yaml

from cookbook.host.errors import FixError
from cookbook.host.paths import FIXES, RELEASES
from cookbook.recipe import fixes, release

REAL_ORDER = ["prompt-order", "sampling-rows-refresh", "structured-output-rows", "bad-words-index", "logitsprocs-rows",
              "async-discard-counter", "async-penalty-tokens", "resumed-prefill-logits", "hybrid-decode-pad",
              "gather-logprobs-int32", "prompt-logprobs", "logprobs-decode-guard", "rope-cpu-cache", "seeded-sampling",
              "partial-prefill-draws",
              "gdn-prefix-cache", "strict-think-end", "whitespace-free-forced-tool-calls"]
SHA = "0" * 64


def test_profile_v0_26_0_is_the_contract():
    spec = fixes.load_profile("v0.26.0")
    assert spec.order == REAL_ORDER
    assert spec.opt_in == ["gdn-prefix-cache", "strict-think-end", "whitespace-free-forced-tool-calls"]
    assert spec.packages["vllm_gaudi"].commit.startswith("b059f9c")
    assert spec.packages["vllm"].commit.startswith("568afb3a")
    assert "ffd46bfab" in spec.packages["vllm"].accepted_commits
    assert spec.gaudi_sw == "1.24.1"


def test_committed_pack_json_has_not_drifted():
    fixes.write_index(check=True)


def test_drift_is_caught(tmp_path, monkeypatch):
    """pack.json holds the release's pins too: a release file changed under it is drift."""
    pack, releases = tmp_path / "fixes", tmp_path / "releases"
    shutil.copytree(FIXES / "profiles", pack / "profiles")
    shutil.copytree(RELEASES, releases)
    monkeypatch.setenv("COOKBOOK_RELEASES_DIR", str(releases))
    fixes.write_index(fixes_dir=pack)
    fixes.write_index(check=True, fixes_dir=pack)
    said = releases / "v0.26.0.yaml"
    said.write_text(said.read_text().replace("gaudi_sw: 1.24.1", "gaudi_sw: 1.24.2"))
    fixes._load_profile.cache_clear()
    release._load.cache_clear()
    with pytest.raises(FixError, match="out of date"):
        fixes.write_index(check=True, fixes_dir=pack)


def test_unknown_profile_lists_known():
    with pytest.raises(FixError) as err:
        fixes.load_profile("v9")
    assert "known profiles: v0.26.0" in str(err.value)


@pytest.fixture
def pack(tmp_path):
    """A pack folder with the real profile and helpers to write fix folders into it."""
    root = tmp_path / "fixes"
    shutil.copytree(FIXES / "profiles", root / "profiles")

    def write(name, spec=None, patch="--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n", raw=None):
        folder = root / name
        folder.mkdir()
        base = {"title": "t", "why": "w", "how": "h",
                "targets": [{"package": "vllm_gaudi", "files": {"x.py": SHA}}],
                "patches": [{"package": "vllm_gaudi", "file": "0001.patch"}],
                "upstream": {"looked": "2026-12-06", "found": []}}
        base.update(spec or {})
        (folder / "fix.yaml").write_text(raw if raw is not None else yaml.safe_dump(base))
        (folder / "0001.patch").write_text(patch)
        return folder

    return root, write


def test_fix_yaml_unknown_key_named_with_line(pack):
    root, write = pack
    write("prompt-order", raw="title: t\nwhy: w\nhow: h\ntargets: []\npatches: []\nrequirez: []\n")
    with pytest.raises(FixError) as err:
        fixes.load_fix("prompt-order", root)
    assert "fix.yaml:6" in str(err.value) and "requirez" in str(err.value) and "unknown key" in str(err.value)


def test_patch_touching_an_undeclared_file(pack):
    root, write = pack
    write("prompt-order", patch="--- a/y.py\n+++ b/y.py\n@@ -1 +1 @@\n-a\n+b\n")
    with pytest.raises(FixError, match="changes vllm_gaudi/y.py, which the fix does not list"):
        fixes.load_fix("prompt-order", root)


def test_corrupt_patch_named(pack):
    root, write = pack
    write("prompt-order", patch="--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@\n-a\n")
    with pytest.raises(FixError, match="not a usable -p1 unified diff"):
        fixes.load_fix("prompt-order", root)


def test_missing_patch_file(pack):
    root, write = pack
    write("prompt-order", spec={"patches": [{"package": "vllm_gaudi", "file": "nope.patch"}]})
    with pytest.raises(FixError, match="patch nope.patch does not exist"):
        fixes.load_fix("prompt-order", root)


def test_scaffold_todo_refused(pack):
    root, write = pack
    write("prompt-order", spec={"why": "TODO"})
    with pytest.raises(FixError, match="`why` is still the scaffold's TODO"):
        fixes.load_fix("prompt-order", root)


def test_malformed_dependency_range_named_with_line(pack):
    # the applier's own reading of a range (inimage.versions): the host refuses what the image would refuse.
    root, write = pack
    write("prompt-order", spec={"dists": {"xgrammar": "0.2.4"}})
    with pytest.raises(FixError, match="dists xgrammar: '0.2.4' is not a version range") as err:
        fixes.load_fix("prompt-order", root)
    assert "(key dists.xgrammar)" in str(err.value)


def test_requires_cycle(pack):
    root, write = pack
    write("prompt-order", spec={"requires": ["sampling-rows-refresh"]})
    write("sampling-rows-refresh", spec={"requires": ["prompt-order"]})
    profile = fixes.load_profile("v0.26.0", root)
    with pytest.raises(FixError, match="requires cycle: prompt-order -> sampling-rows-refresh -> prompt-order"):
        fixes.resolve(profile, profile.order, root)


def test_requirement_after_it_in_order(pack):
    root, write = pack
    write("prompt-order", spec={"requires": ["sampling-rows-refresh"]})
    write("sampling-rows-refresh")
    profile = fixes.load_profile("v0.26.0", root)
    with pytest.raises(FixError, match="requires sampling-rows-refresh, which comes later in the order"):
        fixes.resolve(profile, profile.order, root)


def test_opt_in_flag_must_agree_with_profile(pack):
    root, write = pack
    write("gdn-prefix-cache", spec={"opt_in": False})
    profile = fixes.load_profile("v0.26.0", root)
    with pytest.raises(FixError, match="profile says opt-in"):
        fixes.resolve(profile, profile.order, root)


def test_pack_index_lists_fixes_with_patch_hashes(pack):
    root, write = pack
    write("hybrid-decode-pad")
    write("gdn-prefix-cache", spec={"opt_in": True, "requires": ["hybrid-decode-pad"],
                                    "env": {"VLLM_COMPACT_GDN": "1"}, "dists": {"xgrammar": ">=0.2.4,<1.0"}})
    index = fixes.pack_index(fixes_dir=root)
    assert list(index["fixes"]) == ["gdn-prefix-cache", "hybrid-decode-pad"]
    gdn = index["fixes"]["gdn-prefix-cache"]
    assert gdn["env"] == {"VLLM_COMPACT_GDN": "1"} and gdn["requires"] == ["hybrid-decode-pad"]
    assert gdn["dists"] == {"xgrammar": ">=0.2.4,<1.0"} and index["fixes"]["hybrid-decode-pad"]["dists"] == {}
    assert gdn["patches"][0]["file"] == "gdn-prefix-cache/0001.patch" and len(gdn["patches"][0]["sha256"]) == 64
    assert gdn["targets"] == [{"package": "vllm_gaudi", "path": "x.py", "sha256": SHA}]
    only = fixes.pack_index(only=["hybrid-decode-pad"], fixes_dir=root)
    assert list(only["fixes"]) == ["hybrid-decode-pad"]
    assert json.loads(fixes.dumps(index)) == index


def test_describe_marks_written_and_opt_in(pack):
    root, write = pack
    write("hybrid-decode-pad")
    lines = fixes.describe("v0.26.0", root)
    assert any("hybrid-decode-pad" in line and "generic" in line and " written" in line for line in lines)
    assert any("gdn-prefix-cache" in line and "opt-in" in line and "not written" in line for line in lines)


# --- upstream: where upstream stands on the fix's bug ----------------------------------------------------------------

GAUDI_PR = {"ref": "vllm-gaudi#1761", "url": "https://github.com/vllm-project/vllm-gaudi/pull/1761",
            "state": "merged", "says": "fixes it the same way", "fixed_in": "v0.28.0"}
TODAY = fixes.datetime.date(2026, 12, 6)


@pytest.mark.parametrize("change,key,said", [
    ({}, None, None),
    ({"ref": "vllm-gaudi 1761"}, ("found", 0, "ref"), "is not <repository>#<number>"),
    ({"url": "https://gitlab.com/vllm-project/vllm-gaudi/pull/1761"}, ("found", 0, "url"), "is not https://github.com"),
    ({"url": "https://github.com/vllm-project/vllm-gaudi/pull/1762"}, ("found", 0, "url"), "is not vllm-gaudi#1761"),
    ({"url": "https://github.com/vllm-project/vllm/pull/1761"}, ("found", 0, "url"), "is not vllm-gaudi#1761"),
    ({"url": "https://github.com/vllm-project/vllm-gaudi/issues/1761"}, ("found", 0, "state"), "only a pull request"),
    ({"state": "open"}, ("found", 0, "fixed_in"), "a fix that is open is in no release yet"),
    ({"fixed_in": "0.28"}, ("found", 0, "fixed_in"), "is not a release tag"),
    ({"says": "  "}, ("found", 0, "says"), "say in a sentence"),
])
def test_upstream_problems(change, key, said):
    upstream = fixes.Upstream.model_validate({"looked": "2026-12-06", "found": [GAUDI_PR | change]})
    got = fixes.upstream_problems(upstream, TODAY)
    assert got == ([] if key is None else [(key, got[0][1])]), got
    assert said is None or said in got[0][1]


def test_upstream_problems_a_ref_twice_and_a_day_to_come():
    upstream = fixes.Upstream.model_validate({"looked": "2026-12-07", "found": [GAUDI_PR, GAUDI_PR]})
    assert [k for k, _ in fixes.upstream_problems(upstream, TODAY)] == [("looked",), ("found", 1, "ref")]


UPSTREAM_YAML = """title: t
why: w
how: h
targets: []
patches: []
upstream:
  looked: {looked}
  found:
  - ref: vllm#48567
    url: https://github.com/vllm-project/vllm/pull/48567
    state: {state}
    says: proposes the same bounds check
"""


@pytest.mark.parametrize("looked,state,line,said", [
    ("2026-12-06", "open", None, None),
    ("'2026-12-06'", "open", None, None),  # quoted: text in the ISO form
    ("20261206", "open", 7, "an ISO date"),
    ("2026-12-06 10:00:00", "open", 7, "an ISO date"),
    ("2026-13-45", "open", 7, "is not one: month must be in 1..12"),
    ("TODO", "open", 7, "`upstream` is still the scaffold's TODO"),
    ("2026-12-06", "landed", 11, "'open', 'merged' or 'closed'"),
    ("2026-12-06", "merged", 11, "(key upstream.found.0.state): an issue is open or closed"),  # an issue's url
])
def test_fix_yaml_upstream_named_with_line(pack, looked, state, line, said):
    root, write = pack
    text = UPSTREAM_YAML.format(looked=looked, state=state)
    if state == "merged":
        text = text.replace("/pull/48567", "/issues/48567")
    write("prompt-order", raw=text)
    if line is None:
        assert fixes.load_fix("prompt-order", root).upstream.found[0].ref == "vllm#48567"
        return
    with pytest.raises(FixError) as err:
        fixes.load_fix("prompt-order", root)
    assert f"fix.yaml:{line}" in str(err.value) and said in str(err.value), str(err.value)


def test_fix_yaml_without_upstream_is_refused(pack):
    root, write = pack
    write("prompt-order", raw="title: t\nwhy: w\nhow: h\ntargets: []\npatches: []\n")
    with pytest.raises(FixError, match=r"\(key upstream\): Field required"):
        fixes.load_fix("prompt-order", root)


def test_every_fix_says_where_upstream_stands():
    """The facts known when the field came in, kept: a later edit may add to them, not lose them."""
    found = {name: {f.ref: f for f in fixes.load_fix(name).upstream.found} for name in fixes.fix_names()}
    assert found["async-penalty-tokens"]["vllm-gaudi#1769"].fixed_in == "v0.28.0"
    assert found["async-penalty-tokens"]["vllm-gaudi#1761"].state == "merged"
    assert {"vllm-gaudi#1691", "vllm-gaudi#1794"} <= set(found["async-discard-counter"])
    assert {"vllm-gaudi#1725", "vllm-gaudi#1369"} <= set(found["gdn-prefix-cache"])
    assert "vllm#48567" in found["logprobs-decode-guard"] and "vllm#35687" in found["strict-think-end"]
    assert {"vllm#54497", "xgrammar#660"} <= set(found["whitespace-free-forced-tool-calls"])


def test_a_fix_hash_is_what_the_fix_is_not_its_lab_tests(pack):
    root, write = pack
    folder = write("prompt-order")
    before = fixes.fix_hashes(["prompt-order"], root)
    (folder / "test_fix_prompt_order.py").write_text("def test_x():\n    pass\n")
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "test_fix_prompt_order.cpython-311.pyc").write_bytes(b"\0")
    assert fixes.fix_hashes(["prompt-order"], root) == before  # a lab test proves the fix, it is not shipped
    (folder / "README.md").write_text("what it does\n")
    assert fixes.fix_hashes(["prompt-order"], root) != before
