"""The fix lab's fixtures, a pytest plugin (`-p lab_fixtures`): a fix's lab modules live in its own
folder (fixes/<name>/test_fix_<snake_name>.py), outside this harness, so a conftest.py here would not
reach them. It runs in the lab's own environment (scripts/fix-lab.sh), never in the project's .venv:
`cookbook.fixpack.fix_lab.run` starts pytest in this folder with `-c pytest.ini`, a release tree
(pristine or patched) first on PYTHONPATH, then the Gaudi stubs and this folder, and `-p lab_stubs -p
lab_fixtures`. Every test of a fix's module fails on the pristine tree and passes on the patched one
(tests/fixpack/test_fix_lab.py holds the lab to that). Run by hand, from this folder:

    PYTHONPATH=<tree>:stubs:. COOKBOOK_LAB_TREE=<tree> VLLM_USE_FAKE_HPU=1 \
        $(../../../scripts/fix-lab.sh --print)/bin/python -m pytest -c pytest.ini -p lab_stubs -p lab_fixtures \
        test_pack_serving.py ../../../fixes/prompt-order/test_fix_prompt_order.py
"""

import os
from pathlib import Path

import pytest

TREE = Path(os.environ["COOKBOOK_LAB_TREE"]) if os.environ.get("COOKBOOK_LAB_TREE") else None


def pytest_configure(config):
    if TREE is None:
        raise pytest.UsageError("COOKBOOK_LAB_TREE is not set: run the lab through `invoke fixes.lab` "
                                "or cookbook.fixpack.fix_lab.run, which lays out a release tree")


@pytest.fixture(scope="session")
def tree() -> Path:
    """The site-packages folder under test (pristine or patched)."""
    return TREE


@pytest.fixture(scope="session")
def patched(tree) -> bool:
    """Whether the tree carries the fix pack (its fix record). Tests must not branch on it to pass;
    it is for messages only."""
    return (tree / "fix-record.json").is_file()


@pytest.fixture(scope="session")
def qwen35_dir():
    """The tiny Qwen3.5 hybrid (3 GDN layers, 1 attention layer) of cookbook/fixpack/lab/_engine.py."""
    import _engine

    return _engine.tiny_qwen35()


@pytest.fixture(scope="module")
def qwen35_engine(qwen35_dir):
    """The release's engine on the CPU with prefix caching on, for one module's tests."""
    import _engine

    with _engine.engine(qwen35_dir) as engine:
        yield engine


@pytest.fixture(scope="session")
def qwen35_reference(qwen35_dir):
    import _engine

    return _engine.Reference(qwen35_dir)
