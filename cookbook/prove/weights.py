"""The weights step of `invoke serve` and `invoke chain`: the recipe's model into the host's Hugging Face
cache before the server starts, so a large checkpoint does not download silently inside a container whose
health wait then times out.

With huggingface_hub: the files the Hub lists for the model's main branch (the commit it resolves is
recorded), each downloaded into the cache the container mounts (a progress bar per file; a connection
that drops mid-file is resumed with a Range request by the client; a file already in the cache is not
downloaded again, so a run that failed goes on from the files it finished), then checked against the
Hub's hashes: the sha256 of an LFS file, the git blob id of a small one. A file that does not match is
removed from the cache (blob and snapshot link), so nothing unchecked is left looking present. What was
verified is recorded (the step's weights.json): a later run whose cache still holds exactly those blobs
is skipped without the network.

The token comes from the environment only (HF_TOKEN, else HUGGING_FACE_HUB_TOKEN; never the token file of
`hf auth login`), and is never printed or recorded. A recipe whose model is mounted by the run
(model.weights: mounted) has nothing to fetch.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from ..host.errors import CheckFailure, UsageError, WeightsError
from ..host.progress import say

TOKEN_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
REVISION = "main"  # the schema pins no revision: the branch, and the commit it resolved to is recorded
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
CHUNK = 8 << 20


@dataclass(frozen=True)
class File:
    """One file of the model as the Hub lists it (repo_info(files_metadata=True))."""

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
    if not path.is_file():
        return "missing from the cache"
    size = path.stat().st_size
    if size != want.size:
        return f"{size} bytes, the Hub lists {want.size}"
    if want.sha256:
        got = sha256(path)
        return None if got == want.sha256 else f"sha256 {got[:16]}..., the Hub lists {want.sha256[:16]}..."
    got = git_blob_id(path)
    return None if got == want.blob_id else f"git blob id {got[:12]}..., the Hub lists {want.blob_id[:12]}..."


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
    blobs (their names are their hashes) at the same sizes, and the branch still points there; else None."""
    try:
        doc = json.loads(out.read_text())
        files = [File(**f) for f in doc["files"]]
        commit = doc["commit"]
    except (OSError, ValueError, KeyError, TypeError):
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
    for f in files:
        link = home / "snapshots" / commit / f.name
        blob = Path(os.path.realpath(link))
        if not blob.is_file() or blob.name != f.etag or blob.stat().st_size != f.size:
            return None
    return commit


# --- fetching -----------------------------------------------------------------------------------------

def listed(info) -> list[File]:
    """The files of a repo_info(files_metadata=True) answer."""
    return [File(s.rfilename, s.size if s.size is not None else s.lfs.size, s.blob_id,
                 s.lfs.sha256 if s.lfs else None) for s in info.siblings or ()]


def _refused(exc, repo_id: str, via: str | None) -> Exception:
    """The Hub's refusal as one line: a missing token says how to give one; the token is never shown."""
    from huggingface_hub import errors as hf

    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, hf.GatedRepoError) or status in (401, 403):
        if via:
            return UsageError(f"weights: the Hub refused {repo_id} with the token in {via} (HTTP {status})",
                              hint="use a token that can read the model (and accept its license on the Hub)")
        return UsageError(f"weights: the Hub refused {repo_id} without a token (HTTP {status})",
                          hint="export HF_TOKEN=<a token that can read the model> and run again")
    if isinstance(exc, hf.RepositoryNotFoundError):
        return UsageError(f"weights: the Hub has no model {repo_id}" + ("" if via else " it shows without a token"),
                          hint="check model.id in the recipe, or export HF_TOKEN for a private model")
    if isinstance(exc, hf.RevisionNotFoundError):
        return UsageError(f"weights: {repo_id} has no revision {REVISION}")
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return WeightsError(f"weights: the Hub did not answer for {repo_id}: {first}",
                        hint="check the network (or HF_ENDPOINT), then run again: finished files are kept")


def _drop(path: Path) -> None:
    """Remove a refused file from the cache: its blob and its snapshot link."""
    blob = Path(os.path.realpath(path))
    for p in (blob, path):
        try:
            p.unlink()
        except FileNotFoundError:
            pass


def fetch(repo_id: str, hf_cache: str, out: Path, revision: str = REVISION) -> Result:
    """The model's files into the cache, verified; skipped without the network when `out` records them."""
    cache = hub_cache(hf_cache)
    commit = present(out, repo_id, revision, cache)
    if commit:
        return Result("present", f"{repo_id} present and verified at {commit[:12]} (no download)", commit)

    import httpx2
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub import errors as hf

    tok, via = token()
    endpoint = os.environ.get("HF_ENDPOINT") or None
    say(f"weights: asking the Hub for {repo_id} at {revision}" + (f" (token from {via})" if via else " (no token)"))
    try:
        info = HfApi(endpoint=endpoint).model_info(repo_id, revision=revision, files_metadata=True,
                                                   token=tok or False)
    except (hf.HfHubHTTPError, httpx2.HTTPError, OSError) as exc:
        raise _refused(exc, repo_id, via) from None
    commit, files = info.sha, listed(info)
    if not commit or not files:
        raise WeightsError(f"weights: the Hub listed no commit or no files for {repo_id} at {revision}")
    total = sum(f.size for f in files)
    say(f"weights: {repo_id} at {commit[:12]}: {len(files)} files, {total / 1e9:.2f} GB into {cache}")
    home = storage(cache, repo_id)
    for i, f in enumerate(files, 1):
        say(f"weights: {i}/{len(files)} {f.name} ({f.size / 1e6:.1f} MB)")
        try:
            got = Path(hf_hub_download(repo_id, f.name, revision=commit, cache_dir=cache, endpoint=endpoint,
                                       token=tok or False))
        except (hf.HfHubHTTPError, httpx2.HTTPError, OSError) as exc:
            raise _refused(exc, repo_id, via) from None
        said = problem(got, f)
        if said:
            _drop(home / "snapshots" / commit / f.name)
            raise CheckFailure(f"weights: {repo_id}/{f.name} is not the Hub's file ({said}); removed from the cache",
                               hint="run again to download it afresh; if it recurs, the transfer is being altered")
    if not COMMIT_RE.match(revision):  # the branch points at what was verified, as the Hub's own client does
        (home / "refs").mkdir(parents=True, exist_ok=True)
        (home / "refs" / revision).write_text(commit)
    record(out, repo_id, revision, commit, cache, files)
    return Result("fetched", f"{repo_id} at {commit[:12]}: {len(files)} files, {total / 1e9:.2f} GB, verified", commit)


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
            f"(token: {'from ' + via if via else 'none'}; record {out})")


def step(loaded, hf_cache: str | None, out: Path) -> Result:
    said = skip_reason(loaded, hf_cache)
    if said:
        return Result("skipped", said)
    return fetch(loaded.recipe.model.id, hf_cache, out)
