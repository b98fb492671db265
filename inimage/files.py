"""The real tree's files: read, replaced atomically, and a set of replacements committed all or nothing."""

import os

from .fixplan import sha256_bytes
from .output import PackError, bullets


def read_bytes(path):
    """The file's bytes, or None when it does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except (FileNotFoundError, NotADirectoryError):
        return None


MISSING = "missing"


def differs(path, want):
    """None when the file's sha256 is `want`; else its sha256, or MISSING."""
    data = read_bytes(path)
    if data is None:
        return MISSING
    found = sha256_bytes(data)
    return None if found == want else found


def atomic_write(path, data, mode):
    """Replace path by data in one step: readers see the old file or the new, never half of one."""
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=f".{os.path.basename(path)}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def commit(changes, finalize, what):
    """Replace each file of changes [(path, old bytes, new bytes, mode)], then call finalize().

    If any step fails, every file already replaced gets its old bytes back, so the tree is
    byte-identical to before, and PackError says what failed.
    """
    done = []
    step = ""
    try:
        for path, old, new, mode in changes:
            step = f"write {path}"
            atomic_write(path, new, mode)
            done.append((path, old, mode))
        step = what
        finalize()
    except BaseException as exc:
        unrestored = []
        for path, old, mode in reversed(done):
            try:
                atomic_write(path, old, mode)
            except OSError:
                unrestored.append(path)
        if not isinstance(exc, Exception):
            raise
        if unrestored:
            raise PackError(
                f"could not {step}: {exc}; rolling back FAILED for:\n{bullets(unrestored)}\n"
                "the tree is damaged: rebuild the image from its base"
            ) from exc
        raise PackError(f"could not {step}: {exc}; every file was restored, nothing changed") from exc


def file_changes(originals, results, locations):
    """[(path, old, new, mode)] for every staged file whose bytes differ from the real one."""
    changes = []
    for (package, path), old in originals.items():
        new = results[(package, path)]
        if new != old:
            full = os.path.join(locations[package], path)
            changes.append((full, old, new, os.stat(full).st_mode & 0o7777))
    return changes

