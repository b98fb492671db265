"""The layout shows the pipeline: cookbook/ by stage, a lower stage never imports a higher one (imports
read with ast, those inside functions too), each stage says what it owns and may import, and the tests
mirror the layout. Below every stage, inimage/ (the code the image runs) imports the standard library
and itself only."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from cookbook.host.paths import ROOT

# Low to high; the package root (chain.py) is above them all. inimage/ is below them all.
STAGES = ("host", "recipe", "image", "prove", "fixpack", "release")
INIMAGE = "inimage"


def rank(module: str) -> int:
    parts = module.split(".")
    return STAGES.index(parts[1]) if len(parts) > 1 and parts[1] in STAGES else len(STAGES)


def imported(path: Path, package: str) -> set[str]:
    """The cookbook modules and packages a file imports, relative imports resolved against `package`."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("cookbook")}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            if module.startswith("cookbook"):
                out |= {f"{module}.{a.name}" if module.count(".") == 0 else module for a in node.names}
    return out


def violations(root: Path) -> list[str]:
    found = []
    for path in sorted((root / "cookbook").rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        parts = list(rel.parts)
        package = ".".join(parts if parts[-1] == "__init__" else parts[:-1]).removesuffix(".__init__")
        if parts[-1] == "__init__":
            parts = parts[:-1]
        module = ".".join(parts)
        for dep in imported(path, package):
            if rank(dep) > rank(module):
                found.append(f"{module} imports {dep}")
    return found


# The one import past the standard library: the run-time guard reads a `--config FILE` with the image's
# PyYAML (vLLM needs it, so the real base has it), inside a function, refusing the file where it is absent.
OPTIONAL = {("inimage/runtime.py", "yaml")}


def _guarded(tree: ast.AST, node: ast.AST) -> bool:
    """Whether `node` sits in a `try` whose handlers catch ImportError."""
    for t in ast.walk(tree):
        if isinstance(t, ast.Try) and any(node is n for stmt in t.body for n in ast.walk(stmt)):
            if any(isinstance(h.type, ast.Name) and h.type.id == "ImportError" for h in t.handlers):
                return True
    return False


def outside_the_stdlib(root: Path) -> list[str]:
    """Every import of inimage/ that is neither the standard library nor inimage itself, anywhere in a
    file (inside functions and try blocks too): the image's Python has none of the cookbook's dependencies.
    OPTIONAL's entries pass only inside a `try` that catches ImportError."""
    found = []
    for path in sorted((root / INIMAGE).rglob("*.py")):
        tree = ast.parse(path.read_text())
        rel = str(path.relative_to(root))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [] if node.level else [node.module]
            else:
                continue
            found += [f"{rel} imports {name}" for name in names
                      if name.split(".")[0] not in (*sys.stdlib_module_names, INIMAGE)
                      and not ((rel, name) in OPTIONAL and _guarded(tree, node))]
    return found


def test_inimage_imports_the_standard_library_and_itself_only():
    assert (ROOT / INIMAGE / "__init__.py").is_file()
    assert outside_the_stdlib(ROOT) == []


@pytest.mark.parametrize("source, found", [
    ("import yaml", ["inimage/x.py imports yaml"]),
    ("def f():\n    try:\n        import yaml\n    except ImportError:\n        pass", ["inimage/x.py imports yaml"]),
    ("from cookbook.recipe import fixes", ["inimage/x.py imports cookbook.recipe"]),
    ("import importlib.metadata, json\nfrom . import fixplan\nfrom inimage.pack import load_pack", []),
])
def test_the_stdlib_test_sees_a_foreign_import(tmp_path, source, found):
    (tmp_path / INIMAGE).mkdir()
    (tmp_path / INIMAGE / "x.py").write_text(source + "\n")
    assert outside_the_stdlib(tmp_path) == found


@pytest.mark.parametrize("source, found", [
    ("def f():\n    try:\n        import yaml\n    except ImportError:\n        pass", []),
    ("import yaml", ["inimage/runtime.py imports yaml"]),  # at the top: the guard would not even load
    ("def f():\n    try:\n        import yaml\n    except OSError:\n        pass", ["inimage/runtime.py imports yaml"]),
    ("def f():\n    try:\n        import requests\n    except ImportError:\n        pass",
     ["inimage/runtime.py imports requests"]),
])
def test_the_guards_optional_yaml_passes_only_where_its_absence_is_caught(tmp_path, source, found):
    (tmp_path / INIMAGE).mkdir()
    (tmp_path / INIMAGE / "runtime.py").write_text(source + "\n")
    assert outside_the_stdlib(tmp_path) == found


def test_a_lower_stage_never_imports_a_higher_one():
    assert violations(ROOT) == []


@pytest.mark.parametrize("source, found", [
    ("from ..prove import serve", ["cookbook.host.x imports cookbook.prove"]),
    ("from cookbook.release.publish import push", ["cookbook.host.x imports cookbook.release.publish"]),
    ("def f():\n    from ..image import render", ["cookbook.host.x imports cookbook.image"]),
    ("from . import engine", []),
])
def test_the_direction_test_sees_an_import_up(tmp_path, source, found):
    (tmp_path / "cookbook" / "host").mkdir(parents=True)
    (tmp_path / "cookbook" / "host" / "x.py").write_text(source + "\n")
    assert violations(tmp_path) == found


def test_every_module_sits_in_a_stage_that_says_what_it_owns_and_may_import():
    root = ROOT / "cookbook"
    assert sorted(p.name for p in root.glob("*.py")) == ["__init__.py", "chain.py"]
    for stage in STAGES:
        doc = ast.get_docstring(ast.parse((root / stage / "__init__.py").read_text()))
        assert doc and "May import:" in doc, stage


def test_the_tests_mirror_the_layout():
    where = {p.stem: p.parent.name for p in (ROOT / "cookbook").glob("*/*.py") if p.stem != "__init__"}
    where.update({p.stem: INIMAGE for p in (ROOT / INIMAGE).glob("*.py") if p.stem != "__init__"})
    where.update({p.name: p.parent.name for p in (ROOT / "cookbook").glob("*/*") if (p / "__init__.py").is_file()})
    misplaced = [str(t.relative_to(ROOT)) for t in (ROOT / "tests").glob("**/test_*.py")
                 if t.stem.removeprefix("test_") in where
                 and t.parent.name != where[t.stem.removeprefix("test_")]]
    assert misplaced == []
    for stage in (*STAGES, INIMAGE):
        assert (ROOT / "tests" / stage / "__init__.py").is_file()
