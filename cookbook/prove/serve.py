"""`invoke serve`: start a recipe's image with the README's `docker run`, wait for health, say where the log is.

One code path for users and for `invoke smoke --image` / `invoke bench --image` (`container`): the argv
is composed by a pure function (`run_argv`), so what `--dry-run` prints is what runs. Secrets are passed
by name only (`-e HF_TOKEN`): Docker reads the value from its own environment, so it is never in an
argv, a dry run or a log line of ours.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..host import containers, engine, grammar, signals
from ..host.errors import CheckFailure, UsageError, printable
from ..host.names import HF_CACHE_HOST, HF_CACHE_IN_IMAGE, Label
from ..host.progress import console, say
from ..image.steps import moving_tag
from ..recipe.recipes import LoadedRecipe

# Passed through by name only, when set: the value never leaves Docker's own environment.
SECRET_ENV = ("HF_TOKEN",)
GAUDI_RUNTIME = "habana"
# Which cards the container sees: `all` (every card of the host; vLLM takes as many as the recipe's tensor
# parallel needs) or the indices of the cards chosen (`--cards 4,5,6,7`), as many as the recipe names.
DEVICES_ENV = "HABANA_VISIBLE_DEVICES"
ALL_CARDS = "all"
# The README's options beside the runtime: a shared /dev/shm for the engine's processes, and the
# scheduler priorities vLLM sets on its threads.
BASE_OPTIONS = ("--ipc=host", "--cap-add=sys_nice")
# `--option` takes these docker run options only, as --flag=value: anything else (--privileged,
# --entrypoint, --env=TOKEN=..., a writable or host-wide volume, --network=host) changes what the
# recipe's container is, or puts a secret in an argv. OPTION_HELP is what a refusal lists.
OPTION_HELP = ("--shm-size=SIZE, --ulimit=NAME=SOFT[:HARD], --network=NAME (not host or container:...), "
               "--volume=HOSTDIR:/models/...:ro (read-only, for models)")
SIZE_RE = re.compile(r"^[0-9]+[bkmgBKMG]?$")
ULIMIT_RE = re.compile(r"^(memlock|nofile|nproc|stack|core)=(-1|[0-9]+)(:(-1|[0-9]+))?$")
MODELS_DIR = "/models"
# Host folders a model mount may not come from, even read-only: the engine's socket, the host's own state.
HOST_REFUSED = ("/proc", "/sys", "/dev", "/run", "/var/run", "/etc", "/boot", "/var/lib/docker")
# An env name that looks like a credential is never taken by value (argv, `ps`, `docker inspect`, logs).
SECRET_NAME_RE = re.compile(r"TOKEN|SECRET|PASSW|API_?KEY|CREDENTIAL|PRIVATE_?KEY|AUTH", re.IGNORECASE)
NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
# A 27B model loads and compiles for many minutes on a Gaudi; a tiny CPU model in about a minute.
DEFAULT_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class RunSpec:
    """Everything `docker run` is given; `run_argv` turns it into the argv."""

    image: str
    name: str
    port: int  # on the host
    container_port: int  # the recipe's image.port: vLLM listens there inside
    runtime: str | None = GAUDI_RUNTIME  # None or "": Docker's default runtime
    hf_cache: str | None = HF_CACHE_HOST
    env: dict[str, str] = field(default_factory=dict)  # non-secret -e NAME=VALUE
    pass_env: tuple[str, ...] = SECRET_ENV  # -e NAME: value from the caller's environment (when set)
    options: tuple[str, ...] = ()  # extra docker run options, before the image
    args: tuple[str, ...] = ()  # after the image: appended to the recipe's vLLM flags
    health_path: str = "/health"
    role: str = "serve"  # the cookbook.container label: serve, smoke or bench
    publish_ip: str = ""  # "127.0.0.1": the port is published on loopback only
    entrypoint: str | None = None  # for the project's own tests (a stand-in server); no task sets it
    recipe: str = ""  # the cookbook.recipe label
    devices: str = ALL_CARDS  # HABANA_VISIBLE_DEVICES, with the habana runtime (devices_value)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def check_spec(spec: RunSpec) -> None:
    """Refuse what Docker would misread, before anything runs (a dry run too)."""
    said = grammar.image_problem(spec.image)
    if said:
        raise UsageError(f"--image {spec.image!r} is not an image reference: {said}")
    if not NAME_RE.match(spec.name):
        raise UsageError(f"--name {spec.name!r} is not a container name", hint="letters, digits, _ . - only")
    for port in (spec.port, spec.container_port):
        if not 1 <= port <= 65535:
            raise UsageError(f"port {port} is not between 1 and 65535")
    if spec.runtime and not NAME_RE.match(spec.runtime):
        raise UsageError(f"--runtime {spec.runtime!r} is not a runtime name")
    for name in spec.env:
        if name in spec.pass_env or name in SECRET_ENV or SECRET_NAME_RE.search(name):
            raise UsageError(f"--env {name}=...: a secret is passed through from your environment by name, "
                             "never as a value", hint=f"export {name}=... and give --env {name}")
    for name in spec.pass_env:
        said = grammar.problem("env_name", name)
        if said:
            raise UsageError(f"--env {name!r}: {said}")
    for option in spec.options:
        said = option_problem(option)
        if said:
            raise UsageError(f"--option {option_shown(option)}: {said}", hint=f"allowed: {OPTION_HELP}")
    if spec.hf_cache and os.path.isabs(os.path.expanduser(spec.hf_cache)):
        said = host_folder_problem(os.path.expanduser(spec.hf_cache))
        if said:  # mounted read-write, so refused wherever a read-only --volume is
            raise UsageError(f"--hf-cache {printable(spec.hf_cache)}: {said}",
                             hint=f"a folder of its own, such as {HF_CACHE_HOST} ('' for none)")


def option_problem(option: str) -> str | None:
    """Why `--option` refuses this docker run option (None: allowed). Pure; see OPTION_HELP."""
    if not option.startswith("-"):
        return "not a docker run option"
    flag, eq, value = option.partition("=")
    if not eq:
        return "give it as --flag=value"
    if flag == "--shm-size":
        return None if SIZE_RE.match(value) else "a size is digits with an optional unit (b, k, m, g)"
    if flag == "--ulimit":
        return None if ULIMIT_RE.match(value) else "a ulimit is memlock|nofile|nproc|stack|core=SOFT[:HARD]"
    if flag in ("--network", "--net"):
        if value == "host" or ":" in value or not NAME_RE.match(value):
            return "a network is a network's name; not host, not another container's"
        return None
    if flag in ("--volume", "-v"):
        return volume_problem(value)
    return "this docker run option is not one --option takes"


def option_shown(option: str) -> str:
    """An --option as a refusal quotes it: whole for the options --option takes (their values are sizes,
    limits, network names and folders), else its flag alone, or nothing: `--option=--env=HF_TOKEN=hf_...`
    must not print the token it carries."""
    flag, eq, _ = option.partition("=")
    if flag in ALLOWED_FLAGS:
        return printable(repr(option))
    if re.fullmatch(r"--?[A-Za-z][A-Za-z0-9-]*", flag):
        return repr(flag + ("=..." if eq else ""))
    return "(the value given is not shown)"


ALLOWED_FLAGS = ("--shm-size", "--ulimit", "--network", "--net", "--volume", "-v")


def volume_problem(value: str) -> str | None:
    parts = value.split(":")
    if len(parts) != 3 or parts[2] != "ro":
        return f"a volume is HOSTDIR:{MODELS_DIR}/...:ro (read-only)"
    host, inside = os.path.normpath(os.path.expanduser(parts[0])), parts[1]
    if not os.path.isabs(host):
        return "the host folder is an absolute path"
    said = host_folder_problem(host)
    if said:
        return said
    if os.path.normpath(inside) != inside or not inside.startswith(MODELS_DIR + "/"):
        return f"the folder in the container is under {MODELS_DIR}/"
    return None


def host_folder_problem(host: str) -> str | None:
    """Why an absolute host folder may not be mounted into a server's container, even read-only (None:
    it may): the root, the host's own state, the engine's socket. Symlinks are resolved first: Docker
    mounts what they point to."""
    for path in dict.fromkeys([os.path.normpath(host), os.path.realpath(host)]):
        if path == "/" or any(path == d or path.startswith(d + "/") for d in HOST_REFUSED) or path.endswith(".sock"):
            return f"{path} is the host's own, not a folder for models"
    return None


def devices_value(given: str | None, cards: int) -> str:
    """HABANA_VISIBLE_DEVICES for a recipe of `cards` cards: `all` when none are given, else the cards given
    as comma-separated indices, exactly `cards` distinct ones (fewer cannot hold the recipe's tensor parallel;
    more would leave the choice of which to vLLM again)."""
    if given is None or given.strip() == ALL_CARDS:
        return ALL_CARDS
    words = [w.strip() for w in given.split(",")]
    if not all(w.isascii() and w.isdigit() for w in words):
        raise UsageError(f"--cards {printable(repr(given))[:80]} is not a list of card indices",
                         hint=f"comma-separated indices such as {','.join(map(str, range(cards)))}, or all")
    indices = [int(w) for w in words]
    if len(set(indices)) != len(indices):
        raise UsageError(f"--cards {given}: a card is named twice")
    if len(indices) != cards:
        raise UsageError(f"--cards {given} names {len(indices)} card(s); the recipe serves on {cards}",
                         hint=f"name exactly {cards} distinct card(s), or all")
    return ",".join(map(str, indices))


def run_argv(spec: RunSpec) -> list[str]:
    """The `docker run` arguments (after `docker`) of the README's Serving section, detached and named."""
    # Labelled, so a container the cookbook started is found again: docker ps --filter label=cookbook.container
    options = ["--detach", "--name", spec.name]
    if spec.runtime:
        options.append(f"--runtime={spec.runtime}")
        if spec.runtime == GAUDI_RUNTIME:
            options += ["-e", f"{DEVICES_ENV}={spec.devices}"]
    for name in spec.pass_env:
        options += ["-e", name]
    for k, v in spec.env.items():
        options += ["-e", f"{k}={v}"]
    if spec.hf_cache:
        options += ["-v", f"{os.path.expanduser(spec.hf_cache)}:{HF_CACHE_IN_IMAGE}"]
    published = f"{spec.publish_ip}:" if spec.publish_ip else ""
    options += ["-p", f"{published}{spec.port}:{spec.container_port}", *BASE_OPTIONS, *spec.options]
    if spec.entrypoint:
        options.append(f"--entrypoint={spec.entrypoint}")
    labels = {Label.RECIPE: spec.recipe} if spec.recipe else {}
    return containers.argv("run", spec.image, spec.args, role=spec.role, labels=labels, options=options)


