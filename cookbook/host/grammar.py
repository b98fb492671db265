"""What a value may look like, by the role it plays where it lands: an env name, a fix name, an image
reference, a path in the image. Standard library only: the schema (recipes), the tasks (tags) and the
image's entrypoint (run-time flags) check against the same grammars.

Each check returns None when the value fits, else a sentence saying what the role allows, so callers
can add the file, key and line.
"""

from __future__ import annotations

import re
import unicodedata

# Docker's reference grammar (distribution/reference): host[:port]/path/components[:tag].
_DOMAIN = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?))*(?::[0-9]+)?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
IMAGE_NAME = re.compile(rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*")
IMAGE_REF = re.compile(rf"{IMAGE_NAME.pattern}(?::{_TAG})?")

ROLES: dict[str, tuple[re.Pattern, str]] = {
    "env_name": (re.compile(r"[A-Za-z_][A-Za-z0-9_]*"),
                 "an env name is letters, digits and _, and does not start with a digit"),
    "slug": (re.compile(r"[a-z0-9][a-z0-9._-]{0,99}"),
             "a name here is lower-case letters, digits, '.', '_' and '-', starting with a letter or digit"),
    "ident": (re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}"),
              "a value here is letters, digits, '.', '_', '+' and '-', starting with a letter or digit"),
    "model_id": (re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(?:/[A-Za-z0-9][A-Za-z0-9._-]*)?"),
                 "a model id is a Hugging Face repo id, `org/name`"),
    "image_ref": (IMAGE_REF, "an image reference is `registry/path/name[:tag]`, path components in lower case"),
    "abs_path": (re.compile(r"(?:/(?!\.\.?(?:/|$))[A-Za-z0-9._+-]+)+"),
                 "a path in the image is absolute, of letters, digits, '.', '_', '+' and '-', without `..`"),
    "url_path": (re.compile(r"/[A-Za-z0-9._~/-]*"), "an HTTP path is absolute (`/health`), without a query"),
    "python": (re.compile(r"[0-9]+\.[0-9]+"), "a Python version is `major.minor`, e.g. 3.12"),
}

# Unicode's line and paragraph separators break lines for many readers (Python's splitlines among them).
_LINE_BREAKING = {"\u2028", "\u2029", "\x85"}


def control_char(value: str, allow: str = "") -> str | None:
    """The first control character of `value` not in `allow`, described, or None."""
    for i, ch in enumerate(value):
        if ch in allow:
            continue
        if unicodedata.category(ch) == "Cc" or ch in _LINE_BREAKING:
            name = unicodedata.name(ch, "") or {"\n": "LINE FEED", "\r": "CARRIAGE RETURN", "\t": "TAB"}.get(ch, "")
            return f"U+{ord(ch):04X}{' ' + name if name else ''} at position {i}"
    return None


def text_problem(value: str, allow: str = "") -> str | None:
    found = control_char(value, allow)
    if found is None:
        return None
    one_line = "" if "\n" in allow else " (a value here is one line of text)"
    return f"holds a control character, {found}{one_line}; remove it, the cookbook never rewrites a value"


def problem(role: str, value: str) -> str | None:
    """None when `value` fits the role's grammar, else what the role allows."""
    pattern, says = ROLES[role]
    if pattern.fullmatch(value):
        return None
    return says


def image_ref_problem(ref: str, name_only: bool = False) -> str | None:
    """For a `--tag` (or, name_only, a `--repo`) value: Docker's own rules, checked before any build."""
    if len(ref) > 255:
        return "an image reference is at most 255 characters"
    if name_only:
        return None if IMAGE_NAME.fullmatch(ref) else "a repository is `registry/path/name`, in lower case"
    return problem("image_ref", ref)


DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def image_problem(ref: str) -> str | None:
    """An image reference as Docker takes it: NAME[:TAG], or NAME[:TAG]@sha256:<64 hex> as `publish` prints."""
    name, at, digest = ref.partition("@")
    if at and not DIGEST.match(digest):
        return "a digest is sha256: and 64 lower-case hex digits"
    return image_ref_problem(name)
