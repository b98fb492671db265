"""cookbook/prove/serve.py: the `docker run` of the README's Serving section, composed without Docker (table
driven: runtime and device variables, secrets by name only, quoting), and the container context
manager on a real engine: the container is removed on success, on a server that never gets healthy
and on Ctrl-C."""

import os
import re
import shlex
import subprocess
import sys
import time
import uuid

import pytest

from cookbook.host import engine
from cookbook.host.errors import CheckFailure, UsageError
from cookbook.host.paths import ROOT
from cookbook.prove import serve
from cookbook.recipe import recipes

LOADED = recipes.load("qwen3.5-27b-fp8")
SECRET = "hf_s3cr3t-value-never-shown"


def spec(**kw) -> serve.RunSpec:
    return serve.spec_for(LOADED, **kw)


@pytest.mark.parametrize("kw,has,lacks", [
    # The README's command, detached and named.
    ({}, ["--runtime=habana", "-e HABANA_VISIBLE_DEVICES=all", "-e HF_TOKEN",
          f"-v {os.path.expanduser('~/.cache/huggingface')}:/root/.cache/huggingface", "-p 8000:8000",
          "--ipc=host", "--cap-add=sys_nice", "--detach --name cookbook-qwen3.5-27b-fp8",
          "gaudi-cookbook/qwen3.5-27b-fp8:v0.26.0"], []),
    # No Habana runtime (a CPU image): no runtime flag and no device variables.
    ({"runtime": ""}, ["-e HF_TOKEN", "--ipc=host"], ["--runtime", "HABANA_VISIBLE_DEVICES"]),
    ({"runtime": "runc"}, ["--runtime=runc"], ["HABANA_VISIBLE_DEVICES"]),
    # Labelled, so a stale container of the cookbook's is found by label.
    ({}, ["--label cookbook.container=serve", "--label cookbook.recipe=qwen3.5-27b-fp8"], []),
    ({"role": "smoke"}, ["--label cookbook.container=smoke", "-p 127.0.0.1:8000:8000"], []),
    ({"role": "bench"}, ["-p 127.0.0.1:8000:8000"], []),
    ({"env": {"VLLM_API_KEY": None}}, ["-e VLLM_API_KEY "], ["VLLM_API_KEY="]),  # by name
    ({"image": "reg.example:5000/x/y@sha256:" + "a" * 64}, ["reg.example:5000/x/y@sha256:" + "a" * 64], []),
    ({"port": 9001, "name": "mine"}, ["-p 9001:8000", "--name mine"], []),
    ({"hf_cache": ""}, [], ["-v "]),
    ({"env": {"VLLM_X": "a b"}, "options": ("--shm-size=8g",)}, ["-e 'VLLM_X=a b'", "--shm-size=8g"], []),
    # User arguments go after the image, quoted as typed.
    ({"args": ("--max-num-seqs", "16", "--chat-template", "a b")},
     ["gaudi-cookbook/qwen3.5-27b-fp8:v0.26.0 --max-num-seqs 16 --chat-template 'a b'"], []),
])
def test_run_argv(kw, has, lacks, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    argv = serve.run_argv(spec(**kw))
    line = shlex.join(argv)
    assert shlex.split(line) == argv  # what a dry run prints is what runs
    for words in has:
        assert words in line
    for words in lacks:
        assert words not in line
    assert SECRET not in line
    # The image comes after every docker option, the user's arguments after the image.
    image = argv.index(spec(**kw).image)
    assert all(not a.startswith("-") or a in kw.get("args", ()) for a in argv[image + 1:])


@pytest.mark.parametrize("kw,words", [
    ({"image": "Not An Image"}, "not an image reference"),
    ({"name": "-x"}, "not a container name"),
    ({"port": 70000}, "not between 1 and 65535"),
    ({"runtime": "--privileged"}, "not a runtime name"),
    ({"env": {"HF_TOKEN": "x"}}, "by name, never as a value"),
    ({"env": {"VLLM_API_KEY": "x"}}, "by name, never as a value"),
    ({"env": {"my_secret": "x"}}, "by name, never as a value"),
    ({"image": "x/y@sha256:abc"}, "64 lower-case hex"),
    ({"image": "x/y@md5:" + "a" * 64}, "64 lower-case hex"),
    ({"options": ("--privileged",)}, "allowed: --shm-size"),
])
def test_refusals(kw, words):
    with pytest.raises(UsageError, match=words):
        serve.check_spec(spec(**kw))


def test_dry_run_prints_the_command_without_the_token():
    env = {**os.environ, "HF_TOKEN": SECRET, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "invoke", "serve", "--dry-run", "--port", "8123", "--",
                          "--max-num-seqs", "4"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "-e HF_TOKEN " in out.stdout and "-p 8123:8000" in out.stdout and out.stdout.rstrip().endswith(
        "--max-num-seqs 4")
    assert SECRET not in out.stdout + out.stderr


def test_serve_fetches_the_weights_first_unless_told_not_to(tmp_path):
    """The dry run says what the weights step would fetch, and into which cache; --no-fetch leaves it out.
    (The fetch itself: tests/prove/test_weights.py, through `invoke serve` against a stand-in Hub.)"""
    env = {**os.environ, "HF_TOKEN": SECRET, "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "invoke", "serve", "--dry-run", "--hf-cache", str(tmp_path / "hf")]
    out = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    first, argv = out.stdout.splitlines()
    assert first.startswith(f"weights  fetch Qwen/Qwen3.5-27B-FP8 at main into {tmp_path / 'hf' / 'hub'}")
    assert "token: from HF_TOKEN" in first and SECRET not in out.stdout + out.stderr
    assert argv.split()[1] == "run" and not (tmp_path / "hf").exists()
    bare = subprocess.run([*args, "--no-fetch"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert bare.returncode == 0 and len(bare.stdout.splitlines()) == 1 and bare.stdout.split()[1] == "run"


@pytest.mark.parametrize("option,said", [
    ("--shm-size=8g", None), ("--ulimit=memlock=-1:-1", None), ("--ulimit=nofile=65536", None),
    ("--network=gaudi-net", None), ("--volume=/data/models/qwen:/models/qwen:ro", None),
    ("-v=/data/m:/models/m:ro", None),
    ("--privileged", "--flag=value"), ("--privileged=true", "not one --option takes"),
    ("--entrypoint=sh", "not one --option takes"), ("--env=HF_TOKEN=hf_x", "not one --option takes"),
    ("-e=A=1", "not one --option takes"), ("--cap-add=ALL", "not one --option takes"),
    ("--mount=type=bind,src=/,dst=/host", "not one --option takes"), ("--pid=host", "not one --option takes"),
    ("--device=/dev/mem", "not one --option takes"), ("--runtime=runc", "not one --option takes"),
    ("-v=/:/host", "HOSTDIR:/models"), ("--volume=/:/models/root:ro", "host's own"),
    ("--volume=/data/m:/models/m", "read-only"), ("--volume=/data/m:/models/m:rw", "read-only"),
    ("--volume=/var/run/docker.sock:/models/s:ro", "host's own"), ("--volume=/etc:/models/etc:ro", "host's own"),
    ("--volume=/home/u/docker.sock:/models/s:ro", "host's own"), ("--volume=rel/m:/models/m:ro", "absolute"),
    ("--volume=/data/m:/root/.ssh:ro", "under /models/"), ("--volume=/data/m:/models/../etc:ro", "under /models/"),
    ("--network=host", "not host"), ("--network=container:abc", "not host"), ("--shm-size=lots", "a size"),
    ("--ulimit=rtprio=99", "a ulimit"), ("shm-size=8g", "not a docker run option"),
])
def test_option_problem(option, said):
    got = serve.option_problem(option)
    assert (got is None) if said is None else (said in got), got


@pytest.mark.parametrize("args,said", [
    (["--option=--privileged"], "allowed: --shm-size=SIZE"),
    (["--option=--env=HF_TOKEN=" + SECRET], "--option '--env=...': this docker run option is not one --option takes"),
    (["--option=-eHF_TOKEN:" + SECRET], "--option (the value given is not shown): give it as --flag=value"),
    (["--option=" + SECRET], "--option (the value given is not shown): not a docker run option"),
    (["--env", "HF_TOKEN=" + SECRET], "by name, never as a value"),
    (["--env", "HF_TOKEN " + SECRET], "--env: an env name is letters"),
    (["--env", "HF_TOKEN:" + SECRET + "=x"], "(what was given is not shown)"),
])
def test_the_task_refuses_before_any_work_and_never_echoes_a_token(args, said):
    out = subprocess.run([sys.executable, "-m", "invoke", "serve", "--dry-run", *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and said in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert "docker run" not in out.stdout
    assert SECRET not in out.stdout + out.stderr


@pytest.mark.parametrize("folder", ["/", "/var/run", "/run/docker", "/etc", "/proc/1", "/var/run/docker.sock",
                                    "/tmp/../etc"])
def test_the_hf_cache_is_refused_where_a_volume_is(folder):
    """--hf-cache is mounted read-write: a folder a read-only --volume may not come from is refused too,
    before any work (the weights step would write into it first)."""
    out = subprocess.run([sys.executable, "-m", "invoke", "serve", "--dry-run", "--hf-cache", folder], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "is the host's own, not a folder for models" in out.stderr, out.stderr
    assert out.stderr.startswith(f"error: --hf-cache {folder}: ") and "docker run" not in out.stdout


def test_a_symlink_to_a_host_folder_is_refused(tmp_path):
    (tmp_path / "cache").symlink_to("/etc")
    assert "/etc is the host's own" in serve.host_folder_problem(str(tmp_path / "cache"))
    assert "/etc is the host's own" in serve.option_problem(f"--volume={tmp_path / 'cache'}:/models/m:ro")
    assert serve.host_folder_problem(str(tmp_path)) is None


def test_smoke_publishes_on_loopback_only():
    image = "reg.example:5000/qwen@sha256:" + "b" * 64  # the reference `publish` prints
    out = subprocess.run([sys.executable, "-m", "invoke", "smoke", "--dry-run", "--image", image], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "-p 127.0.0.1:8000:8000" in out.stdout and image in out.stdout


# On the engine: a Debian rootfs container with python3's http.server stands for a server (a file named
# `health` answers 200); the vLLM container of test_bench.py goes through the same code.
HEALTHY = "mkdir -p /srv && echo ok > /srv/health && cd /srv && exec python3 -m http.server {port}"
NEVER = "cd /tmp && exec python3 -m http.server {port}"  # /health is a 404 for ever


def http_spec(image: str, script: str, port: int) -> serve.RunSpec:
    return serve.RunSpec(image=image, name=f"cookbook-test-serve-{uuid.uuid4().hex[:8]}", port=port,
                         container_port=port, runtime="", hf_cache=None,
                         entrypoint="sh", args=("-c", script.format(port=port)))


def exists(name: str) -> bool:
    return engine.docker("inspect", name, check=False).returncode == 0


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_container_removed_after_use(rootfs, tmp_path):
    s = http_spec(rootfs, HEALTHY, free_port())
    with serve.container(s, tmp_path / "log.txt", timeout_s=60) as running:
        assert exists(s.name) and serve.probe(running.url + "/health")
        assert running.image_id.startswith("sha256:")
    assert not exists(s.name)
    assert "GET /health" in (tmp_path / "log.txt").read_text()  # the container's log was kept


def test_container_removed_when_never_healthy(rootfs, tmp_path):
    s = http_spec(rootfs, NEVER, free_port())
    with pytest.raises(CheckFailure, match="did not answer within 3s"):
        with serve.container(s, tmp_path / "log.txt", timeout_s=3):
            pytest.fail("never healthy, never entered")
    assert not exists(s.name)


def test_container_removed_when_it_dies(rootfs, tmp_path):
    s = http_spec(rootfs, "echo dying; exit 3", free_port())
    with pytest.raises(CheckFailure, match="stopped before") as info:
        with serve.container(s, tmp_path / "log.txt", timeout_s=60):
            pass
    assert "dying" in str(info.value)  # the log's tail is in the message
    assert not exists(s.name)


def test_container_removed_on_ctrl_c(rootfs, tmp_path):
    s = http_spec(rootfs, HEALTHY, free_port())
    with pytest.raises(KeyboardInterrupt):
        with serve.container(s, tmp_path / "log.txt", timeout_s=60):
            assert exists(s.name)
            raise KeyboardInterrupt
    assert not exists(s.name)


# --- Only what this run created is removed; SIGTERM cleans up as Ctrl-C does ---------------------------

def test_a_second_serve_of_the_same_name_leaves_the_first_running(rootfs, tmp_path):
    """The second `docker run` fails on the name clash: it created nothing, so it removes nothing."""
    s = http_spec(rootfs, HEALTHY, free_port())
    serve.serve(LOADED, s, tmp_path, timeout_s=60, dry_run=False)
    try:
        first = engine.docker("inspect", "--format", "{{.Id}}", s.name).stdout.strip()
        with pytest.raises(UsageError, match="already in use") as err:  # the name given: exit 2, with a fix
            serve.serve(LOADED, s, tmp_path, timeout_s=60, dry_run=False)
        assert err.value.exit_code == 2 and "another --name" in err.value.hint
        state = engine.docker("inspect", "--format", "{{.State.Running}}", first, check=False).stdout.strip()
        assert state == "true"  # the user's first server is still up
        labels = engine.docker("inspect", "--format", "{{json .Config.Labels}}", s.name).stdout
        assert '"cookbook.container":"serve"' in labels
    finally:
        engine.docker("rm", "--force", s.name, check=False)


def followers(*names: str) -> list[str]:
    """`docker logs --follow` processes of this container (by id or name), from /proc."""
    found = []
    for proc in os.listdir("/proc"):
        try:
            with open(f"/proc/{proc}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
        except OSError:
            continue
        if b"logs" in cmd and any(n.encode() in cmd for n in names):
            found.append(proc)
    return found


SIGTERMED = """
import sys, time
from pathlib import Path
from cookbook.prove import serve
spec = serve.RunSpec(image=sys.argv[1], name=sys.argv[2], port=int(sys.argv[3]), container_port=int(sys.argv[3]),
                     runtime="", hf_cache=None, entrypoint="sh", args=("-c", sys.argv[4]))
with serve.container(spec, Path(sys.argv[5]), timeout_s=60) as running:
    print(running.name, flush=True)
    time.sleep(120)
"""


def test_sigterm_removes_the_container_and_its_log_follower(rootfs, tmp_path):
    import signal

    port = free_port()
    name = f"cookbook-test-serve-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen([sys.executable, "-c", SIGTERMED, rootfs, name, str(port), HEALTHY.format(port=port),
                             str(tmp_path / "log.txt")], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == name
        cid = engine.docker("inspect", "--format", "{{.Id}}", name).stdout.strip()
        assert followers(cid, name)
        proc.send_signal(signal.SIGTERM)  # what a CI cancel or `timeout` sends
        proc.wait(timeout=60)
        assert not exists(name)
        time.sleep(1)
        assert followers(cid, name) == []
    finally:
        proc.kill()
        engine.docker("rm", "--force", name, check=False)


def test_sigterm_in_the_weights_step_ends_serve_as_ctrl_c_does(tmp_path):
    """`invoke serve` signalled while its weights step waits on a Hub that never answers (a listener
    that accepts no connection): it ends at once, exit 1, no traceback, no container started."""
    import select
    import signal
    import socket

    from .. import interrupts
    from .test_weights import tiny_hub_recipe

    name = f"cookbook-test-serve-{uuid.uuid4().hex[:8]}"
    with socket.create_server(("127.0.0.1", 0)) as hub:
        proc = interrupts.start(tmp_path / "tmp", "serve", "--recipe", str(tiny_hub_recipe(tmp_path)), "--name", name,
                                "--hf-cache", str(tmp_path / "hf"), "--log-dir", str(tmp_path / "serve"),
                                "--runtime", "", env={"HF_ENDPOINT": f"http://127.0.0.1:{hub.getsockname()[1]}"})
        try:
            interrupts.wait_for(lambda: select.select([hub], [], [], 0)[0], proc, 120, "request to the Hub")
            _, stderr = interrupts.interrupt(proc, signal.SIGTERM, timeout=30)
        finally:
            proc.kill()
    assert proc.returncode == 1, stderr[-2000:]
    assert "Traceback" not in stderr
    assert not exists(name)


@pytest.mark.parametrize("given,cards,want,said", [
    (None, 4, "all", None),
    ("all", 4, "all", None),
    ("0,1,2,3", 4, "0,1,2,3", None),
    (" 4, 5,6 ,7", 4, "4,5,6,7", None),
    ("3", 1, "3", None),
    ("0,1", 4, None, "names 2 card(s); the recipe serves on 4"),
    ("0,1,2,3,4", 4, None, "names 5 card(s)"),
    ("0,1,1,2", 4, None, "a card is named twice"),
    ("0-3", 4, None, "not a list of card indices"),
    ("0,,1,2", 4, None, "not a list of card indices"),
    ("-1,0,1,2", 4, None, "not a list of card indices"),
    ("", 1, None, "not a list of card indices"),
])
def test_devices_value(given, cards, want, said):
    if said is None:
        assert serve.devices_value(given, cards) == want
    else:
        with pytest.raises(UsageError, match=re.escape(said)):
            serve.devices_value(given, cards)


@pytest.fixture(scope="module")
def four_cards(tmp_path_factory):
    """tests/multicard.py's recipe, by path, for the real task."""
    from .. import multicard

    return str(multicard.write(tmp_path_factory.mktemp("tp4") / "recipes"))


@pytest.mark.parametrize("args,code,said", [
    ([], 0, "-e HABANA_VISIBLE_DEVICES=all "),
    (["--cards", "4,5,6,7"], 0, "-e HABANA_VISIBLE_DEVICES=4,5,6,7 "),
    (["--cards", "0,1"], 2, "--cards 0,1 names 2 card(s); the recipe serves on 4"),
    (["--cards", "0,1,2,3", "--runtime", ""], 2, "only the habana runtime hands over"),
])
def test_serve_shows_the_cards_a_multi_card_recipe_sees(four_cards, args, code, said):
    out = subprocess.run([sys.executable, "-m", "invoke", "serve", "--dry-run", "--no-fetch", "--recipe", four_cards,
                          *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == code, out.stderr
    assert said in (out.stdout if code == 0 else out.stderr) and "Traceback" not in out.stderr
    if code == 0:
        assert out.stdout.count("HABANA_VISIBLE_DEVICES") == 1
