"""The project's own code passes ruff, and generated files are current (see also test_fixes)."""

import shutil
import subprocess
import sys
from pathlib import Path

from cookbook.host.paths import ROOT

from .conftest import unavailable


def test_ruff_clean():
    beside = Path(sys.executable).parent / "ruff"
    ruff = str(beside) if beside.is_file() else shutil.which("ruff")
    if ruff is None:
        unavailable("ruff is not installed (pip install -e '.[dev]')")
    out = subprocess.run([ruff, "check", "--no-cache", str(ROOT)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout
