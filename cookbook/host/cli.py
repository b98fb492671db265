"""The command line's edge, said once for every task: the options the tasks share (help, repeatable, short
flag), how an option's text is read (numbers, `--env`, the words after `--`), and the one place an error
becomes `error:` and `fix:` lines and an exit code (errors.exit_code; nothing else raises invoke's Exit).

tasks.py keeps each task's signature (invoke reads its options from it) and takes everything else from here
through `task`, a drop-in for invoke's."""

from __future__ import annotations

import contextlib
import inspect
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import invoke

from . import grammar, signals
from .errors import CookbookError, UsageError, error_lines, exit_code
from .names import HF_CACHE_IN_IMAGE


@dataclass(frozen=True)
class Opt:
    help: str
    repeatable: bool = False
    short: str | None = None  # one letter, the same option in every task that has it


HF_CACHE_HELP = f"host Hugging Face cache mounted at {HF_CACHE_IN_IMAGE} ('' for none)"

# Options that mean the same in every task that takes them. A task's own `help=` may say more for its case
# (what --out defaults to, which image); it never gives the same letter to another option.
OPTIONS = {
    "recipe": Opt("recipe id or path", short="r"),
    "dry_run": Opt("print what it would run, run and write nothing", short="d"),
    "image": Opt("image to use (default: the recipe's moving tag)"),
    "repo": Opt("image repository prefix"),
    "standin": Opt("the stand-in build (the offline base; it serves no model)"),
    "profile": Opt("fix profile (default: the newest release's, releases/; for a recipe, its release's)"),
    "keep": Opt("lay the trees out here and keep them"),
    "port": Opt("host port (default: the recipe's image.port)"),
    "runtime": Opt("Docker runtime (default habana; '' for Docker's default; device variables only with habana)"),
    "name": Opt("container name"),
    "hf_cache": Opt(HF_CACHE_HELP),
    "env": Opt("NAME=VALUE for the container, or NAME to pass yours through (repeatable; a secret such as "
               "HF_TOKEN only by name)", repeatable=True),
    "option": Opt("an extra `docker run` option, one of --shm-size=, --ulimit=, --network=, "
                  "--volume=DIR:/models/...:ro (repeatable)", repeatable=True),
    "cards": Opt("the Gaudi cards the container sees, as comma-separated indices (0,1,2,3), exactly as many as "
                 "the recipe's cards (default all: every card of the host)"),
    "timeout": Opt("seconds to wait for health"),
    "url": Opt("a running server's base URL, http://HOST:PORT"),
    "scale": Opt("multiply the recipe's token sizes (small servers: 0.01)"),
    "repeats": Opt("runs of each scenario"),
    "only": Opt("run only this one (repeatable)", repeatable=True),
    "out": Opt("output folder"),
    "from_": Opt("git URL or local mirror/clone of vllm-project/vllm-gaudi (default GitHub)"),
    "base": Opt("the base image whose own target files to read (read, never run)"),
    "site": Opt("the base's site-packages folder (default: found in the image)"),
    "check": Opt("write nothing; fail if what is written differs from a fresh run (CI's drift check)"),
    "tag": Opt("an extra tag (repeatable)", repeatable=True),
    "fix": Opt("only this fix (repeatable; default: every written fix)", repeatable=True),
    "lab_fix": Opt("run the lab for this fix only (repeatable; default: every written fix and the pack)",
                   repeatable=True),
    "requires": Opt("a fix this one needs (repeatable)", repeatable=True),
    "skip": Opt("leave out a check: doctor, base, test, or weights on a host that manages its own (repeatable; "
                "the summary says so)", repeatable=True),
    "smoke_only": Opt("run only this smoke check (repeatable; default all)", repeatable=True),
    "bench_only": Opt("run only this bench scenario (repeatable; default all)", repeatable=True),
}