def shown(argv: list[str]) -> str:
    """The command as a shell would take it (quoted), for dry runs and messages."""
    return shlex.join([engine.client().path if engine_known() else "docker", *argv])


def engine_known() -> bool:
    try:
        engine.client()
        return True
    except Exception:  # no client: still print the command a user would type
        return False


def wait_healthy(url: str, timeout_s: float, alive: Callable[[], bool] = lambda: True,
                 poll_s: float = 1.0, label: str = "waiting for the server") -> float:
    """Seconds until `url` answers 200, with a progress bar on stderr; CheckFailure when the time is up
    or `alive()` says the server is gone (no point waiting for a dead container)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    start = time.monotonic()
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  TextColumn(f"of {timeout_s:.0f}s"), transient=True, console=console()) as bar:
        task = bar.add_task(label, total=timeout_s)
        while True:
            elapsed = time.monotonic() - start
            bar.update(task, completed=min(elapsed, timeout_s))
            if probe(url):
                return elapsed
            if not alive():
                raise CheckFailure(f"the server stopped before {url} answered")
            if elapsed >= timeout_s:
                raise CheckFailure(f"{url} did not answer within {timeout_s:.0f}s")
            time.sleep(poll_s)


def probe(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status == 200
    except (OSError, ValueError, urllib.error.URLError):
        return False


@dataclass
class Running:
    url: str
    name: str
    log_path: Path
    image_id: str
    container_id: str = ""


def _stop(follower: subprocess.Popen | None) -> None:
    if follower is not None and follower.poll() is None:
        follower.terminate()
        try:
            follower.wait(timeout=10)
        except subprocess.TimeoutExpired:
            follower.kill()


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def launch_argv(spec: RunSpec) -> list[str]:
    """The spec checked, the engine asked, and the `docker run` arguments said before they run."""
    check_spec(spec)
    engine.require_daemon()
    argv = run_argv(spec)
    say("docker " + shlex.join(argv))
    return argv


def launch(spec: RunSpec) -> str:
    """`docker run` the container; its id (containers.make: a run that fails or is interrupted removes
    what it created, and one that fails before, on a name already taken, touches nothing)."""
    return containers.make(launch_argv(spec), what=f"container {spec.name}")


def await_healthy(spec: RunSpec, cid: str, log_path: Path, timeout_s: float = DEFAULT_TIMEOUT_S,
                  ) -> tuple[Running, subprocess.Popen]:
    """Keep the container's log in `log_path` and wait for health. On a failure the follower is stopped
    and the caller removes the container (by `cid`)."""
    follower = containers.follow_logs(cid, log_path)
    say(f"container {spec.name} ({cid[:12]}): log in {log_path}")
    try:
        took = wait_healthy(spec.url + spec.health_path, timeout_s, alive=lambda: containers.running(cid),
                            label=f"{spec.name}: waiting for {spec.health_path}")
    except CheckFailure as exc:
        time.sleep(1)  # the follower flushes the container's last lines
        _stop(follower)
        raise CheckFailure(f"container {spec.name}: {exc.what}", where=str(log_path),
                           hint="the log's last lines:\n" + tail(log_path)) from None
    except BaseException:
        _stop(follower)
        raise
    if follower.poll() is not None and follower.returncode != 0:
        say(f"warning: `docker logs` for {spec.name} ended with {follower.returncode}")
    say(f"container {spec.name} healthy after {took:.0f}s at {spec.url}")
    image_id = containers.image_of(cid)
    return Running(spec.url, spec.name, log_path, image_id, cid), follower


@contextlib.contextmanager
def container(spec: RunSpec, log_path: Path, timeout_s: float = DEFAULT_TIMEOUT_S) -> Iterator[Running]:
    """A healthy container for the length of the block, ALWAYS removed after it (by the id this run
    created): on success, on a server that never becomes healthy, on an error, on Ctrl-C and on SIGTERM."""
    follower, cid = None, ""
    try:
        with containers.made(launch_argv(spec), what=f"container {spec.name}") as cid:
            try:
                running, follower = await_healthy(spec, cid, log_path, timeout_s)
                yield running
            finally:
                _stop(follower)
    finally:
        if cid:
            say(f"container {spec.name} removed; its log is in {log_path}")


def spec_for(loaded: LoadedRecipe, image: str | None = None, port: int | None = None,
             runtime: str | None = GAUDI_RUNTIME, name: str | None = None,
             hf_cache: str | None = HF_CACHE_HOST, env: dict | None = None,
             options: tuple[str, ...] = (), args: tuple[str, ...] = (), role: str = "serve",
             cards: str | None = None) -> RunSpec:
    """The README's `docker run` for `role`: serve publishes the port as the README does; the transient
    smoke and bench containers on 127.0.0.1 only. `env` values of None are passed through by name; `cards`
    chooses the cards the container sees (devices_value)."""
    r = loaded.recipe
    if cards is not None and (runtime or None) != GAUDI_RUNTIME:
        raise UsageError(f"--cards chooses Gaudi cards, which only the {GAUDI_RUNTIME} runtime hands over",
                         hint=f"drop --cards, or use --runtime {GAUDI_RUNTIME}")
    env = dict(env or {})
    by_name = tuple(dict.fromkeys([*SECRET_ENV, *(k for k, v in env.items() if v is None)]))
    return RunSpec(image=image or moving_tag(loaded), name=name or f"cookbook-{loaded.id}",
                   port=port or r.image.port, container_port=r.image.port, runtime=runtime or None,
                   hf_cache=hf_cache or None, env={k: v for k, v in env.items() if v is not None},
                   pass_env=by_name, options=tuple(options), args=tuple(args), health_path=r.image.health_path,
                   role=role, recipe=loaded.id, publish_ip="" if role == "serve" else "127.0.0.1",
                   devices=devices_value(cards, r.hardware.cards))


def run_spec(loaded: LoadedRecipe, role: str, image: str | None, port: int | None, runtime: str | None,
             name: str | None, hf_cache: str | None, env: dict, option: tuple[str, ...],
             args: tuple[str, ...]) -> RunSpec | None:
    """The --image container of smoke and bench (None without --image): the same `docker run` as `invoke serve`."""
    if not image:
        return None
    return spec_for(loaded, image=image, port=port, runtime=runtime, name=name or f"cookbook-{role}-{os.getpid()}",
                    hf_cache=hf_cache, env=env, options=option, args=args, role=role)


def task(recipe: str, image: str | None, port: int | None, runtime: str | None, name: str | None,
         hf_cache: str | None, env: dict, option: tuple[str, ...], timeout: float, log_dir: Path,
         no_fetch: bool, args: tuple[str, ...], cards: str | None = None, dry_run: bool = False) -> Running | None:
    """`invoke serve`: the recipe's `docker run` with the task's options, then `serve`."""
    from ..recipe import recipes

    loaded = recipes.load(recipe)
    spec = spec_for(loaded, image=image, port=port, runtime=runtime, name=name, hf_cache=hf_cache, env=env,
                    options=option, args=args, cards=cards)
    return serve(loaded, spec, log_dir, timeout, dry_run, fetch=not no_fetch)


def weights_record(loaded: LoadedRecipe, log_dir: Path) -> Path:
    """Where `invoke serve` records the weights it verified (cookbook/prove/weights.py)."""
    return log_dir / f"weights-{loaded.id}.json"


@signals.interruptible()  # the weights step too: SIGTERM ends a download as Ctrl-C does, without a traceback
def serve(loaded: LoadedRecipe, spec: RunSpec, log_dir: Path, timeout_s: float, dry_run: bool,
          fetch: bool = True) -> Running | None:
    """`invoke serve`: the recipe's model into the host's cache first (the weights step; `fetch=False` for
    hosts that manage weights themselves), then the container, which stays up for the user; removed
    again when it does not get healthy."""
    from . import weights

    check_spec(spec)
    if dry_run:
        if fetch:
            print(f"weights  {weights.plan(loaded, spec.hf_cache, weights_record(loaded, log_dir))}")
        print(shown(run_argv(spec)))
        return None
    if fetch:
        say(f"weights: {weights.step(loaded, spec.hf_cache, weights_record(loaded, log_dir)).detail}")
    log_path = log_dir / f"{spec.name}.log"
    cid = ""
    with signals.interruptible():
        try:
            cid = launch(spec)
            running, _ = await_healthy(spec, cid, log_path, timeout_s)  # its follower keeps the log
        except BaseException:
            containers.remove(cid)  # only the container this run created; a clash on the name created none
            raise
    print(f"url      {running.url}")
    print(f"log      {log_path}")
    print(f"stop     docker rm -f {spec.name}")
    return running


@dataclass
class Target:
    """The server a smoke or bench run talks to: a URL given, or a container started for the run."""

    url: str
    image: str | None = None
    image_id: str | None = None
    log_path: Path | None = None


@contextlib.contextmanager
def target(url: str | None, spec: RunSpec | None, log_path: Path, timeout_s: float) -> Iterator[Target]:
    """--url as given, or --image started with `container` (removed afterwards, whatever happens)."""
    if spec is None:
        yield Target(url.rstrip("/"))
        return
    with container(spec, log_path, timeout_s) as running:
        yield Target(running.url, spec.image, running.image_id, log_path)


def run_against(url: str | None, spec: RunSpec | None, log_path: Path, timeout_s: float, dry_run: bool,
                work: Callable[[Target], object]):
    """`work(target)` against --url, or against a container of --image started for it and always
    removed (a dry run prints the `docker run` and lets `work` say the rest)."""
    if bool(url) == bool(spec):
        raise UsageError("give exactly one of --url and --image")
    if spec is None:
        return work(Target(url))
    check_spec(spec)
    if dry_run:
        print(shown(run_argv(spec)))
        return work(Target(spec.url, spec.image))
    with target(None, spec, log_path, timeout_s) as t:
        return work(t)
