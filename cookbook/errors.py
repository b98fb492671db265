"""One error tree. Library code raises these; tasks turn them into a message and an exit code."""

from __future__ import annotations


class CookbookError(Exception):
    """A failure the user can act on: what went wrong, where, and how to mend it."""

    exit_code = 1

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


class RecipeError(CookbookError):
    """A recipe that does not load, does not validate, or breaks one of the rules."""


class FixError(CookbookError):
    """A fix pack that does not read, resolve, or apply."""


class UpstreamError(CookbookError):
    """The upstream source cache is missing or cannot be filled."""


class EngineError(CookbookError):
    """No Docker engine answers, or it refused a call."""


class BuildError(CookbookError):
    """An image that could not be built, tagged or found."""


class CheckFailure(CookbookError):
    """An image that did not pass its checks."""


class PublishError(CookbookError):
    """An image that may not be published, or a registry that refused it."""


def where(path, line: int | None = None, key: str | None = None) -> str:
    """Format a location as `file:line (key a.b.c)` for error messages."""
    loc = str(path)
    if line is not None:
        loc += f":{line}"
    if key:
        loc += f" (key {key})"
    return loc
