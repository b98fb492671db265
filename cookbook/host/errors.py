"""One error tree. Library code raises these, verdicts included (checks that failed, a pack that does not
apply); one place, the task edge (cookbook/host/cli.py), turns them into `error:` and `fix:` lines and the
exit code `exit_code` gives.

Exit codes (the README says the same): 2 for a mistake in what the user gave (a recipe, a fix, an
argument, a path), 3 when the Docker engine or the network failed, 1 for work that ran and failed (a
build, the image checks, smoke, a fix that does not apply, the chain), and 4 from `fixes.verify --base`
alone: the pack applies to that base, but its target files are not the ones the pack was recorded
against (a build on it still refuses them).
"""

from __future__ import annotations

FAILED, USER_MISTAKE, ENGINE_OR_NETWORK, PACK_DIFFERS = 1, 2, 3, 4


class CookbookError(Exception):
    """A failure the user can act on: what went wrong, where, and how to mend it."""

    exit_code = FAILED

    def __init__(self, what: str, *, where: str | None = None, hint: str | None = None):
        super().__init__(what)
        self.what = what
        self.where = where
        self.hint = hint

    def __str__(self) -> str:
        lines = [self.what]
        if self.where:
            lines.append(f"  at: {self.where}")
        if self.hint:
            lines.append(f"  fix: {self.hint}")
        return "\n".join(lines)


class UsageError(CookbookError):
    """An argument or a path the task cannot use as given."""

    exit_code = USER_MISTAKE


class RecipeError(UsageError):
    """A recipe that does not load, does not validate, or breaks one of the rules."""


class FixError(UsageError):
    """A fix pack that does not read, resolve, or apply."""


class UpstreamError(CookbookError):
    """The upstream source cache is missing or cannot be filled."""

    exit_code = ENGINE_OR_NETWORK


class EngineError(CookbookError):
    """No Docker engine answers, or it refused a call."""

    exit_code = ENGINE_OR_NETWORK


class ImageMissing(UsageError):
    """An image the Docker engine does not hold and could not pull by that name: a name to mend (exit 2)."""


class WeightsError(CookbookError):
    """The Hugging Face Hub did not answer while the model's weights were fetched."""

    exit_code = ENGINE_OR_NETWORK


class BuildError(CookbookError):
    """An image that could not be built, tagged or found."""


class PullError(BuildError):
    """A base image the registry did not give: the network or the registry, not the recipe."""

    exit_code = ENGINE_OR_NETWORK


class CheckFailure(CookbookError):
    """An image that did not pass its checks."""


class ManifestError(CookbookError):
    """Kubernetes manifests that cannot be rendered from the image, or do not validate."""


class HostError(CookbookError):
    """A host that cannot serve a recipe at all (no Gaudi), said in one line by `invoke doctor`."""


class PublishError(CookbookError):
    """An image that may not be published, or a registry that refused it."""


class SmokeFailure(CheckFailure):
    """A server that answered, but not as the recipe's Verified checks require."""


class PackFailure(CookbookError):
    """A fix pack that ran and failed: a fix that does not apply, a lab or cost run that found problems, a pack
    that does not port to another release."""


class PackDiffers(PackFailure):
    """`fixes.verify --base`: the pack applies to that base, but its target files are not the pristine ones."""

    exit_code = PACK_DIFFERS


class ChainStopped(CookbookError):
    """`invoke chain` stopped at a step; the summary above says which and why."""


def printable(text: str) -> str:
    """Text from outside (a server's model id or answer) made safe for a terminal or a Markdown page:
    control characters (escape sequences, carriage returns, newlines) shown as escapes, not obeyed."""
    return "".join(ch if ch.isprintable() or ch == " " else repr(ch)[1:-1] for ch in str(text))


def os_error_code(exc: OSError) -> int:
    """The exit code of an OSError that reached a task's edge: the network's (3) when a connection was
    refused, reset or timed out, a host name did not resolve or TLS failed (urllib, requests and the
    docker SDK raise these as OSErrors too); otherwise a path the task was given or must write (2)."""
    import socket
    import ssl
    import urllib.error

    network: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, socket.gaierror, socket.herror,
                                                ssl.SSLError, urllib.error.URLError)
    try:
        import requests

        network += (requests.exceptions.RequestException,)
    except ImportError:  # requests comes with the docker SDK; without it none of its errors can occur
        pass
    return ENGINE_OR_NETWORK if isinstance(exc, network) else USER_MISTAKE


def exit_code(exc: BaseException) -> int:
    """The one mapping from what reached a task's edge to the README's exit codes: an error of the tree
    carries its code; an OSError is the network's (3) or a path's (2); anything else is a bug (1)."""
    if isinstance(exc, CookbookError):
        return exc.exit_code
    if isinstance(exc, OSError):
        return os_error_code(exc)
    return FAILED


def error_lines(exc: BaseException) -> list[str]:
    """What the task edge prints for `exc`: `error: WHAT`, `  at: WHERE` and `fix: HINT`, each made printable
    (the words may quote a server or a file)."""
    if isinstance(exc, CookbookError):
        what, at, hint = exc.what, exc.where, exc.hint
    elif isinstance(exc, OSError):
        what, at, hint = exc.strerror or str(exc), None, None
        if exc.filename:
            what += f": {exc.filename}"
    else:
        what, at, hint = str(exc) or type(exc).__name__, None, None
    first, *more = what.splitlines() or [""]
    lines = [f"error: {first}", *more]
    if at:
        lines.append(f"  at: {at}")
    if hint:
        lines.append(f"fix: {hint}")
    return [printable(line) for line in lines]


def where(path, line: int | None = None, key: str | None = None) -> str:
    """Format a location as `file:line (key a.b.c)` for error messages."""
    loc = str(path)
    if line is not None:
        loc += f":{line}"
    if key:
        loc += f" (key {key})"
    return loc
