"""The entrypoint's dry run prints exactly the recipe's `vllm serve` command; user args are appended."""

import shlex

from conftest import docker_run


def test_entrypoint_is_the_cookbooks(image_config, expect):
    assert image_config["Config"]["Entrypoint"] == ["python3", expect["paths"]["entrypoint"]]
    assert not image_config["Config"]["Cmd"]


def test_dry_run_prints_the_recipe_command(expect):
    out = docker_run(expect["image"], env={"COOKBOOK_DRY_RUN": "1"})
    assert out.returncode == 0, out.stderr
    assert shlex.split(out.stdout) == expect["command"]
    assert out.stdout.strip() == shlex.join(expect["command"])


def test_user_arguments_are_appended(expect):
    out = docker_run(expect["image"], "--cookbook-dry-run", "--port", "9000", "--max-num-seqs", "8")
    assert out.returncode == 0, out.stderr
    assert shlex.split(out.stdout) == expect["command"] + ["--port", "9000", "--max-num-seqs", "8"]


def test_the_final_command_is_checked(expect):
    """The entrypoint checks the final command before anything starts: a bad value is one line, exit 2."""
    out = docker_run(expect["image"], "--cookbook-dry-run", "--port", "not-a-port")
    assert out.returncode == 2 and out.stdout == ""
    assert "--port takes a whole number" in out.stderr and "Traceback" not in out.stderr
