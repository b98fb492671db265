"""cookbook/host/cli.py: the tasks' edge said once. The shared options (one meaning per short flag in every
task), how an option's text is read, the one place that raises invoke's Exit, and the README's exit codes
through the real `invoke`, one task per code."""

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cookbook.host import cli
from cookbook.host.errors import UsageError
from cookbook.host.paths import ROOT


@pytest.mark.parametrize("items,expect,error", [
    (["A=1", "B=x=y"], {"A": "1", "B": "x=y"}, None),
    (["A"], {"A": None}, None),  # passed through from the caller's environment by name
    (["1A=2"], None, "an env name is letters"),
    (["HF_TOKEN hf_pasted=x"], None, "what was given is not shown"),  # a pasted token is never echoed
])
def test_parse_env(items, expect, error):
    if error:
        with pytest.raises(UsageError, match=error) as err:
            cli.parse_env(items)
        assert items[0] not in str(err.value) and "hf_pasted" not in str(err.value)
    else:
        assert cli.parse_env(items) == expect


@pytest.mark.parametrize("remainder,argv,expect", [
    ("--a 'b c'", ["invoke", "serve", "--", "--a", "b c"], ("--a", "b c")),  # argv as typed wins
    ("--a 'b c'", ["python"], ("--a", "b c")),
    ("", ["invoke", "serve"], ()),
])
def test_user_args(remainder, argv, expect):
    assert cli.user_args(remainder, argv) == expect


@pytest.mark.parametrize("value, option, kind, expect", [
    ("8123", "--port", int, 8123), ("0.5", "--scale", float, 0.5), ("x", "--port", int, "--port takes a whole"),
    ("1.5", "--repeats", int, "--repeats takes a whole number, got '1.5'"), (None, "--timeout", float, "a number"),
])
def test_number(value, option, kind, expect):
    if isinstance(expect, str):
        with pytest.raises(UsageError, match=re.escape(expect)):
            cli.number(value, option, kind)
    else:
        assert cli.number(value, option, kind) == expect


def test_given_reads_each_option_once():
    class Context:
        remainder = "--max-num-seqs 4"

    c = Context()
    got = cli.given(c, {"c": c, "cli": cli, "port": "8123", "env": ["A=1"], "option": ["--shm-size=1g"],
                        "timeout": "60", "runtime": "", "out": "o", "only": None, "name": None}, words=True)
    assert got == {"port": 8123, "env": {"A": "1"}, "option": ("--shm-size=1g",), "timeout": 60.0,
                   "runtime": None, "out": Path("o"), "only": (), "name": None,
                   "args": cli.user_args("--max-num-seqs 4")}


def test_a_short_flag_means_one_option_in_every_task():
    import tasks

    meaning: dict[str, set[str]] = {}
    for name in tasks.ns.task_names:
        for arg in tasks.ns[name].get_arguments():
            for short in (n for n in arg.names if len(n) == 1):
                meaning.setdefault(short, set()).add(arg.name)
    assert {k: v for k, v in meaning.items() if len(v) > 1} == {}
    assert "h" not in meaning  # -h is invoke's --help
    assert meaning == {"r": {"recipe"}, "d": {"dry_run"}}


def test_a_shared_option_has_one_default():
    """The options of OPTIONS are declared once: their default is the same in every task that takes them."""
    import inspect

    import tasks

    defaults: dict[str, set] = {}
    for name in tasks.ns.task_names:
        for param in inspect.signature(tasks.ns[name].body).parameters.values():
            # required ones aside; None where it means "all" (validate: every recipe, fixes.list: every
            # profile); scale, which smoke reads as a shrink factor
            if param.name in cli.OPTIONS and param.default not in (param.empty, None) and param.name != "scale":
                defaults.setdefault(param.name, set()).add(repr(param.default))
    assert {k: v for k, v in defaults.items() if len(v) > 1} == {}


def test_the_chain_options_are_the_tasks_read_once():
    """chain.Options takes the chain task's options by their names, read by cli.given; its defaults are the
    task's."""
    import inspect

    import tasks
    from cookbook import chain

    class Context:
        remainder = ""

    c = Context()
    defaults = {p.name: p.default for p in inspect.signature(tasks.chain.body).parameters.values()
                if p.name not in ("c", "recipe", "dry_run")}
    got = cli.given(c, defaults)
    assert chain.Options(**{**got, "skip": chain.check_skip(got["skip"])}) == chain.Options()


# The one place that raises invoke's Exit is cli.edge. Calls are found with ast, so the console-script text
# standin.py and cpubase.py write into images (`sys.exit(main())` in a string) is not one. inimage/ (the
# applier) runs inside the image at build time, stdlib only (no invoke, no cookbook): it keeps its own
# `sys.exit` codes, the entrypoint's, and is not read here.
def exits(tree: ast.AST) -> list[int]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            owner = getattr(f.value, "id", "") if isinstance(f, ast.Attribute) else ""
            if name == "Exit" or (owner == "sys" and name == "exit"):
                found.append(node.lineno)
    return found


def strays(root: Path) -> list[str]:
    lab = root / "cookbook" / "fixpack" / "lab"  # the lab's harness: scripts of the lab's own environment
    files = [root / "tasks.py", *sorted(p for p in (root / "cookbook").rglob("*.py") if not p.is_relative_to(lab))]
    return [f"{path.relative_to(root)}:{line}" for path in files
            if path.is_file() and path != root / "cookbook" / "host" / "cli.py"
            for line in exits(ast.parse(path.read_text()))]


def test_nothing_but_the_edge_exits():
    assert strays(ROOT) == []


def test_the_exit_grep_sees_a_stray(tmp_path):
    (tmp_path / "cookbook" / "prove").mkdir(parents=True)
    (tmp_path / "tasks.py").write_text("raise Exit('x', code=1)\n")
    (tmp_path / "cookbook" / "prove" / "x.py").write_text("import sys\n\nsys.exit(3)\ntext = 'sys.exit(main())'\n")
    assert strays(tmp_path) == ["tasks.py:1", "cookbook/prove/x.py:3"]


def invoke(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


@pytest.mark.parametrize("args, env, code, words", [
    (("validate", "--recipe", "nope"), {}, 2, "unknown recipe 'nope'"),
    (("serve", "--port", "x", "--dry-run"), {}, 2, "--port takes a whole number"),
    (("build", "--standin"), {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}, 3, "no Docker daemon answers"),
    (("doctor",), {}, 1, "no Gaudi on this host"),  # a failing verdict with readings: tests/prove/test_doctor.py
])
def test_the_readme_exit_codes_through_invoke(args, env, code, words):
    if args == ("doctor",) and shutil.which("hl-smi"):
        pytest.skip("hl-smi is installed: this host has Gaudi")
    out = invoke(*args, **env)
    assert out.returncode == code, out.stdout + out.stderr
    said = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert len(said) == 1 and words in said[0] and "Traceback" not in out.stderr, out.stderr
