"""Progress and messages for long work, on stderr so stdout stays for results and dry runs."""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.markup import escape

from .errors import printable

_console = Console(stderr=True, highlight=False)
_start = time.monotonic()


def say(message: str) -> None:
    """A progress message; its lines are made printable (it may quote a file name or a server's words)."""
    text = "\n".join(printable(part) for part in message.split("\n"))
    _console.print(f"[dim]{time.monotonic() - _start:6.1f}s[/dim] {escape(text)}", markup=True, soft_wrap=True)


def line(text: str) -> None:
    """A raw line of a child's output (build logs), unformatted."""
    sys.stderr.write(text if text.endswith("\n") else text + "\n")
    sys.stderr.flush()


def console() -> Console:
    """The stderr console, for progress bars beside the messages."""
    return _console