class Task(invoke.Task):
    """invoke's Task with help and repeatable options from OPTIONS (a task's own `help=` wins), short flags
    only from OPTIONS (invoke's automatic ones give one letter a different option in each task), and its body
    run inside `edge`."""

    def __init__(self, body, *args, help=None, iterable=None, **kwargs):
        params = inspect.signature(body).parameters
        shared = {name: OPTIONS[name] for name in params if name in OPTIONS}
        kwargs.setdefault("auto_shortflags", False)
        super().__init__(body, *args, help={**{n: o.help for n, o in shared.items()}, **(help or {})},
                         iterable=sorted({*(iterable or ()), *(n for n, o in shared.items() if o.repeatable)}),
                         **kwargs)

    def arg_opts(self, name, default, taken_names):
        opts = super().arg_opts(name, default, taken_names)
        short = OPTIONS[name].short if name in OPTIONS else None
        if short and short not in taken_names:
            opts["names"].append(short)
        return opts

    def __call__(self, *args, **kwargs):
        with edge():
            return super().__call__(*args, **kwargs)


def task(*args, **kwargs):
    """invoke's `@task`, made with `Task`."""
    return invoke.task(*args, klass=Task, **kwargs)


@contextlib.contextmanager
def edge() -> Iterator[None]:
    """Every task's edge: an error of the tree, or an OSError, is said in `error:` (and `fix:`) lines and
    ends the task with its exit code, never a traceback. Every task is interruptible: SIGTERM, as Ctrl-C,
    unwinds it (its temporary folders and containers cleaned up, its children's process groups killed)."""
    try:
        with signals.interruptible():
            yield
    except (CookbookError, OSError) as exc:
        print("\n".join(error_lines(exc)), file=sys.stderr)
        raise invoke.Exit(code=exit_code(exc)) from None


# ------------------------------------------------------------------------- reading an option's text

def number(value, option: str, kind=int):
    """A task option's number as typed (invoke passes text), or a UsageError naming the option."""
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise UsageError(f"{option} takes {'a whole number' if kind is int else 'a number'}, got {value!r}") from None


def user_args(remainder: str, argv: list[str] | None = None) -> tuple[str, ...]:
    """The words after `--`: taken from the program's argv as typed (invoke joins its remainder with
    spaces, which loses quoting), else split from that remainder."""
    argv = sys.argv if argv is None else argv
    if "--" in argv:
        return tuple(argv[argv.index("--") + 1:])
    return tuple(shlex.split(remainder))


def parse_env(items: list[str] | None) -> dict[str, str | None]:
    """`--env NAME=VALUE` (repeatable) into a mapping; `--env NAME` alone passes NAME through from your
    environment by name (value None), the way a secret must go. The names are checked as environment names;
    what was typed is never echoed, as it may hold a pasted secret ("HF_TOKEN hf_...")."""
    env: dict[str, str | None] = {}
    for item in items or []:
        name, eq, value = item.partition("=")
        said = grammar.problem("env_name", name)
        if said:
            raise UsageError(f"--env: {said} (what was given is not shown)",
                             hint="NAME=VALUE, or NAME alone to pass yours through")
        env[name] = value if eq else None
    return env


def _path(value):
    return Path(value) if value else None


# How a shared option's text is read: invoke passes what was typed (text, or a list when repeatable).
READ = {
    "port": lambda v: number(v, "--port") if v else None,
    "timeout": lambda v: number(v, "--timeout", float),
    "scale": lambda v: None if v is None else number(v, "--scale", float),
    "repeats": lambda v: number(v, "--repeats"),
    "env": parse_env,
    "runtime": lambda v: v or None,  # '': Docker's default runtime
    **{name: _path for name in ("out", "keep", "results", "record", "readings")},  # '': the default folder
    "log_dir": Path,  # always given ('': here)
}


def given(c, values: dict, *, words: bool = False) -> dict:
    """A task's options as the library takes them: each read as READ says, repeatable ones as tuples, and
    with `words` the words after `--` as `args`. `values` is the task's locals(): its context and the modules
    it imported are left out."""
    out = {}
    for name, value in values.items():
        if value is c or inspect.ismodule(value):
            continue
        if name in OPTIONS and OPTIONS[name].repeatable:
            value = tuple(value or ())
        out[name] = READ[name](value) if name in READ else value
    if words:
        out["args"] = user_args(c.remainder)
    return out
