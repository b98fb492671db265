"""What the applier says: every line prefixed `apply_all: ` (the build's log parser and the tests look
for it), results on stdout, errors on stderr, and the one exception a refusal raises."""

import sys

PREFIX = "apply_all: "


class PackError(Exception):
    """A refusal: main() prints the message and exits 1. Nothing was changed (or it was rolled back)."""


def emit(stream, message):
    for line in message.splitlines() or [""]:
        stream.write(PREFIX + line + "\n")
    stream.flush()


class Log:
    def __init__(self, quiet=False):
        self.quiet = quiet

    def info(self, message):
        if not self.quiet:
            emit(sys.stdout, message)

    def result(self, message):
        emit(sys.stdout, message)

    def error(self, message):
        emit(sys.stderr, "error: " + message)


def bullets(lines):
    return "\n".join("  - " + line for line in lines)


def describe_var(name, environ):
    value = environ.get(name)
    return f"{name} unset" if value is None else f"{name}={value}"

