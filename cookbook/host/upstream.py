"""The upstream source cache: vllm-gaudi at the pinned commit and vLLM's Python files from PyPI.

vllm-gaudi is not on PyPI, so its pinned commit is fetched with git, from GitHub by default or from a
local mirror or path. vLLM comes from the PyPI wheel (`pip download --no-deps`), of which only the
Python files and the dist-info are kept. Each entry is written to a temporary folder and renamed into
place with a `.complete` marker, so an interrupted fetch leaves nothing that looks usable.

A source is outside input: each download (git's fetch, pip's) runs under an overall deadline
(COOKBOOK_UPSTREAM_TIMEOUT) and a bound on what it writes (COOKBOOK_UPSTREAM_MAX_MB), and a tree is
unpacked only when its listing (git ls-tree's sizes, the wheel's zip directory) is within that bound.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from . import grammar, limits, signals
from .errors import UpstreamError, UsageError, printable
from .paths import cache_dir
from .progress import say

GITHUB = "https://github.com/vllm-project/vllm-gaudi.git"
MARKER = ".complete"
TIMEOUT_ENV, DEFAULT_TIMEOUT_S = "COOKBOOK_UPSTREAM_TIMEOUT", 3600.0  # each fetch: a ref's tree, or the wheel
MAX_ENV, DEFAULT_MAX_MB = "COOKBOOK_UPSTREAM_MAX_MB", 2048.0  # the vLLM wheel is about 0.5 GB, a tree less


def bounds() -> tuple[limits.Deadline, int]:
    """A fresh deadline for one fetch, and the byte bound of what it may write or unpack."""
    seconds = limits.env_number(TIMEOUT_ENV, DEFAULT_TIMEOUT_S, "seconds", "each upstream fetch")
    mb = limits.env_number(MAX_ENV, DEFAULT_MAX_MB, "mb", "what one upstream download may write")
    return limits.Deadline(seconds, TIMEOUT_ENV), int(mb * (1 << 20))


def check_listed_size(total: int, max_bytes: int, what: str) -> None:
    if total > max_bytes:
        raise UpstreamError(f"{what} lists {total >> 20} MB of files, more than the bound of {max_bytes >> 20} MB",
                            hint=f"check the source; raise {MAX_ENV} (MB) if it is right")


@dataclass(frozen=True)
class Pins:
    vllm_gaudi_version: str  # the tag, e.g. v0.26.0
    vllm_gaudi_commit: str
    vllm_version: str  # the PyPI version, e.g. 0.26.0
    # the vllm_gaudi distribution's version, as a release file says it; "" reads it from the tag
    vllm_gaudi_dist: str = ""

    @property
    def dist_version(self) -> str:
        return self.vllm_gaudi_dist or self.vllm_gaudi_version.lstrip("v")


def root() -> Path:
    return cache_dir() / "upstream"


def vllm_gaudi_dir(commit: str) -> Path:
    return root() / "vllm-gaudi" / commit


def vllm_dir(version: str) -> Path:
    return root() / "vllm" / version


FILL_COMMAND = "invoke upstream.fetch  (or: invoke upstream.fetch --from /path/to/a/vllm-gaudi/mirror)"


def is_complete(path: Path) -> bool:
    return (path / MARKER).is_file()


def require(pins: Pins) -> tuple[Path, Path]:
    """The two cache entries, or an error that names the command that fills them."""
    gaudi, vllm = vllm_gaudi_dir(pins.vllm_gaudi_commit), vllm_dir(pins.vllm_version)
    missing = [str(p) for p in (gaudi, vllm) if not is_complete(p)]
    if missing:
        raise UpstreamError(
            "the upstream source cache is empty: missing " + ", ".join(missing),
            hint=f"fill it with: {FILL_COMMAND}",
        )
    return gaudi, vllm


def redact(source: str) -> str:
    """A source URL fit for logs and the cache marker: credentials in it are replaced."""
    return re.sub(r"(?<=://)[^/@\s]+@", "***@", source)


def _put_in_place(tree: Path, dest: Path, marker: dict) -> None:
    """Mark a finished tree complete and rename it into place (the marker is what `require` trusts)."""
    (tree / MARKER).write_text(json.dumps(marker) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    tree.rename(dest)


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return signals.run(cmd, capture_output=True, text=True, **kw)


def check_source(source: str) -> None:
    """A git source is a URL or a path; one starting with '-' would reach git as an option."""
    if source.startswith("-"):
        raise UsageError(f"--from {source!r} starts with '-', which git would read as an option",
                         hint=f"give a URL, or a path such as ./{source}")
    said = grammar.control_char(source)
    if said:
        raise UsageError(f"--from holds a control character ({said})")


def fetch_vllm_gaudi(pins: Pins, source: str = GITHUB, dry_run: bool = False) -> Path:
    check_source(source)
    dest = vllm_gaudi_dir(pins.vllm_gaudi_commit)
    if is_complete(dest):
        say(f"vllm-gaudi {pins.vllm_gaudi_commit[:9]}: cached at {dest}")
        return dest
    if dry_run:
        _print_fetch(source, pins.vllm_gaudi_version, str(dest))
        return dest
    return _fetch_tree(source, pins.vllm_gaudi_version, want=pins.vllm_gaudi_commit)


def fetch_ref(ref: str, source: str = GITHUB, dry_run: bool = False) -> Path:
    """vllm-gaudi at any tag or commit (`fixes.drift --to REF`), cached under its commit like the pinned
    one; the marker remembers the ref, so `cached_ref` finds it again without the source."""
    found = cached_ref(ref)
    if found:
        say(f"vllm-gaudi {ref}: cached at {found}")
        return found
    if dry_run:
        _print_fetch(source, ref, str(root() / "vllm-gaudi" / "<its commit>"))
        return root() / "vllm-gaudi" / ref
    return _fetch_tree(source, ref)


def cached_ref(ref: str) -> Path | None:
    """The complete cache entry for a commit, or for a ref an earlier `fetch_ref` recorded."""
    base = root() / "vllm-gaudi"
    if re.fullmatch(r"[0-9a-f]{40}", ref) and is_complete(base / ref):
        return base / ref
    for marker in sorted(base.glob(f"*/{MARKER}")):
        try:
            if json.loads(marker.read_text()).get("ref") == ref:
                return marker.parent
        except ValueError:
            continue
    return None


def _print_fetch(source: str, ref: str, dest: str) -> None:
    for c in (["git", "init", "-q", "--bare", "<tmp>/git"],
              ["git", "--git-dir", "<tmp>/git", "fetch", "-q", "--depth", "1", redact(source), _refspec(ref)],
              ["git", "--git-dir", "<tmp>/git", "archive", "FETCH_HEAD", "|", "tar", "-x", "-C", dest]):
        print(printable(" ".join(c)))


def _refspec(ref: str) -> str:
    return ref if re.fullmatch(r"[0-9a-f]{40}", ref) else f"refs/tags/{ref}"


def _fetch_tree(source: str, ref: str, want: str | None = None) -> Path:
    """Fetch one tag or commit from source and put its tree in the cache under its commit. With `want`,
    the ref must be at that commit (the recipe's pin); some mirrors carry the commit but not the tag."""
    say(f"vllm-gaudi {ref}: fetching from {redact(source)}")
    base = root() / "vllm-gaudi"
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".vllm-gaudi.", dir=base))
    try:
        git = tmp / "git"
        _run(["git", "init", "-q", "--bare", str(git)], check=True)
        deadline, max_bytes = bounds()

        def fetch(what: str) -> subprocess.CompletedProcess:
            return limits.run_bounded(["git", "--git-dir", str(git), "fetch", "-q", "--depth", "1", source, what],
                                      watch=tmp, max_bytes=max_bytes, max_env=MAX_ENV, deadline=deadline,
                                      what=f"fetching vllm-gaudi {ref} from {redact(source)}",
                                      env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})  # never ask for a password

        got = fetch(_refspec(ref))
        if got.returncode != 0 and want:
            got = fetch(want)
        if got.returncode != 0:
            lines = got.stderr.strip().splitlines() or ["git failed"]
            said = next((line for line in lines if line.startswith("fatal:")), lines[-1])
            missing = "couldn't find remote ref" in said
            raise UpstreamError(
                f"could not fetch vllm-gaudi {ref} from {redact(source)}: {redact(said)}",
                hint="name a tag, or a full 40-hex commit, of vllm-gaudi" if missing else
                "where GitHub is unreachable, give a local mirror or clone: --from /path/to/vllm-gaudi",
            )
        commit = _run(["git", "--git-dir", str(git), "rev-parse", "FETCH_HEAD^{commit}"]).stdout.strip()
        if want and commit != want:
            raise UpstreamError(f"{redact(source)} has {ref} at {commit}, not the pinned {want}",
                                hint="check the mirror, or the pin in the recipe")
        dest = base / commit
        if is_complete(dest):
            return dest
        listing = _run(["git", "--git-dir", str(git), "ls-tree", "-r", "-l", "-z", commit], check=True).stdout
        check_listed_size(sum(int(e.split()[3]) for e in listing.split("\0") if e and e.split()[3] != "-"),
                          max_bytes, f"vllm-gaudi {ref} ({redact(source)})")
        tree = tmp / "tree"
        tree.mkdir()
        with signals.popen(["git", "--git-dir", str(git), "archive", commit], stdout=subprocess.PIPE) as archive:
            signals.run(["tar", "-x", "-C", str(tree)], stdin=archive.stdout, check=True)
        if archive.returncode != 0:
            raise UpstreamError("git archive failed")
        refuse_links_out(tree, f"vllm-gaudi {ref} ({redact(source)})")
        marker = {"source": redact(source), "commit": commit}
        if ref != commit:
            marker["ref"] = ref
        _put_in_place(tree, dest, marker)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say(f"vllm-gaudi {ref}: cached at {dest}")
    return dest


