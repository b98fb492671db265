"""The one container lifecycle: every container the cookbook makes is made, waited on, read and removed here.

A container is made with `docker run` or `docker create` through the CLI, with `--cidfile`: the client
writes the id as soon as the engine has created the container, so one whose start fails, or whose client
is interrupted after that, is still removed by its id. Each call also labels its container with an id of
its own (INSTANCE_LABEL): in the instant between the engine creating it and the client writing the file,
an interrupt leaves no id, and the container is found by that label instead. Containers are removed by id,
never by name (the name may be another container's), on every exit path: the block's end, an error, and
SIGTERM or SIGINT (signals.interruptible turns both into KeyboardInterrupt, so `finally` runs).

Removal is a short call that is never refused: it runs outside signals.run's process groups, so a worker
thread may clean up after an interrupt (signals refuses such a thread any new child) and the removal is not
killed by the interrupt it cleans up after. What the engine says on a failure is translated once, by
engine.failure.
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from . import engine, signals
from .errors import CookbookError, EngineError
from .names import Label

LABEL = Label.CONTAINER  # every container the cookbook makes: its role (serve, image-check, ...)
INSTANCE_LABEL = Label.INSTANCE  # one value per container made: found by it when the id was not written
VERBS = ("run", "create")


def argv(verb: str, image: str, command: Sequence[str] = (), *, role: str, labels: Mapping[str, str] | None = None,
         options: Sequence[str] = ()) -> list[str]:
    """`docker VERB` arguments (after `docker`) for a container of `image` in `role`: the role's label, the
    caller's labels, then its options, the image and the command."""
    if verb not in VERBS:
        raise ValueError(f"a container is made by {' or '.join(VERBS)}, not {verb!r}")
    out = [verb, "--label", f"{LABEL}={role}"]
    for key, value in (labels or {}).items():
        out += ["--label", f"{key}={value}"]
    return [*out, *options, image, *command]


def identified(args: Sequence[str], cidfile: Path, instance: str) -> list[str]:
    """`args` (a `docker run|create` argv after `docker`) with the id file and the instance label added
    right after the verb, where every docker version takes options."""
    verb, *rest = args
    if verb not in VERBS:
        raise ValueError(f"not a container-making docker call: {verb!r}")
    return [verb, f"--cidfile={cidfile}", "--label", f"{INSTANCE_LABEL}={instance}", *rest]


def _quiet(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """A short docker call for clean-up: never refused after an interrupt, never raising."""
    c = engine.client()
    try:
        return subprocess.run([c.path, *args], capture_output=True, text=True, env=c.env(), timeout=timeout)
    except (subprocess.TimeoutExpired, OSError) as exc:
        return subprocess.CompletedProcess(args, -1, "", str(exc))


def remove(cid: str, attempts: int = 5) -> bool:
    """`docker rm --force ID`; True when it was removed (False: it was gone already, or the engine failed).
    The engine refuses a removal while it still starts the container (a client cut short by a signal leaves
    the daemon starting it): such a refusal is tried again, a second apart."""
    for attempt in range(attempts if cid else 0):
        out = _quiet("rm", "--force", cid)
        if out.returncode == 0:
            return True
        if "No such container" in out.stderr or attempt == attempts - 1:
            return False
        time.sleep(1)
    return False


def sweep(key: str, value: str) -> list[str]:
    """Remove, by id, every container labelled `key=value` that is still there; their ids."""
    out = _quiet("ps", "--all", "--quiet", "--no-trunc", "--filter", f"label={key}={value}", timeout=60)
    left = out.stdout.split() if out.returncode == 0 else []
    for cid in left:
        remove(cid)
    return left


@contextlib.contextmanager
def _cidfile() -> Iterator[tuple[Path, str]]:
    """(id file, instance label value) for one container being made; the block raising (a failure, an
    interrupt) removes the container, if the engine made one."""
    with tempfile.TemporaryDirectory(prefix="cookbook-container.") as tmp:
        cidfile, instance = Path(tmp) / "cid", uuid.uuid4().hex
        try:
            yield cidfile, instance
        except BaseException:
            _discard(cidfile, instance)
            raise


def _read(cidfile: Path) -> str:
    try:
        return cidfile.read_text().strip()
    except OSError:
        return ""


def _discard(cidfile: Path, instance: str) -> None:
    """The container of a call that failed or was cut short: by its id, or by its instance label."""
    cid = _read(cidfile)
    if cid:
        remove(cid)
    else:
        sweep(INSTANCE_LABEL, instance)


def make(args: Sequence[str], *, what: str, timeout: float = 300, refused: type[CookbookError] = EngineError) -> str:
    """`docker run --detach ...` or `docker create ...` (`args` after `docker`); the new container's id. A
    call that fails or is interrupted removes what it made, so the caller owns a container only once it
    has its id."""
    with _cidfile() as (cidfile, instance):
        out = engine.docker(*identified(args, cidfile, instance), check=False, timeout=timeout)
        if out.returncode != 0:
            raise engine.failure(what, out.stderr or "", refused)
        cid = _read(cidfile)
        if not cid:  # a client that exits 0 always wrote it; nothing to own without it
            raise EngineError(f"{what}: the docker client wrote no container id")
        return cid


def attached(args: Sequence[str], *, timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """`docker run --rm ...` in the foreground (`args` after `docker`), its output captured; the client's
    exit is the container's (125-127: docker's own). The container is removed by id afterwards whatever
    happened: killing the client, on a timeout (subprocess.TimeoutExpired) or an interrupt, does not stop
    its container. `kwargs` go to signals.run (text, errors)."""
    c = engine.client()
    with _cidfile() as (cidfile, instance):
        out = signals.run([c.path, *identified(args, cidfile, instance)], env=c.env(), capture_output=True,
                          timeout=timeout, **kwargs)
        _discard(cidfile, instance)  # --rm has removed it when it ended by itself: then this finds nothing
        return out


@contextlib.contextmanager
def made(args: Sequence[str], *, what: str, timeout: float = 300,
         refused: type[CookbookError] = EngineError) -> Iterator[str]:
    """A container (`make`) for the length of the block, its id; removed by that id when the block ends:
    normally, on an error, on Ctrl-C and on SIGTERM."""
    cid = ""
    with signals.interruptible():
        try:
            cid = make(args, what=what, timeout=timeout, refused=refused)
            yield cid
        finally:
            remove(cid)


def running(cid: str) -> bool:
    out = engine.docker("inspect", "--format", "{{.State.Running}}", cid, check=False)
    return out.returncode == 0 and out.stdout.strip() == "true"


def image_of(cid: str) -> str:
    """The id of the image the container runs."""
    return engine.docker("inspect", "--format", "{{.Image}}", cid).stdout.strip()


def wait(cid: str, timeout: float | None = None) -> int:
    """`docker wait`: the container's exit code once it has stopped."""
    return int(engine.docker("wait", cid, timeout=timeout).stdout.strip().splitlines()[-1])


def logs(cid: str) -> str:
    """The container's output so far, stdout and stderr together."""
    out = engine.docker("logs", cid)
    return out.stdout + out.stderr


def follow_logs(cid: str, log_path: Path) -> subprocess.Popen:
    """`docker logs --follow` into a file, in a session of its own: it ends when the container is removed,
    and outlives the task (a server `invoke serve` leaves up keeps its log)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as out:
        return subprocess.Popen([engine.client().path, "logs", "--follow", "--timestamps", cid], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
