"""The README's promises: two commands at the top, .ci/run runs the test one, the task list is current."""

import re
import subprocess
import sys
from pathlib import Path

from cookbook.paths import ROOT

README = (ROOT / "README.md").read_text()


def top_commands() -> list[str]:
    block = re.search(r"```sh\n(.*?)```", README, re.S).group(1)
    return [line for line in block.splitlines() if line.strip()]


def test_two_commands_at_the_top():
    build, test = top_commands()
    assert "invoke build --recipe qwen3.5-27b-fp8" in build and "--standin" in build
    assert "pytest" in test
    assert README.index("```sh") < README.index("## ")  # before any section


def test_ci_runs_the_readme_test_command():
    _, test = top_commands()
    ci = (ROOT / ".ci" / "run").read_text()
    assert test in ci.splitlines()


def test_task_list_is_current():
    invoke = Path(sys.executable).parent / "invoke"
    cmd = [str(invoke)] if invoke.exists() else [sys.executable, "-m", "invoke"]
    out = subprocess.run([*cmd, "--list"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    listed = set(re.findall(r"^  (\S+)", out, re.M))
    documented = set(re.findall(r"^  (\S+)  +", README.split("## Tasks", 1)[1].split("```", 2)[1], re.M))
    assert listed == documented


def test_exit_codes_are_documented():
    from cookbook import errors

    table = dict(re.findall(r"^\| (\d) \| (.+) \|$", README, re.M))
    assert "work ran and failed" in table[str(errors.FAILED)]
    assert "mistake" in table[str(errors.USER_MISTAKE)]
    assert "Docker engine or the network" in table[str(errors.ENGINE_OR_NETWORK)]
    assert "fixes.verify --base" in table[str(errors.PACK_DIFFERS)]
    assert "COOKBOOK_ALLOW_UNSAFE=1" in README
