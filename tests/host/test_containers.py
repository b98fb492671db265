"""The one container lifecycle: its argv rules (pure), then on the real engine with the stand-in rootfs
image (a small Debian with sh and sleep, imported from its cached tarball; never pulled): made, waited on,
read and removed by id on every exit path, SIGTERM included, and what the engine says translated once."""

import json
import signal
import subprocess
import sys
import textwrap
import uuid

import pytest

from cookbook.host import containers, engine
from cookbook.host.errors import CheckFailure, EngineError, ImageMissing, UsageError
from cookbook.host.paths import ROOT

ARGV = [
    # (case, verb, image, command, labels, options, expected)
    ("a created container: role label first, then the image and its command", "create", "img", ["true"], None,
     ["--network=none"], ["create", "--label", "cookbook.container=r", "--network=none", "img", "true"]),
    ("labels in the order given, before the options", "run", "img", [], {"a": "1", "b": "x=y"}, ["--detach"],
     ["run", "--label", "cookbook.container=r", "--label", "a=1", "--label", "b=x=y", "--detach", "img"]),
]


@pytest.mark.parametrize("case,verb,image,command,labels,options,want", ARGV, ids=[a[0] for a in ARGV])
def test_argv(case, verb, image, command, labels, options, want):
    assert containers.argv(verb, image, command, role="r", labels=labels, options=options) == want


@pytest.mark.parametrize("verb", ["rm", "exec", "start", ""])
def test_only_run_and_create_make_containers(verb, tmp_path):
    with pytest.raises(ValueError):
        containers.argv(verb, "img", role="r")
    with pytest.raises(ValueError):
        containers.identified([verb or "x", "img"], tmp_path / "cid", "i")


def test_the_id_file_and_instance_label_follow_the_verb(tmp_path):
    got = containers.identified(["run", "--detach", "img", "sh"], tmp_path / "cid", "abc")
    assert got == ["run", f"--cidfile={tmp_path / 'cid'}", "--label", "cookbook.instance=abc", "--detach", "img", "sh"]


# --- On the engine ----------------------------------------------------------------------------------

