"""inimage/apply.py, the command line: usage errors, a --check fast enough for every container start that
imports little, and the packages found on sys.path without --site."""

import subprocess
import sys
import time

from inimage import apply

from .tree import RUNNER


def test_check_is_fast_and_imports_little(cb, capsys):
    assert cb.apply().code == 0
    start = time.perf_counter()
    code = apply.main(["--check", "--record", str(cb.record), "--site", str(cb.site)])
    elapsed = time.perf_counter() - start
    assert code == 0, capsys.readouterr()
    assert elapsed < 0.1, f"--check took {elapsed * 1000:.1f} ms"

    # The copy alone, with the standard library alone (-I -S: no site-packages, no environment): every
    # module of the package is imported (apply imports them all), and --check loads no more than it needs.
    probe = (
        f"import sys; sys.path.insert(0, {str(cb.lib)!r})\n"
        "from inimage import apply\n"
        f"assert apply.main(['--check', '--record', {str(cb.record)!r}]) == 0\n"
        "print(sorted(m for m in ('subprocess', 'tempfile', 'importlib.metadata') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-I", "-S", "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_finds_packages_on_sys_path_without_site(cb):
    # find_spec and importlib.metadata locate them; importing vllm_gaudi would need Gaudi software
    cb.write("vllm_gaudi", "__init__.py", "raise ImportError('needs Gaudi software')\n")
    result = cb.apply(site=False, env={"PYTHONPATH": str(cb.site)})
    assert result.code == 0, result.out
    assert "self.pad_id = -1" in cb.read("vllm_gaudi", RUNNER)
    record = cb.record_json()
    assert record["packages"]["vllm_gaudi"]["location"] == str(cb.site / "vllm_gaudi")
    assert record["packages"]["vllm"]["version"] == "0.26.0"
    assert cb.run("--check", site=False).code == 0  # uses the record's locations


def test_usage_error_exits_2(cb):
    result = cb.run()
    assert result.code == 2
    assert "apply_all: usage error: say --profile NAME" in result.out
