"""cookbook/recipe/yamlsource.py: the line of every key path, and one error naming file, line and key for
YAML a recipe may not be (table driven, on real files in a temporary folder)."""

import pytest

from cookbook.host.errors import FixError, RecipeError
from cookbook.recipe import yamlsource

DOC = """\
name: x
server:
  args:
    - --a
    - --b
  env:
    K: v
empty:
"""


def write(tmp_path, text: str | bytes):
    path = tmp_path / "recipe.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def test_every_key_path_has_its_line(tmp_path):
    source = yamlsource.load(write(tmp_path, DOC))
    assert source.data == {"name": "x", "server": {"args": ["--a", "--b"], "env": {"K": "v"}}, "empty": None}
    assert source.lines == {("name",): 1, ("server",): 2, ("server", "args"): 3, ("server", "args", 0): 4,
                            ("server", "args", 1): 5, ("server", "env"): 6, ("server", "env", "K"): 7,
                            ("empty",): 8}


@pytest.mark.parametrize("keys,line", [
    (("server", "env", "K"), 7),
    (("server", "env", "MISSING"), 6),  # the deepest key that is there
    (("server", "args", 1), 5),
    (("server", "args", 9, "x"), 3),
    (("nowhere", "at", "all"), None),
])
def test_line_of_the_deepest_key_there(tmp_path, keys, line):
    assert yamlsource.load(write(tmp_path, DOC)).line_of(keys) == line


@pytest.mark.parametrize("keys,text", [((), ""), (("a",), "a"), (("a", 0, "b"), "a.0.b")])
def test_dotted(keys, text):
    assert yamlsource.dotted(keys) == text


def test_an_empty_file_has_no_data_and_no_lines(tmp_path):
    source = yamlsource.load(write(tmp_path, "# only a comment\n"))
    assert source.data is None and source.lines == {}


@pytest.mark.parametrize("text,what,at,hint", [
    ("a: 1\nb:\n  c: 1\n  c: 2\n", "duplicate key 'c'", "recipe.yaml:4 (key b.c)", "keep one of the two"),
    ("a:\n  on: true\n", "key 'on' does not read as a string", "recipe.yaml:2 (key a.on)", "quote it ('on')"),
    ("a: [1, 2\nb: 3\n", "recipe.yaml is not valid YAML", "recipe.yaml:2", "correct the YAML syntax"),
    ("a: 1\n\tb: 2\n", "recipe.yaml is not valid YAML", "recipe.yaml:2", "correct the YAML syntax"),
    (b"a: 1\nb: 2\nc: caf\xe9\n", "recipe.yaml is not UTF-8 text (byte 0xe9)", "recipe.yaml:3",
     "save the file as UTF-8"),
])
def test_yaml_a_recipe_may_not_be(tmp_path, text, what, at, hint):
    path = write(tmp_path, text)
    with pytest.raises(RecipeError) as caught:
        yamlsource.load(path)
    assert caught.value.what.startswith(what), caught.value.what
    assert caught.value.where == str(tmp_path / at)
    assert hint in caught.value.hint


def test_an_unreadable_file_is_said_in_one_line(tmp_path):
    with pytest.raises(RecipeError, match="cannot read .*: Is a directory") as caught:
        yamlsource.load(tmp_path)
    assert caught.value.where == str(tmp_path)


def test_the_caller_chooses_the_error(tmp_path):
    """A fix.yaml is read by the same code, and its mistakes are a FixError (the fix pack's), not a recipe's."""
    with pytest.raises(FixError, match="duplicate key 'k'"):
        yamlsource.load(write(tmp_path, "k: 1\nk: 2\n"), error=FixError)
