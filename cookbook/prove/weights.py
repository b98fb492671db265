"""The weights step of `invoke serve` and `invoke chain`: the recipe's model into the host's Hugging Face
cache before the server starts, so a large checkpoint does not download silently inside a container whose
health wait then times out.

The Hub (or the mirror at HF_ENDPOINT) is outside input. The files it lists for the model's main branch are
read once and checked before anything is written: the commit is 40 hex digits, each file name a plain
relative path, each size a number, each hash hex of its length. The cache is laid out as huggingface_hub
lays it (blobs/HASH, snapshots/COMMIT/NAME -> ../../blobs/HASH, refs/main), with our own client rather than
hf_hub_download, because that one names a blob after the server's ETag and has neither an overall deadline
nor a bound on what a file may send. Here a blob is named by the listing's hash, a download stops at the
size the listing gave and at the step's deadline (COOKBOOK_WEIGHTS_TIMEOUT), a connection that drops is
resumed with a Range request, and a file is promoted into the cache only after its hash matches: the sha256
of an LFS file, the git blob id of a small one. The only files the step deletes are its own partial
downloads, which it created exclusively in the model's blobs folder. It never writes through a symlink:
folders under the model's cache folder must be real folders, and a blob or link is replaced, not followed.
What was verified is recorded (the step's weights.json): a later run whose cache still holds exactly those
blobs is skipped without the network.

The token comes from the environment only (HF_TOKEN, else HUGGING_FACE_HUB_TOKEN; never the token file of
`hf auth login`), is sent to the endpoint's host only (not across a redirect to another), and is never
printed or recorded. A recipe whose model is mounted by the run (model.weights: mounted) has nothing to fetch.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import quote, urlsplit

from ..host import limits
from ..host.errors import CheckFailure, UsageError, WeightsError, printable
from ..host.names import PROJECT
from ..host.progress import console, say

TOKEN_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
TIMEOUT_ENV = "COOKBOOK_WEIGHTS_TIMEOUT"
DEFAULT_TIMEOUT_S = 4 * 3600.0  # the whole step, listing and every file; a stalled or trickling mirror ends here
STALL_S = 60.0  # no byte for this long: the connection is dropped and resumed
TRIES = 5  # attempts in a row without a new byte before a file is given up
LISTING_MAX = 32 << 20  # the model-info answer; a real one of thousands of files is a few MB
REVISION = "main"  # the schema pins no revision: the branch, and the commit it resolved to is recorded
DEFAULT_ENDPOINT = "https://huggingface.co"
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
HEX_RE = re.compile(r"^[0-9a-f]+$")
REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
CHUNK = 8 << 20


@dataclass(frozen=True)
class File:
    """One file of the model as the Hub lists it (model info with blobs)."""

    name: str
    size: int
    blob_id: str  # the git blob sha1: a small file's cache name and hash
    sha256: str | None = None  # an LFS file's cache name and hash

    @property
    def etag(self) -> str:
        return self.sha256 or self.blob_id


@dataclass(frozen=True)
class Result:
    status: str  # fetched, present, skipped
    detail: str
    commit: str | None = None


def token() -> tuple[str | None, str | None]:
    """(token, the variable it came from): from the environment only."""
    for name in TOKEN_ENV:
        value = os.environ.get(name)
        if value:
            return value, name
    return None, None


def hub_cache(hf_cache: str) -> Path:
    """The hub folder of the cache the container mounts (HF_HOME there is the mounted folder)."""
    return Path(os.path.expanduser(hf_cache)) / "hub"


def storage(cache: Path, repo_id: str) -> Path:
    return cache / ("models--" + repo_id.replace("/", "--"))


def git_blob_id(path: Path) -> str:
    h = hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    _hash_into(h, path)
    return h.hexdigest()


def sha256(path: Path) -> str:
    return _hash_into(hashlib.sha256(), path).hexdigest()


def _hash_into(h, path: Path):
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h


def problem(path: Path, want: File) -> str | None:
    """Why the file in the cache is not the Hub's (None: it is)."""
    if path.is_symlink() or not path.is_file():
        return "missing from the cache"
    size = path.stat().st_size
    if size != want.size:
        return f"{size} bytes, the Hub lists {want.size}"
    if want.sha256:
        got = sha256(path)
        return None if got == want.sha256 else f"sha256 {got[:16]}..., the Hub lists {want.sha256[:16]}..."
    got = git_blob_id(path)
    return None if got == want.blob_id else f"git blob id {got[:12]}..., the Hub lists {want.blob_id[:12]}..."


# --- what the Hub says, checked before it names anything on disk ---------------------------------------