def refuse_links_out(tree: Path, what: str) -> None:
    """A tree from outside may hold symlinks; one that points out of the tree would have the lab, the
    drift check or a base comparison read (or patch) a host file through it."""
    inside = tree.resolve()
    for path in tree.rglob("*"):
        if path.is_symlink() and not path.resolve().is_relative_to(inside):
            raise UpstreamError(f"{what} holds a link out of its tree: {printable(str(path.relative_to(tree)))} -> "
                                f"{printable(os.readlink(path))[:200]}", hint="check the source")


def fetch_vllm(pins: Pins, wheel: Path | None = None, dry_run: bool = False) -> Path:
    dest = vllm_dir(pins.vllm_version)
    if is_complete(dest):
        say(f"vllm {pins.vllm_version}: cached at {dest}")
        return dest
    download = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                f"vllm=={pins.vllm_version}", "-d", "<tmp>"]
    if dry_run:
        print(printable(" ".join(download) if wheel is None else f"(use {wheel})"))
        print(f"extract vllm/**/*.py and the dist-info into {dest}")
        return dest
    if wheel is not None and not zipfile.is_zipfile(wheel):
        raise UsageError(f"--wheel {wheel}: not a wheel (no such file, or not a zip archive)",
                         hint=f"download one with: pip download --no-deps vllm=={pins.vllm_version}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".vllm.", dir=dest.parent))
    try:
        deadline, max_bytes = bounds()
        if wheel is None:
            say(f"vllm {pins.vllm_version}: downloading the wheel from PyPI (about 500 MB; "
                f"within {deadline.seconds:.0f}s, {TIMEOUT_ENV})")
            download[-1] = str(tmp / "wheel")
            # pip's own temporary files (where a download grows) and no cache of its own: all under tmp,
            # so the bound sees every byte and an interrupted download leaves nothing behind.
            env = {**os.environ, "TMPDIR": str(tmp), "PIP_NO_CACHE_DIR": "1"}
            got = limits.run_bounded(download, watch=tmp, max_bytes=max_bytes, max_env=MAX_ENV, deadline=deadline,
                                     what=f"downloading vllm=={pins.vllm_version}", env=env)
            if got.returncode != 0:
                raise UpstreamError(f"pip could not download vllm=={pins.vllm_version}: "
                                    + printable(got.stderr.strip()[-400:]),
                                    hint="give a downloaded wheel: invoke upstream.fetch --wheel PATH")
            wheel = next((tmp / "wheel").glob("vllm-*.whl"), None)
            if wheel is None:
                raise UpstreamError(f"pip downloaded no vllm wheel for {pins.vllm_version}")
        tree = tmp / "tree"
        try:
            with zipfile.ZipFile(wheel) as z:
                infos = [i for i in z.infolist() if i.filename.endswith(".py") or ".dist-info/" in i.filename]
                check_listed_size(sum(i.file_size for i in infos), max_bytes, f"the wheel {Path(wheel).name}")
                for info in infos:
                    z.extract(info, tree)
        except (zipfile.BadZipFile, EOFError) as exc:
            raise UpstreamError(f"the wheel {Path(wheel).name} is not a readable zip archive: {exc}") from None
        names = [i.filename for i in infos]
        version_file = tree / "vllm" / "_version.py"
        recorded = version_file.read_text() if version_file.exists() else ""
        _put_in_place(tree, dest, {"wheel": Path(wheel).name, "files": len(names),
                                   "version_file": recorded.strip().splitlines()[-1:]})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say(f"vllm {pins.vllm_version}: {len(names)} files cached at {dest}")
    return dest
