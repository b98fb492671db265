"""The cookbook's names are said once (cookbook/host/names.py), and releases only in releases/: no other
module of cookbook/ (the image checks included) nor tasks.py spells a label key, the image repository, the
Hugging Face cache or a release in a string. Docstrings and comments may name them."""

import ast
import re
from pathlib import Path

import pytest

from cookbook.host import names
from cookbook.host.names import OCI, Label
from cookbook.host.paths import ROOT
from cookbook.recipe import release

# The lab's harness (cookbook/fixpack/lab) runs in the lab's own environment, never imports the cookbook.
LAB = ROOT / "cookbook" / "fixpack" / "lab"
SOURCES = sorted(p for p in (ROOT / "cookbook").rglob("*.py") if not p.is_relative_to(LAB)) + [ROOT / "tasks.py"]
KEYS = {v for cls in (Label, OCI) for k, v in vars(cls).items() if k.isupper()}
SAID_ONCE = [re.compile(rf"(?<![\w.-]){re.escape(v)}(?![\w.-])") for v in sorted(KEYS)] + [
    re.compile(re.escape(names.PROJECT)), re.compile(re.escape(".cache/huggingface")),
]
RELEASES = set(release.names())  # a string that is a release's name: releases/<tag>.yaml says it


def strings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string constant of a module but its docstrings (f-strings' literal parts too)."""
    tree = ast.parse(path.read_text())
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


def spelled(paths: list[Path]) -> list[str]:
    return [f"{p}:{line}: {text!r}" for p in paths if p.name != "names.py"
            for line, text in strings(p) if text in RELEASES or any(rx.search(text) for rx in SAID_ONCE)]


def test_no_module_spells_a_name_a_label_key_or_a_release():
    assert spelled(SOURCES) == []


@pytest.mark.parametrize("text", ['labels.get("cookbook.recipe.hash")', 'repo="gaudi-cookbook"',
                                  'profile="v0.26.0"', 'HF = "/root/.cache/huggingface"',
                                  'x = f"--label cookbook.container={role}"'])
def test_the_guard_sees_a_spelled_name(tmp_path, text):
    module = tmp_path / "m.py"
    module.write_text(f'"""A docstring may say cookbook.recipe.hash and v0.26.0."""\n{text}\n')
    assert len(spelled([module])) == 1


def test_the_values_never_change():
    """Images, registries and results already made carry these strings."""
    assert (names.IMAGE_REPO, names.HF_CACHE_HOST, names.HF_CACHE_IN_IMAGE) == (
        "gaudi-cookbook", "~/.cache/huggingface", "/root/.cache/huggingface")
    assert (Label.RECIPE_HASH, Label.CONTENT_HASH, Label.STANDIN, Label.CONTAINER, Label.PUBLISHABLE) == (
        "cookbook.recipe.hash", "cookbook.content.hash", "cookbook.standin", "cookbook.container",
        "cookbook.publishable")
    assert OCI.BASE_DIGEST == "org.opencontainers.image.base.digest" and len(KEYS) == 29
