"""The one rule for a folder a task replaces or writes into (`render --out`, `docs --site`, `k8s --out`,
`chain --out`):
only a missing path, an empty folder, or a folder carrying the task's marker file (one the cookbook made)
is ever touched. Anything else is refused before any work, with the path and why, so a mistyped
`--site .` or `--out ~/manifests` never costs the user a file."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from .errors import UsageError


def check(out: Path, marker: str, option: str, ours: Callable[[Path], bool] | None = None,
          verb: str = "make") -> None:
    """Refuse `out` unless it is missing, an empty folder, or carries `marker` (or `ours(out)` says it is
    one of ours from before markers). A symlink is refused: replacing it would act on its target."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise UsageError(f"{out} exists and is not a folder; not replacing it", hint=f"choose another {option}")
    if not out.is_dir():
        return
    try:
        empty = not any(out.iterdir())
    except OSError as exc:
        raise UsageError(f"cannot read {out}: {exc.strerror}", hint=f"choose another {option}") from None
    if empty or (out / marker).is_file() or (ours is not None and ours(out)):
        return
    raise UsageError(f"{out} is a folder the cookbook did not {verb} (no {marker} in it); not replacing it",
                     hint=f"move it away, or give an empty or new folder ({option})")


def mark(folder: Path, marker: str, text: str) -> None:
    (folder / marker).write_text(text)
    os.chmod(folder / marker, 0o644)


def swap_in(tmp: Path, out: Path) -> None:
    """Put the finished folder `tmp` at `out`; an old `out` (already checked) goes into a fresh temporary
    folder of ours first, so no other name is ever removed, and comes back if the rename fails."""
    if not out.exists():
        tmp.rename(out)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
    out.rename(old / out.name)
    try:
        tmp.rename(out)
    except BaseException:
        (old / out.name).rename(out)
        old.rmdir()
        raise
    shutil.rmtree(old, ignore_errors=True)


def readable(folder: Path) -> None:
    """mkdtemp makes its folder 0700; a site or a manifest folder is for others to read (a web server)."""
    os.chmod(folder, 0o755)


@contextlib.contextmanager
def staged(out: Path, marker: str | None = None, text: str = "") -> Iterator[Path]:
    """A fresh sibling folder of `out` to write into; when the block ends it is marked (unless the caller
    writes its own marker), made readable and swapped in for `out` (already checked). On any failure,
    Ctrl-C included, it is removed and `out` is left as it was: never half-written."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield tmp
        if marker:
            mark(tmp, marker, text)
        readable(tmp)
        swap_in(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def links(folder: Path) -> list[Path]:
    """Every symlink under `folder` (not followed), sorted: a tool writing into a folder it owns refuses
    to write through one, which would reach whatever file the link names."""
    found = []
    for top, dirs, files in os.walk(folder) if folder.is_dir() and not folder.is_symlink() else ():
        found += [Path(top) / n for n in dirs + files if (Path(top) / n).is_symlink()]
    return sorted(found)
