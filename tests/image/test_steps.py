"""The pipeline steps' decisions before any engine call: a real-base build refuses unwritten fixes
unless told it is development, marks what it cannot publish, and warns about a base it cannot pin."""

import pytest

from cookbook.host.errors import BuildError
from cookbook.image import steps
from cookbook.recipe import fixes, recipes

RID = "qwen3.5-27b-fp8"


def test_real_base_build_refuses_unwritten_fixes_with_the_list(lacking_gdn):
    loaded = recipes.load(RID)
    missing = fixes.select("v0.26.0", loaded.recipe.fixes.opt_in).not_written
    assert missing == ["gdn-prefix-cache"]
    with pytest.raises(BuildError) as err:
        steps.build_recipe(RID, dry_run=True)
    text = str(err.value)
    assert f"selects {len(missing)} fixes that are not written yet: {', '.join(missing)}" in text
    assert "--allow-unwritten-fixes" in text and "recipe.yaml" in text


def test_allow_unwritten_fixes_marks_every_tag(capsys):
    steps.build_recipe(RID, dry_run=True, allow_unwritten=True, tag=["reg/x:y"], repo="r")
    out = capsys.readouterr().out
    tags = [line.split()[-1] for line in out.splitlines() if " tag <image-id> " in line]
    assert tags == ["r/qwen3.5-27b-fp8:v0.26.0-<sha256>-unwritten", "r/qwen3.5-27b-fp8:v0.26.0-unwritten",
                    "reg/x:y-unwritten"]
    assert "--label 'cookbook.content.hash=<sha256>'" in out


def test_standin_builds_as_today_and_the_flag_adds_nothing(capsys):
    steps.build_recipe(RID, use_standin=True, dry_run=True, repo="r")
    plain = capsys.readouterr().out
    steps.build_recipe(RID, use_standin=True, dry_run=True, repo="r", allow_unwritten=True)
    assert capsys.readouterr().out == plain
    assert "tag <image-id> r/qwen3.5-27b-fp8:v0.26.0-standin" in plain and "unwritten" not in plain


def test_building_from_latest_warns_and_names_base_digest(capsys):
    steps.build_recipe(RID, dry_run=True, allow_unwritten=True)
    err = capsys.readouterr().err
    assert "warning:" in err and "base.digest" in err and ":latest" in err
    steps.build_recipe(RID, use_standin=True, dry_run=True)
    assert "base.digest" not in capsys.readouterr().err


def test_validate_note_lists_unwritten_fixes(lacking_gdn):
    loaded = recipes.load("qwen3.6-27b-fp8")
    note = steps.unwritten_note(loaded)
    missing = fixes.select(loaded.recipe.fixes.profile, loaded.recipe.fixes.opt_in).not_written
    assert missing == ["gdn-prefix-cache"]
    assert len(note) == 1 and f"not written: {', '.join(missing)} (" in note[0]
    assert f"of the {len(loaded.fixes)} selected fixes" in note[0]


def test_with_the_real_pack_no_recipe_selects_an_unwritten_fix():
    for rid in (RID, "qwen3.6-27b-fp8"):
        assert steps.unwritten_note(recipes.load(rid)) == []


@pytest.mark.parametrize("mark,extra,expected", [
    ("", ["r/a:1"], "r/a:1"), ("standin", ["r/a:1"], "r/a:1-standin"), ("standin", ["r/b:standin"], "r/b:standin"),
    ("unwritten", ["r/a:1"], "r/a:1-unwritten"),
])
def test_extra_tags_keep_the_mark(mark, extra, expected):
    loaded = recipes.load(RID)
    assert steps.tags_for(loaded, "r", mark, "0" * 64, extra)[2] == expected
