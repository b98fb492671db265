"""What a recipe may say: every value that reaches the image has its role's grammar, numbers have
their bounds, and a refusal names the file, the key and the line; nothing is rewritten."""

import pytest

from cookbook.host.errors import RecipeError
from cookbook.recipe import recipes

from ..conftest import reference_data, variant

# (case, changes to the reference recipe, the key path the refusal names, words of the message)
REFUSED = [
    ("env name with a dash", {"env.BAD-NAME": "1"}, "env.BAD-NAME", "env name"),
    ("env name that writes an instruction", {"env.A=1\nRUN id #": "1"}, "env.A=1\nRUN id #", "env name"),
    ("newline in an env value", {"env.VLLM_SKIP_WARMUP": "true\nRUN id"}, "env.VLLM_SKIP_WARMUP", "U+000A"),
    ("carriage return in the title", {"title": "Qwen\r"}, "title", "U+000D"),
    ("tab in the title", {"title": "Qwen\tFP8"}, "title", "U+0009"),
    ("profile climbing out", {"fixes.profile": "../../etc/passwd"}, "fixes.profile", "a name here"),
    ("opt-in fix with a slash", {"fixes.opt_in": ["gdn-prefix-cache", "x/y"]}, "fixes.opt_in.1", "a name here"),
    ("why-key not a slug", {"fixes.why": {"Bad Name": "x"}}, "fixes.why.Bad Name", "a name here"),
    ("model id as a flag", {"model.id": "--trust-remote-code"}, "model.id", "repo id"),
    ("parser as a flag", {"serve.reasoning_parser": "--trust-remote-code"}, "serve.reasoning_parser",
     "starting with a letter"),
    ("base image with a space", {"base.image": "debian RUN id"}, "base.image", "image reference"),
    ("site-packages relative", {"base.site_packages": "usr/lib"}, "base.site_packages", "absolute"),
    ("bucket file climbing", {"buckets.file": "/opt/../etc/passwd"}, "buckets.file", "without `..`"),
    ("port 0", {"image.port": 0}, "image.port", "greater than or equal to 1"),
    ("port 65536", {"image.port": 65536}, "image.port", "less than or equal to 65535"),
    ("health path relative", {"image.health_path": "health"}, "image.health_path", "absolute"),
    ("gpu memory 0", {"serve.gpu_memory_utilization": 0}, "serve.gpu_memory_utilization", "greater than 0"),
    ("gpu memory above 1", {"serve.gpu_memory_utilization": 1.5}, "serve.gpu_memory_utilization",
     "less than or equal to 1"),
    ("no sequences", {"serve.max_num_seqs": 0}, "serve.max_num_seqs", "greater than 0"),
    ("negative batched tokens", {"serve.max_num_batched_tokens": -1792}, "serve.max_num_batched_tokens",
     "greater than 0"),
    ("block size 0", {"serve.block_size": 0}, "serve.block_size", "greater than 0"),
    ("tensor parallel 0", {"serve.tensor_parallel_size": 0, "hardware.tensor_parallel": 0},
     "hardware.tensor_parallel", "greater than 0"),
    ("no cards", {"hardware.cards": 0}, "hardware.cards", "greater than 0"),
    ("rule name not a slug", {"rules": [{"rule": "a b", "text": "x"}]}, "rules.0.rule", "a name here"),
    ("provenance of a key that is no path", {"provenance": {"importer": "vllm-gaudi-defaults", "commit": "a" * 40,
                                                            "sources": {"serve": "x"}}}, "provenance.sources.serve",
     "String should match pattern"),
    ("provenance from an importer not known", {"provenance": {"importer": "hand", "commit": "a" * 40, "sources": {}}},
     "provenance.importer", "vllm-gaudi-defaults"),
    ("provenance of a short commit", {"provenance": {"importer": "vllm-gaudi-defaults", "commit": "b059f9c",
                                                     "sources": {}}}, "provenance.commit", "pattern"),
]


def refusal(recipe_tree, changes) -> str:
    root, write = recipe_tree
    with pytest.raises(RecipeError) as err:
        recipes.load(write(variant(changes)), root)
    return str(err.value)


@pytest.mark.parametrize("case,changes,key,words", REFUSED, ids=[c[0] for c in REFUSED])
def test_refused_with_file_key_and_line(recipe_tree, case, changes, key, words):
    text = refusal(recipe_tree, changes)
    assert f"(key {key})" in text and words in text
    assert "recipe.yaml:" in text.split(f"(key {key})")[0].rsplit("\n", 1)[-1]  # the line, on the same line


# Hostile to a shell or a Dockerfile, but allowed: they must come out byte for byte (test_render.py).
ALLOWED = {
    "title": "Qwen \"27B\" it's $HOME `id`; rm -rf / && echo \\",
    "env.HOSTILE": "$(touch /tmp/pwned); `id` 'q' \"d\" \\ # ${PATH}",
    "env.EMPTY": "",
    "env._": "ends with a backslash \\",
    "model.precision": "FP8 ; still one line",
}


def test_hostile_but_single_line_values_are_kept(recipe_tree):
    root, write = recipe_tree
    loaded = recipes.load(write(variant(ALLOWED)), root)
    assert loaded.recipe.title == ALLOWED["title"]
    assert loaded.recipe.env["HOSTILE"] == ALLOWED["env.HOSTILE"]
    assert loaded.recipe.env["_"].endswith("\\")


def test_prose_may_span_lines(recipe_tree):
    root, write = recipe_tree
    data = reference_data()
    data["known_issues"] = ["two\nlines"]
    assert recipes.load(write(data), root).recipe.known_issues == ["two\nlines"]


def test_recipe_id_must_be_a_slug(recipe_tree):
    root, write = recipe_tree
    path = write(reference_data(), model="Bad Name")
    with pytest.raises(RecipeError) as err:
        recipes.load(path, root)
    assert "recipe id 'bad name'" in str(err.value) and "rename the model folder" in str(err.value)


def test_extends_cannot_leave_the_tree(recipe_tree, tmp_path):
    root, write = recipe_tree
    outside = tmp_path / "elsewhere" / "recipe.yaml"
    outside.parent.mkdir()
    outside.write_text("schema: 1\ntitle: outside\n")
    child = write({"schema": 1, "extends": str(outside), "title": "Child"}, model="Child")
    with pytest.raises(RecipeError) as err:
        recipes.load(child, root)
    assert "not a recipe.yaml in the recipe tree" in str(err.value) and "(key extends)" in str(err.value)
    not_a_recipe = root / "Test" / "notes.yaml"
    not_a_recipe.write_text("schema: 1\n")
    child = write({"schema": 1, "extends": "../notes.yaml", "title": "Child"}, model="Child")
    with pytest.raises(RecipeError) as err:
        recipes.load(child, root)
    assert "not a recipe.yaml" in str(err.value)


def test_non_utf8_recipe_names_the_line(recipe_tree):
    root, write = recipe_tree
    path = write("schema: 1\ntitle: ok\n")
    path.write_bytes(b"schema: 1\ntitle: caf\xe9\n")
    with pytest.raises(RecipeError) as err:
        recipes.load(path, root)
    assert "not UTF-8" in str(err.value) and "recipe.yaml:2" in str(err.value)