def name_problem(name) -> str | None:
    """Why a listed file name cannot be a path under the snapshot folder (None: it can)."""
    if not isinstance(name, str) or not name:
        return "not a file name"
    if any(not ch.isprintable() for ch in name):
        return "holds a control character"
    if name.startswith("/") or "\\" in name:
        return "is not a relative path"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "has an empty, '.' or '..' part"
    if len(name) > 1024 or any(len(part.encode()) > 255 for part in name.split("/")):
        return "is too long for a file name"
    return None


def _hex(value, pattern: re.Pattern) -> bool:
    return isinstance(value, str) and bool(pattern.match(value))


def _size(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 50 else None


def listing(doc, repo_id: str) -> tuple[str, list[File]]:
    """(commit, files) from the model-info answer, or WeightsError (a broken remote: exit 3) saying which
    value is wrong. Nothing the Hub says names a file or folder before it passed here."""
    def bad(what: str) -> WeightsError:
        return WeightsError(f"weights: the Hub's listing of {repo_id} {what}",
                            hint="the Hub or the mirror at HF_ENDPOINT answered what its API does not say; "
                                 "nothing was written")

    if not isinstance(doc, dict):
        raise bad("is not a JSON object")
    commit = doc.get("sha")
    if not _hex(commit, COMMIT_RE):
        raise bad(f"gives the commit {printable(repr(commit))[:80]}, not 40 hex digits")
    siblings = doc.get("siblings")
    if not isinstance(siblings, list) or not siblings:
        raise bad("lists no files")
    files: list[File] = []
    for s in siblings:
        if not isinstance(s, dict):
            raise bad("holds a file entry that is not an object")
        name = s.get("rfilename")
        said = name_problem(name)
        shown = printable(repr(name))[:120]
        if said:
            raise bad(f"names a file {shown}, which {said}")
        lfs = s.get("lfs") if isinstance(s.get("lfs"), dict) else None
        size = _size(s.get("size"))
        if size is None and lfs:
            size = _size(lfs.get("size"))
        if size is None:
            raise bad(f"gives no size for {shown}")
        if lfs and _size(lfs.get("size")) not in (None, size):
            raise bad(f"gives two sizes for {shown}")
        if not _hex(s.get("blobId"), COMMIT_RE):
            raise bad(f"gives no git blob id (40 hex digits) for {shown}")
        if lfs and not _hex(lfs.get("sha256"), SHA256_RE):
            raise bad(f"gives no sha256 (64 hex digits) for the LFS file {shown}")
        files.append(File(name, size, s["blobId"], lfs["sha256"] if lfs else None))
    names = {f.name for f in files}
    if len(names) != len(files):
        raise bad("names a file twice")
    for f in files:  # "a" and "a/b" cannot both be files
        parent = str(PurePosixPath(f.name).parent)
        if parent != "." and any(p in names for p in [parent, *map(str, PurePosixPath(parent).parents)]):
            raise bad(f"names {printable(repr(f.name))[:120]} inside another file")
    return commit, files


def deadline_s() -> float:
    """The step's overall deadline in seconds: COOKBOOK_WEIGHTS_TIMEOUT, else four hours."""
    return limits.env_number(TIMEOUT_ENV, DEFAULT_TIMEOUT_S, "seconds", "the whole weights step")


def endpoint() -> str:
    raw = os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname or any(not c.isprintable() or c == " " for c in raw):
        raise UsageError(f"HF_ENDPOINT={printable(raw)[:80]} is not an http(s) URL",
                         hint="unset it for the Hub, or give a mirror's URL (https://host[:port])")
    return raw.rstrip("/")


# --- the record of what was verified: a later run checks the cache against it, offline ---------------

def record(out: Path, repo_id: str, revision: str, commit: str, cache: Path, files: list[File]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"repo": repo_id, "revision": revision, "commit": commit, "cache": str(cache),
           "files": [asdict(f) for f in files]}
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(out)


def present(out: Path, repo_id: str, revision: str, cache: Path) -> str | None:
    """The commit, when the record says this cache held these verified files and it still holds the same
    blobs (their names are their hashes, in the model's own blobs folder) at the same sizes, and the branch
    still points there; else None."""
    try:
        doc = json.loads(out.read_text())
        commit = doc["commit"]
        files = [File(**f) for f in doc["files"]]
        if not _hex(commit, COMMIT_RE) or any(name_problem(f.name) or not _hex(f.etag, HEX_RE)
                                              for f in files):
            return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if (doc.get("repo"), doc.get("revision"), doc.get("cache")) != (repo_id, revision, str(cache)) or not files:
        return None
    home = storage(cache, repo_id)
    if not COMMIT_RE.match(revision):
        try:
            if (home / "refs" / revision).read_text().strip() != commit:
                return None
        except OSError:
            return None
    blobs = os.path.realpath(home / "blobs")
    for f in files:
        blob = Path(os.path.realpath(home / "snapshots" / commit / f.name))
        if str(blob.parent) != blobs or not blob.is_file() or blob.name != f.etag or blob.stat().st_size != f.size:
            return None
    return commit


# --- the cache: real folders only, nothing followed out of the model's folder ---------------------------

def _real_dir(home: Path, *parts: str) -> Path:
    """home/parts..., each folder made if missing and refused if it is a symlink or not a folder: a write
    below never lands outside the model's cache folder (the folders above home are the user's)."""
    home.parent.mkdir(parents=True, exist_ok=True)
    path = home
    for part in ("", *parts):
        path = path / part if part else path
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            raise UsageError(f"weights: {path} is a symlink or not a folder; the step writes only into real folders "
                             "of the model's cache folder", hint="move it aside, or give another --hf-cache")
        path.mkdir(exist_ok=True)
    return path


def _link(home: Path, commit: str, f: File) -> None:
    """snapshots/COMMIT/NAME -> the blob, relative, as huggingface_hub makes it; a wrong entry is replaced."""
    *folders, base = f.name.split("/")
    where = _real_dir(home, "snapshots", commit, *folders)
    target = os.path.relpath(home / "blobs" / f.etag, where)
    link = where / base
    if link.is_symlink() and os.readlink(link) == target:
        return
    tmp = where / f".{base}.cookbook-link"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()  # our own name for a link left by a run that was killed mid-way
    os.symlink(target, tmp)
    os.replace(tmp, link)  # replaces the entry itself, never what an old link pointed to


def _write_ref(home: Path, revision: str, commit: str) -> None:
    refs = _real_dir(home, "refs")
    tmp = refs / f".{revision}.cookbook-tmp"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.write_text(commit)
    os.replace(tmp, refs / revision)


# --- talking to the Hub ------------------------------------------------------------------------------------

class _Clock:
    def __init__(self, seconds: float):
        self.seconds, self.end = seconds, time.monotonic() + seconds

    def left(self, what: str) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise WeightsError(f"weights: {what} did not finish within the step's deadline of {self.seconds:.0f}s",
                               hint=f"a slow link: raise {TIMEOUT_ENV} (seconds) and run again; "
                                    "finished files are kept")
        return left


@contextlib.contextmanager
def _hard_deadline(clock: _Clock) -> Iterator[None]:
    """The deadline even where no chunk arrives to check it (a server that trickles its headers, a connect
    that hangs): SIGALRM a second after it raises the step's error from wherever the client waits. Only in
    the main thread and when nothing else holds SIGALRM; the checks between chunks stand otherwise."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, None):
        yield
        return

    def expired(signum, frame):
        clock.left("the listing or a download")
        raise WeightsError(f"weights: the step's deadline of {clock.seconds:.0f}s passed")  # clock ran late

    before = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, max(clock.end - time.monotonic(), 0) + 1)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def _timeout(clock: _Clock, what: str):
    import httpx2

    return httpx2.Timeout(min(STALL_S, clock.left(what)))


def _refused(status: int, code: str | None, repo_id: str, via: str | None, what: str) -> Exception:
    """The Hub's refusal as one line: a missing token says how to give one; the token is never shown."""
    if status in (401, 403) or code == "GatedRepo":
        if via:
            return UsageError(f"weights: the Hub refused {repo_id} with the token in {via} (HTTP {status})",
                              hint="use a token that can read the model (and accept its license on the Hub)")
        return UsageError(f"weights: the Hub refused {repo_id} without a token (HTTP {status})",
                          hint="export HF_TOKEN=<a token that can read the model> and run again")
    if code == "RepoNotFound":
        return UsageError(f"weights: the Hub has no model {repo_id}" + ("" if via else " it shows without a token"),
                          hint="check model.id in the recipe, or export HF_TOKEN for a private model")
    if code == "RevisionNotFound":
        return UsageError(f"weights: {repo_id} has no revision {REVISION}")
    return WeightsError(f"weights: the Hub answered HTTP {status} for {what}",
                        hint="check the network (or HF_ENDPOINT), then run again: finished files are kept")


def _network(exc: Exception, what: str) -> WeightsError:
    said = printable(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)[:160]
    return WeightsError(f"weights: the Hub did not answer for {what}: {said}",
                        hint="check the network (or HF_ENDPOINT), then run again: finished files are kept")


def _info(client, url: str, repo_id: str, via: str | None, clock: _Clock) -> object:
    """The model-info answer, read within the deadline and LISTING_MAX bytes."""
    import httpx2

    what = f"the listing of {repo_id}"
    try:
        with client.stream("GET", url, timeout=_timeout(clock, what)) as r:
            if r.status_code != 200:
                raise _refused(r.status_code, r.headers.get("X-Error-Code"), repo_id, via, what)
            body = bytearray()
            for chunk in r.iter_raw():
                body += chunk
                if len(body) > LISTING_MAX:
                    raise WeightsError(f"weights: {what} is larger than {LISTING_MAX >> 20} MB; a mirror that floods",
                                       hint="check HF_ENDPOINT")
                clock.left(what)
    except httpx2.HTTPError as exc:
        raise _network(exc, what) from None
    try:
        return json.loads(body)
    except ValueError:
        raise WeightsError(f"weights: {what} is not JSON", hint="check HF_ENDPOINT") from None


def _download(client, url: str, part, f: File, clock: _Clock, refused, bar, task) -> None:
    """The file's bytes into the open `part`, never more than the listing's size, within the deadline;
    a dropped connection resumed with a Range request (TRIES attempts in a row without a new byte)."""
    import httpx2

    what = printable(f.name)
    have, idle = 0, 0
    while True:
        before = have
        try:
            with client.stream("GET", url, headers={"Range": f"bytes={have}-"} if have else {},
                               timeout=_timeout(clock, what)) as r:
                if have and r.status_code == 200:  # the server ignored the Range: start over
                    part.seek(0)
                    part.truncate()
                    have = 0
                elif have and r.status_code == 206 and not r.headers.get("Content-Range", "").startswith(
                        f"bytes {have}-"):
                    raise httpx2.RemoteProtocolError("an answer to a Range request that starts elsewhere")
                elif r.status_code != (206 if have else 200):
                    if r.status_code >= 500 or r.status_code == 429:
                        raise httpx2.RemoteProtocolError(f"HTTP {r.status_code}")  # worth another try
                    raise refused(r.status_code, r.headers.get("X-Error-Code"), what)
                for chunk in r.iter_raw():
                    if have + len(chunk) > f.size:
                        raise WeightsError(f"weights: {what} sent more than the {f.size} bytes the Hub's listing "
                                           "gives; stopped there, nothing kept",
                                           hint="the Hub or the mirror at HF_ENDPOINT is broken")
                    part.write(chunk)
                    have += len(chunk)
                    bar.update(task, completed=have)
                    clock.left(what)
            if have == f.size:
                return
            raise httpx2.RemoteProtocolError(f"the answer ended at byte {have} of {f.size}")
        except httpx2.HTTPError as exc:
            idle = 0 if have > before else idle + 1
            if idle >= TRIES:
                raise _network(exc, what) from None
            time.sleep(min(2 ** idle / 2, clock.left(what)))


def _free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


def fetch(repo_id: str, hf_cache: str, out: Path, revision: str = REVISION) -> Result:
    """The model's files into the cache, verified; skipped without the network when `out` records them."""
    if not REPO_RE.match(repo_id) or ".." in repo_id:
        raise UsageError(f"weights: model id {printable(repo_id)!r} is not ORG/NAME")
    cache = hub_cache(hf_cache)
    commit = present(out, repo_id, revision, cache)
    if commit:
        return Result("present", f"{repo_id} present and verified at {commit[:12]} (no download)", commit)

    import httpx2
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    from ..host import signals

    clock, base = _Clock(deadline_s()), endpoint()
    tok, via = token()
    where = urlsplit(base)  # its host only: an endpoint URL may carry a user and password
    host = f"{where.scheme}://{where.hostname}" + (f":{where.port}" if where.port else "")
    say(f"weights: asking {host} for {repo_id} at {revision}" + (f" (token from {via})" if via else " (no token)")
        + f"; the step's deadline is {clock.seconds:.0f}s ({TIMEOUT_ENV})")
    headers = {"User-Agent": PROJECT, "Accept-Encoding": "identity"}
    if tok:
        headers["Authorization"] = f"Bearer {tok}"  # httpx drops it on a redirect to another host
    # SIGTERM (a CI cancel) as Ctrl-C: the partial file of the download under way is removed
    with signals.interruptible(), _hard_deadline(clock), \
            httpx2.Client(headers=headers, follow_redirects=True, max_redirects=5) as client:
        info = _info(client, f"{base}/api/models/{repo_id}/revision/{quote(revision, safe='')}?blobs=True",
                     repo_id, via, clock)
        commit, files = listing(info, repo_id)
        total = sum(f.size for f in files)
        home = storage(cache, repo_id)
        blobs = _real_dir(home, "blobs")
        missing = [f for f in files if problem(blobs / f.etag, f)]
        need = sum(f.size for f in {f.etag: f for f in missing}.values())
        if need > _free_bytes(blobs):
            raise UsageError(f"weights: {repo_id} needs {need / 1e9:.2f} GB more in {cache}, which has "
                             f"{_free_bytes(blobs) / 1e9:.2f} GB free", hint="free space, or give another --hf-cache")
        say(f"weights: {repo_id} at {commit[:12]}: {len(files)} files, {total / 1e9:.2f} GB into {cache}; "
            f"{len(missing)} to download ({need / 1e9:.2f} GB)")
        with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                      TimeRemainingColumn(), transient=True, console=console()) as bar:
            for i, f in enumerate(files, 1):
                if f in missing and problem(blobs / f.etag, f):  # a file listed twice under two names: once
                    say(f"weights: {i}/{len(files)} {printable(f.name)} ({f.size / 1e6:.1f} MB)")
                    task = bar.add_task(printable(f.name)[:60], total=f.size)
                    _fetch_one(client, f"{base}/{repo_id}/resolve/{commit}/{quote(f.name)}", blobs, f, clock,
                               lambda status, code, what: _refused(status, code, repo_id, via, what),
                               bar, task, repo_id)
                    bar.remove_task(task)
                _link(home, commit, f)
    if not COMMIT_RE.match(revision):  # the branch points at what was verified, as the Hub's own client does
        _write_ref(home, revision, commit)
    record(out, repo_id, revision, commit, cache, files)
    return Result("fetched", f"{repo_id} at {commit[:12]}: {len(files)} files, {total / 1e9:.2f} GB, verified", commit)


