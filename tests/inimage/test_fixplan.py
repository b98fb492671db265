"""inimage/fixplan.py: the one place that decides a selection, its order and requirements, and the HPU
mode, for the host and for the applier inside the image (table-driven; the applier's own behaviour is
tested by the other files here)."""

import pytest

from cookbook.host.paths import ENGINE, ROOT
from cookbook.recipe import fixes, recipes
from inimage import fixplan, selection


@pytest.mark.parametrize("env,mode", [({"PT_HPU_LAZY_MODE": "1"}, "lazy"), ({"PT_HPU_LAZY_MODE": "0"}, "compile"),
                                      ({}, "compile"), ({"PT_HPU_LAZY_MODE": "true"}, "compile")])
def test_hpu_mode(env, mode):
    assert fixplan.hpu_mode(env) == mode


@pytest.mark.parametrize("opt_in,expected", [
    ([], ["a", "b"]), (["x"], ["a", "x", "b"]), (["y", "x"], ["a", "x", "b", "y"]),
])
def test_select_keeps_pack_order(opt_in, expected):
    assert fixplan.select(["a", "x", "b", "y"], ["x", "y"], opt_in) == expected


CYCLES = [
    ({"a": ["b"], "b": []}, None),
    ({"a": ["b"], "b": ["a"]}, ["a", "b", "a"]),
    ({"a": ["b"], "b": ["c"], "c": ["b"]}, ["b", "c", "b"]),
    ({"a": ["zz"]}, None),  # an unknown requirement is a requirement problem, not a cycle
]


@pytest.mark.parametrize("requires,cycle", CYCLES)
def test_find_cycle(requires, cycle):
    assert fixplan.find_cycle(list(requires), requires) == cycle


ORDER = ["a", "b", "c", "d"]
REQUIREMENTS = [
    # (kept, skipped, requires, the one message expected or None)
    (["a", "b"], {}, {"a": [], "b": ["a"]}, None),
    (["a", "b"], {}, {"a": ["b"], "b": []}, "a requires b, which comes later in the order"),
    (["b"], {}, {"b": ["zz"]}, "b requires zz, which is not in profile p's order"),
    (["b"], {}, {"b": ["a"]}, "b requires a, which is not in this pack"),
    (["b"], {"a": "runs only in lazy mode"}, {"a": [], "b": ["a"]}, "b requires a, which is skipped: it runs only"),
    (["b"], {}, {"a": [], "b": ["a"]}, "b requires a, which is opt-in and not named"),
]


@pytest.mark.parametrize("kept,skipped,requires,message", REQUIREMENTS)
def test_requirement_problems(kept, skipped, requires, message):
    found = fixplan.requirement_problems("p", ORDER, kept, skipped, requires)
    if message is None:
        assert found == []
    else:
        assert len(found) == 1 and found[0][1].startswith(message)


def test_host_and_image_select_alike():
    """The recipe's selection (host) and the applier's (image) agree on a pack holding every fix."""
    loaded = recipes.load("qwen3.6-27b-fp8")
    profile = fixes.load_profile("v0.26.0")
    pack_fixes = {n: {"opt_in": n in profile.opt_in, "requires": []} for n in profile.order}
    pack_profile = {"order": profile.order, "opt_in": profile.opt_in}
    image, _ = selection.select_fixes("v0.26.0", pack_profile, pack_fixes, loaded.recipe.fixes.opt_in)
    assert image == loaded.fixes == fixes.select("v0.26.0", loaded.recipe.fixes.opt_in).names


def test_one_place_for_image_paths_digests_templates_and_build_output():
    """The facts fixplan and its users own are said once: no other file of the code names the image's
    /opt/cookbook paths or computes a sha256 itself, one Jinja environment, one docker output loop."""
    lab = ROOT / "cookbook" / "fixpack" / "lab"  # the lab's harness runs in its own environment
    code = [p for p in [*(ROOT / "cookbook").rglob("*.py"), *(p for p in ENGINE.glob("*.py") if p.name != "fixplan.py"),
                        *(ROOT / "dockerfiles").glob("*.j2"), ROOT / "tasks.py"] if not p.is_relative_to(lab)]
    text = {p.relative_to(ROOT).as_posix(): p.read_text() for p in code}
    assert [n for n, t in text.items() if "/opt/cookbook" in t.replace("/opt/cookbook/fix-record.json).", "")] == []
    # weights.py alone hashes too: model files against the Hub's hashes (sha256 and git blob ids),
    # streamed because a shard is gigabytes; not the pack's digests.
    assert [n for n, t in text.items() if "hashlib" in t] == ["cookbook/prove/weights.py"]
    assert [n for n, t in text.items() if "jinja2.Environment(" in t] == ["cookbook/image/render.py"]
    assert [n for n, t in text.items() if "import line" in t] == ["cookbook/host/engine.py"]  # engine.stream
