"""A bounded fuzz of every task's options with hostile values, run in one process of its own (tasks are
called in-process through invoke's Program, so some 300 calls take seconds, not minutes):

    python -m tests.hostile_options OUT_JSON

Each call is a dry run (or a task that only reads) with one option given one hostile value: empty, huge,
unicode, terminal escapes, a newline, a path out of the tree, a symlink out of a folder, bytes that are not
UTF-8 (as Python's argv carries them), a flag where a value goes. Recorded per call: the exit code, a
traceback if one escaped the task edge, a terminal escape on stdout or stderr, and a call that did not end
within HANG_S. tests/test_tasks.py judges the record and checks that nothing was written.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import traceback
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

HANG_S = 20
# Tasks with neither a dry run nor a read-only nature: the lab's cost run starts the engine.
NOT_FUZZED = {"fixes.cost": "no dry run: it serves on the lab's engine"}
# Read-only tasks (no --dry-run of their own) and the flag that keeps them so.
READ_ONLY = {"recipes": [], "validate": [], "fixes.list": [], "fixes.index": ["--check"]}


def hostile_values(outside: Path, link: Path) -> dict[str, str]:
    return {
        "empty": "",
        "huge": "x" * 200_000,
        "unicode": "ünï©ødé-名前-\u202e",
        "escapes": "\x1b[31mred\x1b]0;title\x07\x1b[2J",
        "newline": "a\nb\r\nc",
        "traversal": "../" * 12 + str(outside).lstrip("/"),
        "symlink": str(link),
        "non-utf8": os.fsdecode(b"bad-\xff\xfe-name"),
        "flag": "--help",
    }


def calls(ns, values: dict[str, str]) -> list[list[str]]:
    """[argv] for every (task, option): two hostile values each, rotating so that every kind of value
    reaches every task; positional arguments get theirs the same way."""
    kinds = list(values)
    out, turn = [], 0
    for name, task in sorted(tasks_of(ns)):
        if name in NOT_FUZZED:
            continue
        args = task.get_arguments()
        flags = {a.names[0] for a in args}
        tail = READ_ONLY.get(name, ["--dry-run"] if "dry-run" in flags else None)
        if tail is None:
            continue
        positional = [a for a in args if a.positional]
        for arg in args:
            if arg.kind is bool:
                continue
            for _ in range(2):
                value = values[kinds[turn % len(kinds)]]
                turn += 1
                if arg.positional:
                    others = ["placeholder" for p in positional if p is not arg]
                    argv = [name, value, *others] if positional[0] is arg else [name, *others, value]
                else:
                    fill = ["placeholder" for p in positional]
                    argv = [name, *fill, f"--{arg.names[0]}={value}"]
                out.append(argv + tail)
    return out


def tasks_of(coll, prefix=""):
    for name, task in coll.tasks.items():
        yield prefix + name, task
    for cname, sub in coll.collections.items():
        yield from tasks_of(sub, prefix + cname + ".")


class Hang(Exception):
    pass


def run_one(program, argv: list[str]) -> dict:
    out, err = io.StringIO(), io.StringIO()
    record = {"argv": argv, "code": None, "traceback": None, "hang": False}

    def alarm(signum, frame):
        raise Hang

    before = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(HANG_S)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            program.run(["invoke", *argv], exit=True)
        record["code"] = 0
    except SystemExit as exc:
        record["code"] = exc.code if isinstance(exc.code, int) else 1
    except Hang:
        record["hang"] = True
    except BaseException:  # noqa: BLE001 - what escaped the task edge is the finding
        record["traceback"] = traceback.format_exc()[-2000:]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)
    text = out.getvalue() + err.getvalue()
    record["escape"] = "\x1b" in text
    record["said"] = text[-300:]
    return record


def main(out_json: str, scratch: str) -> None:
    from invoke import Program

    import tasks

    scratch_dir = Path(scratch)
    outside = scratch_dir / "outside"
    outside.mkdir(parents=True, exist_ok=True)
    (outside / "victim").write_text("kept\n")
    link = scratch_dir / "inside" / "link"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(outside)
    program = Program(namespace=tasks.ns, name="invoke", binary="invoke", version="fuzz")
    records = [run_one(program, argv) for argv in calls(tasks.ns, hostile_values(outside / "victim", link))]
    Path(out_json).write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