def _fetch_one(client, url: str, blobs: Path, f: File, clock: _Clock, refused, bar, task, repo_id: str) -> None:
    """One file into blobs/HASH: written to a partial file this run creates (never an existing one, never
    through a link), checked, then renamed into place; the partial file is removed on any failure."""
    fd, name = tempfile.mkstemp(prefix=f"{f.etag}.cookbook-", suffix=".incomplete", dir=blobs)  # O_EXCL
    part = Path(name)
    os.fchmod(fd, 0o644)  # as the Hub's client leaves a blob: readable by whoever serves the cache
    try:
        with os.fdopen(fd, "wb") as out:
            _download(client, url, out, f, clock, refused, bar, task)
        said = problem(part, f)
        if said:
            raise CheckFailure(f"weights: {repo_id}/{printable(f.name)} is not the Hub's file ({said}); not kept",
                               hint="run again to download it afresh; if it recurs, the transfer is being altered")
        os.replace(part, blobs / f.etag)  # replaces a wrong blob or link by that name, never follows it
    finally:
        if part.exists() or part.is_symlink():
            part.unlink()


# --- the step, as serve and chain take it ---------------------------------------------------------------

def skip_reason(loaded, hf_cache: str | None) -> str | None:
    """Why this run fetches nothing (None: it fetches): a model the run mounts, or no host cache mounted."""
    if loaded.recipe.model.weights == "mounted":
        return f"skipped: {loaded.id}'s model is mounted by the run (model.weights: mounted)"
    if not hf_cache:
        return "skipped: no host cache is mounted (--hf-cache ''); the server fetches the model itself"
    return None


def plan(loaded, hf_cache: str | None, out: Path) -> str:
    """What the step would do: the dry run's line."""
    said = skip_reason(loaded, hf_cache)
    if said:
        return said
    repo_id, cache = loaded.recipe.model.id, hub_cache(hf_cache)
    commit = present(out, repo_id, REVISION, cache)
    if commit:
        return f"nothing to fetch: {repo_id} present and verified at {commit[:12]} in {cache}"
    via = token()[1]
    return (f"fetch {repo_id} at {REVISION} into {cache}, verified against the Hub's hashes "
            f"(token: {'from ' + via if via else 'none'}; deadline {deadline_s():.0f}s, {TIMEOUT_ENV}; "
            f"record {printable(str(out))})")  # --log-dir as typed: its escapes shown, not obeyed


def step(loaded, hf_cache: str | None, out: Path) -> Result:
    said = skip_reason(loaded, hf_cache)
    if said:
        return Result("skipped", said)
    return fetch(loaded.recipe.model.id, hf_cache, out)
