"""Loading recipes: ids and paths, `extends`, schema errors with file, key and line."""

import pytest

from cookbook.host.errors import RecipeError
from cookbook.recipe import recipes

from ..conftest import REFERENCE, reference_data, variant


def load_error(root, path) -> str:
    with pytest.raises(RecipeError) as err:
        recipes.load(path, root)
    return str(err.value)


def test_ids_are_folder_slugs():
    known = recipes.known_ids()
    assert {"qwen3.5-27b-fp8", "qwen3.6-27b-fp8", "llama-3.1-8b-instruct-gaudi3"} <= set(known)
    assert all(rid == path.parent.name.lower() for rid, path in known.items())


def test_load_by_id_and_by_path():
    by_id = recipes.load("qwen3.5-27b-fp8")
    by_path = recipes.load(str(REFERENCE))
    by_folder = recipes.load(str(REFERENCE.parent))
    assert by_id.hash == by_path.hash == by_folder.hash
    assert by_id.recipe.model.id == "Qwen/Qwen3.5-27B-FP8"


def test_unknown_id_lists_known_ids():
    with pytest.raises(RecipeError) as err:
        recipes.load("qwen9")
    assert "unknown recipe 'qwen9'" in str(err.value)
    assert "qwen3.5-27b-fp8, qwen3.6-27b-fp8" in str(err.value)


def test_qwen36_extends_qwen35():
    parent, child = recipes.load("qwen3.5-27b-fp8"), recipes.load("qwen3.6-27b-fp8")
    assert child.recipe.model.id == "Qwen/Qwen3.6-27B-FP8"
    assert child.recipe.fixes.opt_in == ["gdn-prefix-cache", "strict-think-end", "whitespace-free-forced-tool-calls"]
    assert child.recipe.env == parent.recipe.env and child.recipe.serve == parent.recipe.serve
    # mappings merge: the child's `why` adds to the parent's
    assert set(child.recipe.fixes.why) == set(parent.recipe.fixes.why) | {"strict-think-end",
                                                                          "whitespace-free-forced-tool-calls"}
    assert child.recipe.model.geometry == parent.recipe.model.geometry
    assert child.hash != parent.hash
    assert child.fixes[-3:] == ["gdn-prefix-cache", "strict-think-end", "whitespace-free-forced-tool-calls"]
    assert "strict-think-end" not in parent.fixes


def test_extends_cycle(recipe_tree):
    root, write = recipe_tree
    write({"schema": 1, "extends": "b", "title": "A"}, model="A")
    b = write({"schema": 1, "extends": "a", "title": "B"}, model="B")
    assert "`extends` forms a cycle" in load_error(root, b)


def test_extends_unknown_parent_names_file_and_line(recipe_tree):
    root, write = recipe_tree
    path = write("schema: 1\ntitle: X\nextends: nope\n")
    text = load_error(root, path)
    assert "unknown recipe 'nope'" in text and "recipe.yaml:3 (key extends)" in text


def test_extends_by_relative_path(recipe_tree):
    root, write = recipe_tree
    write(reference_data(), model="Parent")
    child = write({"schema": 1, "extends": "../Parent", "title": "Child", "serve": {"max_num_seqs": 16},
                   "buckets": {"decode_bs": {"max": 16}}}, model="Child")
    loaded = recipes.load(child, root)
    assert loaded.id == "child" and loaded.recipe.serve.max_num_seqs == 16
    assert loaded.recipe.buckets.decode_bs.min == 1  # merged from the parent


def test_unknown_key_suggests_nearest(recipe_tree):
    root, write = recipe_tree
    data = variant({})
    data["serve"]["max_num_seqz"] = 4
    text = load_error(root, write(data))
    assert "unknown key 'max_num_seqz'; did you mean 'max_num_seqs'?" in text
    assert "(key serve.max_num_seqz)" in text


def test_unknown_top_level_key(recipe_tree):
    root, write = recipe_tree
    data = variant({})
    data["bukets"] = {}
    assert "did you mean 'buckets'?" in load_error(root, write(data))


def test_missing_key_and_wrong_type_with_lines(recipe_tree):
    root, write = recipe_tree
    text = (REFERENCE.read_text().replace("  max_num_seqs: 32\n", "  max_num_seqs: many\n")
            .replace("  accelerator: gaudi2\n", ""))
    path = write(text)
    out = load_error(root, path)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "max_num_seqs: many" in t)
    assert f"recipe.yaml:{line} (key serve.max_num_seqs)" in out
    assert "missing key 'accelerator'" in out and "2 problems" in out


def test_env_values_must_be_quoted(recipe_tree):
    root, write = recipe_tree
    text = REFERENCE.read_text().replace('COLLECTIVES: "true"', "COLLECTIVES: true")
    assert "quote env values" in load_error(root, write(text))


def test_malformed_yaml_names_file_and_line(recipe_tree):
    root, write = recipe_tree
    path = write("schema: 1\ntitle: [unclosed\nmodel: {}\n")
    text = load_error(root, path)
    assert "is not valid YAML" in text and "recipe.yaml:3" in text


def test_duplicate_key_refused(recipe_tree):
    root, write = recipe_tree
    path = write("schema: 1\ntitle: A\ntitle: B\n")
    assert "duplicate key 'title'" in load_error(root, path)


def test_yaml_boolean_key_refused(recipe_tree):
    root, write = recipe_tree
    path = write("schema: 1\nverified:\n  on: somewhere\n")
    assert "key 'on' does not read as a string" in load_error(root, path)


def test_hash_is_stable_and_content_based(recipe_tree):
    root, write = recipe_tree
    a = recipes.load(write(variant({})), root).hash
    b = recipes.load(write(variant({})), root).hash
    c = recipes.load(write(variant({"env.VLLM_SKIP_WARMUP": "false"})), root).hash
    assert a == b != c


def test_every_recipe_validates():
    assert [r.id for r in recipes.load_all()] == list(recipes.known_ids())


def test_unknown_fix_profile_named_at_the_recipe_line(recipe_tree):
    root, write = recipe_tree
    text = load_error(root, write(variant({"fixes.profile": "v9"})))
    assert "unknown fix profile 'v9'" in text and "(key fixes.profile)" in text and "v0.26.0" in text