@pytest.fixture
def role():
    """A role of this test's own: what it leaves is found by its label, and removed after the assertions."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    yield name
    containers.sweep(containers.LABEL, name)


def left(role: str) -> list[str]:
    out = engine.docker("ps", "--all", "--quiet", "--filter", f"label={containers.LABEL}={role}")
    return out.stdout.split()


def test_made_is_removed_by_id_after_the_block_and_on_an_error(rootfs, role):
    args = containers.argv("run", rootfs, ["sleep", "60"], role=role, options=["--detach"])
    with containers.made(args, what="test") as cid:
        assert containers.running(cid) and left(role) == [cid[:12]]
        labels = json.loads(engine.docker("inspect", "--format", "{{json .Config.Labels}}", cid).stdout)
        assert labels[containers.LABEL] == role and len(labels[containers.INSTANCE_LABEL]) == 32
        assert containers.image_of(cid) == engine.inspect(rootfs)["Id"]
    assert left(role) == []
    with pytest.raises(RuntimeError, match="inside"):
        with containers.made(args, what="test"):
            raise RuntimeError("inside")
    assert left(role) == []


def test_wait_and_logs(rootfs, role):
    args = containers.argv("run", rootfs, ["sh", "-c", "echo out; echo err >&2; exit 3"], role=role,
                           options=["--detach"])
    with containers.made(args, what="test") as cid:
        assert containers.wait(cid, timeout=60) == 3
        assert set(containers.logs(cid).split()) == {"out", "err"}
        assert not containers.running(cid)


def test_an_image_that_cannot_start_is_refused_as_the_caller_says_and_removed(rootfs, role):
    """The engine creates the container, then cannot start it: the caller's class, and the container the
    engine made is removed by the id the client wrote."""
    args = containers.argv("run", rootfs, role=role, options=["--detach", "--entrypoint=/no/such/program"])
    with pytest.raises(CheckFailure, match="^the thing did not start: the Docker engine said: .*no/such/program"):
        containers.make(args, what="the thing did not start", refused=CheckFailure)
    assert left(role) == []


def test_a_missing_image_is_exit_2_and_a_taken_name_touches_nothing(rootfs, role):
    missing = containers.argv("create", "cookbook-test/no-such-image:never", role=role, options=["--pull=never"])
    with pytest.raises(ImageMissing) as err:
        containers.make(missing, what="test")
    assert err.value.exit_code == 2 and "No such image" in err.value.what
    name = f"cookbook-test-{uuid.uuid4().hex[:8]}"
    args = containers.argv("create", rootfs, ["true"], role=role, options=[f"--name={name}"])
    with containers.made(args, what="test") as first:
        with pytest.raises(UsageError, match="already in use") as err:
            containers.make(args, what="test")
        assert err.value.exit_code == 2 and left(role) == [first[:12]]  # the first one is not removed
    assert left(role) == []


def test_a_container_whose_id_was_never_written_is_found_by_its_instance_label(rootfs, role, tmp_path):
    """An interrupt between the engine creating the container and the client writing --cidfile."""
    instance = uuid.uuid4().hex
    engine.docker("create", "--label", f"{containers.INSTANCE_LABEL}={instance}", "--label",
                  f"{containers.LABEL}={role}", rootfs, "true")
    containers._discard(tmp_path / "never-written", instance)
    assert left(role) == []


def test_attached_gives_the_exit_and_removes_a_timed_out_container(rootfs, role):
    out = containers.attached(containers.argv("run", rootfs, ["sh", "-c", "echo hi; exit 5"], role=role,
                                              options=["--rm"]), timeout=60, text=True)
    assert (out.returncode, out.stdout) == (5, "hi\n") and left(role) == []
    with pytest.raises(subprocess.TimeoutExpired):  # killing the client leaves its container running
        containers.attached(containers.argv("run", rootfs, ["sleep", "60"], role=role, options=["--rm"]),
                            timeout=2, text=True)
    assert left(role) == []


# SIGTERM to a process holding a container in the main thread (made) and one running it from a worker thread
# (attached, as the fix lab's pool does): the worker may start no new child after the interrupt, but its
# container is removed all the same.
SIGTERMED = textwrap.dedent("""
    import sys, time
    from cookbook.host import containers, signals
    image, role = sys.argv[1], sys.argv[2]
    with signals.interruptible(), signals.pool(1) as pool:
        pool.submit(containers.attached, containers.argv("run", image, ["sleep", "120"], role=role + "-worker",
                                                         options=["--rm"]), timeout=300)
        with containers.made(containers.argv("run", image, ["sleep", "120"], role=role, options=["--detach"]),
                             what="test") as cid:
            print(cid, flush=True)
            time.sleep(120)
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_removes_every_container_by_id(rootfs, role, sig):
    proc = subprocess.Popen([sys.executable, "-c", SIGTERMED, rootfs, role], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        cid = proc.stdout.readline().strip()
        assert cid, proc.stderr.read()
        deadline = 100
        while not left(role + "-worker") and deadline:  # the worker's client may still be starting it
            deadline -= 1
            subprocess.run(["sleep", "0.1"])
        assert left(role) == [cid[:12]] and len(left(role + "-worker")) == 1
        proc.send_signal(sig)
        proc.wait(timeout=60)
        assert left(role) == [] and left(role + "-worker") == []
    finally:
        proc.kill()
        containers.sweep(containers.LABEL, role + "-worker")


ENGINE_SAYS = [
    # (case, what the engine said, class, exit code)
    ("no daemon", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon "
     "running?", EngineError, 3),
    ("no registry", "Unable to find image 'x:1' locally\ndocker: Error response from daemon: Get "
     "\"https://registry-1.docker.io/v2/\": dial tcp: lookup registry-1.docker.io: no such host.", EngineError, 3),
    ("no such image", "Error: No such image: x:1", ImageMissing, 2),
    ("not pullable", "Unable to find image 'x:1' locally\ndocker: Error response from daemon: pull access denied "
     "for x, repository does not exist or may require 'docker login'", ImageMissing, 2),
    ("a taken name", 'docker: Error response from daemon: Conflict. The container name "/a" is already in use by '
     'container "0123". You have to remove (or rename) that container to be able to reuse that name.',
     UsageError, 2),
    ("anything else: the caller's class", "Error response from daemon: OCI runtime create failed: exec: \"sleep\": "
     "executable file not found in $PATH: unknown", CheckFailure, 1),
]


@pytest.mark.parametrize("case,said,cls,code", ENGINE_SAYS, ids=[c[0] for c in ENGINE_SAYS])
def test_one_translation_of_what_the_engine_says(case, said, cls, code):
    err = engine.failure("doing it", said, refused=CheckFailure)
    assert type(err) is cls and err.exit_code == code and err.what.startswith("doing it: ")
    assert "\n" not in err.what and "\x1b" not in engine.failure("x", "\x1b[31mred").what


# --- No container is made or removed outside cookbook/host/ --------------------------------------------

VERBS = {"run", "create", "rm", "container"}  # `docker container rm` too
DOCKER_NAMES = {"DOCKER", "docker"}


def stray_container_calls(source: str) -> list[str]:
    """What in `source` makes or removes a container by itself: a `docker run|create|rm` argv (a list, a
    tuple or a call's arguments that begin with the verb, or follow a client path or `docker`) not built by
    containers.argv, an id file of its own (--cidfile), or the docker SDK's containers.run/create and remove."""
    import ast

    found = []

    def head(node: ast.AST) -> bool:  # a docker client: its path, DOCKER, "docker"
        return ((isinstance(node, ast.Attribute) and node.attr == "path") or (isinstance(node, ast.Name) and
                node.id in DOCKER_NAMES) or (isinstance(node, ast.Constant) and node.value in DOCKER_NAMES))

    def verb(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and node.value in VERBS

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "--cidfile" in node.value:
            found.append(f"line {node.lineno}: --cidfile")
        if isinstance(node, (ast.List, ast.Tuple)):
            items = node.elts
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "containers":
                continue  # the lifecycle's own functions (containers.argv("run", ...))
            if isinstance(func, ast.Attribute) and func.attr in ("run", "create") and isinstance(
                    func.value, ast.Attribute) and func.value.attr == "containers":
                found.append(f"line {node.lineno}: the SDK's containers.{func.attr}")
            if isinstance(func, ast.Attribute) and func.attr == "remove" and any(k.arg == "force"
                                                                                 for k in node.keywords):
                found.append(f"line {node.lineno}: the SDK's remove(force=...)")
            items = node.args
        else:
            continue
        if (items and verb(items[0])) or any(head(a) and verb(b) for a, b in zip(items, items[1:], strict=False)):
            found.append(f"line {node.lineno}: a docker {next(i.value for i in items if verb(i))} argv")
    return found


STRAY = [
    ("the CLI through engine.docker", 'engine.docker("rm", "--force", cid)', 1),
    ("an argv list", 'argv = ["run", "--rm", image]', 1),
    ("a client path before the verb", "signals.run([c.path, 'create', image])", 1),
    ("an id file of its own", 'engine.docker(*argv[:1], f"--cidfile={f}")', 1),
    ("the SDK", "client.containers.run(image, detach=True)\nc.remove(force=True)", 2),
    ("the lifecycle's own argv is fine", 'containers.argv("run", image, role="x")', 0),
    ("other words are fine", 'STEPS = ("doctor", "run", "stop")\nprint("docker run -d x")', 0),
]


@pytest.mark.parametrize("case,source,count", STRAY, ids=[s[0] for s in STRAY])
def test_stray_container_calls_are_found(case, source, count):
    assert len(stray_container_calls(source)) == count


def test_no_container_is_made_or_removed_outside_host():
    outside = [p for p in (ROOT / "cookbook").rglob("*.py") if "host" not in p.relative_to(ROOT / "cookbook").parts]
    assert len(outside) > 50
    found = {str(p.relative_to(ROOT)): stray for p in outside if (stray := stray_container_calls(p.read_text()))}
    assert found == {}, "make and remove containers through cookbook/host/containers.py"


def sdk_raised(case: str) -> Exception:
    """A real docker SDK or requests exception, as the SDK raises it for `case`."""
    import docker.errors
    import requests

    return {"image not found": docker.errors.ImageNotFound("404 Client Error: Not Found ('No such image: x:1')"),
            "a refusal": docker.errors.APIError("500", explanation="OCI runtime create failed: exec: \"sleep\""),
            "a taken name": docker.errors.APIError("409", explanation='Conflict. The container name "/a" is already '
                                                   'in use by container "0123"'),
            "no engine": requests.exceptions.ConnectionError("('Connection aborted.', FileNotFoundError(2))"),
            "no socket": docker.errors.DockerException("Error while fetching server API version")}[case]


@pytest.mark.parametrize("raised,cls,code", [
    ("image not found", ImageMissing, 2), ("a refusal", CheckFailure, 1), ("a taken name", UsageError, 2),
    ("no engine", EngineError, 3), ("no socket", EngineError, 3),
])
def test_the_sdks_errors_are_translated_the_same_way(raised, cls, code):
    with pytest.raises(cls) as err:
        with engine.sdk_errors("reading it", refused=CheckFailure):
            raise sdk_raised(raised)
    assert type(err.value) is cls and err.value.exit_code == code and err.value.what.startswith("reading it: ")


@pytest.mark.parametrize("answers, removed, calls", [
    ([(0, "")], True, 1),
    ([(1, "Error response from daemon: cannot remove container: container is starting"), (0, "")], True, 2),
    ([(1, "Error: No such container: abc")], False, 1),
    ([(1, "Error response from daemon: conflict")] * 5, False, 5),
])
def test_a_removal_the_engine_refuses_while_it_starts_the_container_is_tried_again(monkeypatch, answers, removed,
                                                                                   calls):
    """A client cut short by a signal leaves the daemon starting its container, and a removal then may be
    refused: it is tried again (the race itself cannot be made to happen on demand, so the engine's answers
    stand in for it here)."""
    said = iter(answers)
    asked = []

    def answer(*args, timeout=120):
        asked.append(args)
        code, err = next(said)
        return subprocess.CompletedProcess(args, code, "", err)

    monkeypatch.setattr(containers, "_quiet", answer)
    monkeypatch.setattr(containers.time, "sleep", lambda s: None)
    assert containers.remove("abc") is removed and len(asked) == calls
    assert containers.remove("") is False
