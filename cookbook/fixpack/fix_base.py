"""`invoke fixes.verify --base IMAGE`: the pack checked against a base image's own files, before a build.

The pack's pristine hashes come from the release's wheel and tag; a real base may carry other files (it
builds vLLM from source). The base is never run: `docker create` makes a container that is only read,
`docker cp` takes each target file out of it, and the container is removed by the id it got, on success,
on an error, on Ctrl-C and on SIGTERM. Each file is compared with its pristine sha256, and the pack is
applied in order to a scratch copy of the files with the host's `fixes.verify` code (inimage's
own patch tool). Fix by fix: matches, differs but applies (with the diff of the pristine file against the
base's under build/fixes-verify/), or does not apply (why).
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import tarfile
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from ..host import containers, engine, grammar, outdir
from ..host.errors import (
    PACK_DIFFERS,
    EngineError,
    PackDiffers,
    PackFailure,
    UpstreamError,
    UsageError,
    printable,
)
from ..host.names import Label
from ..host.paths import ROOT
from ..host.paths import fixes_dir as default_fixes_dir
from ..host.progress import say
from ..recipe import fixes, release
from .fix_verify import patch_verdict

MATCHES, DIFFERS, NO_APPLY, NOT_WRITTEN = "matches", "differs but applies", "does not apply", "not written"
# The pack applies, but not to the files it was recorded against: a build on this base still refuses it
# (the applier checks the pristine hashes first). Not 1: nothing conflicts; not 0: the build would fail.
EXIT_DIFFERS = PACK_DIFFERS
MARKER = ".cookbook-fixes-verify"
ROLE = "fixes-verify"
PROBE = "vllm_gaudi/__init__.py"  # what makes a folder the base's site-packages
# The most a base's file may hold: the pack's target files are Python sources (the largest is about
# 400 KB); anything bigger is refused from docker cp's tar header, before it is read.
MAX_FILE_BYTES = 8 << 20
# Where pip puts packages in the Debian and Ubuntu based images vllm-gaudi builds on, after the
# recipes' own base.site_packages and the stand-in's.
USUAL_SITES = (*(f"/usr/local/lib/python3.{minor}/{kind}-packages" for minor in (12, 11, 10, 13)
                 for kind in ("dist", "site")), "/usr/lib/python3/dist-packages")


@dataclass(frozen=True)
class FileState:
    package: str
    path: str
    want: str  # the pack's pristine sha256
    found: str | None  # the base's sha256; None when the base lacks the file

    @property
    def name(self) -> str:
        return f"{self.package}/{self.path}"


@dataclass(frozen=True)
class Verdict:
    fix: str
    verdict: str
    why: str = ""
    differing: tuple[str, ...] = ()  # package/path of target files whose bytes are not the pristine ones


def classify(files: list[FileState], patched: str, said: str = "") -> tuple[str, str]:
    """(verdict, why) of one fix from its target files in the base and what applying its patches to the
    scratch tree gave (fix_verify's status: applies, already upstream, conflicts)."""
    missing = [f.name for f in files if f.found is None]
    if missing:
        return NO_APPLY, f"the base has no {', '.join(missing)}"
    if patched == "already upstream":
        return NO_APPLY, f"its change is already in the base: {said}"
    if patched != "applies":
        return NO_APPLY, said or patched
    differing = [f.name for f in files if f.found != f.want]
    if differing:
        return DIFFERS, f"{', '.join(differing)} not the pristine file{'s' if len(differing) > 1 else ''}"
    return MATCHES, ""


def error_class(verdicts: list[str]) -> type[PackFailure] | None:
    """None only when the pack applies as recorded (a fix not written yet does not count); else what the
    run raises: PackFailure (exit 1) when a fix does not apply, PackDiffers (exit 4) when it applies to files
    that are not the pristine ones."""
    if NO_APPLY in verdicts:
        return PackFailure
    if DIFFERS in verdicts:
        return PackDiffers
    return None


def site_candidates(env: list[str] | None, recipe_sites: list[str]) -> list[str]:
    """Where to look for the base's site-packages, in order: the PYTHONPATH of the image's config, the
    recipes' base.site_packages (what the cookbook already assumes of the vllm-gaudi base), the usual places."""
    from ..image.standin import SITE_PACKAGES

    found: list[str] = []
    for item in env or []:
        name, _, value = item.partition("=")
        if name == "PYTHONPATH":
            found += [p for p in value.split(":") if p.startswith("/")]
    return list(dict.fromkeys([*found, *recipe_sites, SITE_PACKAGES, *USUAL_SITES]))


def slug(image: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", image).strip("_.") or "image"


# ------------------------------------------------------------------------------------ the engine


@contextlib.contextmanager
def created(image: str) -> Iterator[str]:
    """A container of `image` that is never started, for the length of the block, removed by its id
    afterwards (containers.made: on an error, Ctrl-C and SIGTERM too, and one interrupted while made)."""
    # A command is given so that an image without CMD can be created; it is never run.
    args = containers.argv("create", image, ["true"], role=ROLE, options=["--network=none"])
    with containers.made(args, what=f"the base {image}", timeout=120) as cid:
        yield cid


def read_file(cid: str, path: str, limit: int = 0, timeout: float = 120) -> bytes | None:
    """One regular file of the container, through `docker cp` (a tar stream, read as it comes); None when
    it is not there or is not a regular file. A file over `limit` bytes (MAX_FILE_BYTES by default) is
    refused from its tar header, before any of its content is read."""
    limit = limit or MAX_FILE_BYTES
    c = engine.client()
    expired = threading.Event()
    with subprocess.Popen([c.path, "cp", f"{cid}:{path}", "-"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=c.env()) as proc:
        timer = threading.Timer(timeout, lambda: (expired.set(), proc.kill()))
        timer.start()
        try:
            found = _first_member(proc.stdout, limit)
        finally:
            timer.cancel()
            proc.kill()  # what is left of the stream is not read
            said = proc.stderr.read(65536).decode(errors="replace").strip()
            code = proc.wait()
    if expired.is_set():
        raise EngineError(f"`docker cp` of {path} did not answer within {timeout:.0f}s")
    if found is None:  # no tar stream: docker cp said why
        if "Could not find the file" in said or "No such container:path" in said:
            return None
        raise EngineError(f"`docker cp {path}` failed (exit {code}): {said[-400:]}")
    size, data = found
    if size > limit:
        raise UsageError(f"{path} in the base is {size} bytes, over the {limit} a target file may have; not read",
                         hint="the pack's target files are Python sources of a few hundred KB at most")
    return data


def _first_member(stream, limit: int) -> tuple[int, bytes | None] | None:
    """(size, content) of the first member of a tar stream, content None when it is not a regular file
    (a folder or a link where a target file should be: not the file the pack edits) or is over `limit`;
    None when the stream holds no tar."""
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            member = tar.next()
            if member is None:
                return None
            if not member.isfile() or member.size > limit:
                return member.size if member.isfile() else 0, None
            return member.size, tar.extractfile(member).read()
    except tarfile.ReadError:
        return None


def find_site(cid: str, candidates: list[str]) -> str | None:
    return next((site for site in candidates if read_file(cid, f"{site}/{PROBE}") is not None), None)


# ------------------------------------------------------------------------------------- the check


@dataclass(frozen=True)
class Report:
    image: str
    site: str
    verdicts: list[Verdict]
    out: Path

    def require(self) -> None:
        """Raise the run's verdict (`failure`'s words) unless the pack applies as recorded."""
        error = error_class([v.verdict for v in self.verdicts])
        if error:
            raise error(failure(self))


def check_base_ref(image: str) -> None:
    """A base as Docker names it, before anything (dry runs too) puts it in a command: `--help` or a path
    is refused here, not taken by docker as a flag or a name."""
    said = grammar.image_problem(image)
    if said:
        raise UsageError(f"base {printable(image)}: {said}", hint="an image reference: NAME[:TAG][@sha256:DIGEST]")


def targets(specs: dict[str, fixes.FixSpec]) -> dict[tuple[str, str], str]:
    return {(t.package, f): sha for spec in specs.values() for t in spec.targets for f, sha in t.files.items()}


def verify_base(image: str, profile_name: str | None = None, site: str | None = None, out: Path | None = None,
                fixes_dir: Path | None = None, dry_run: bool = False) -> Report | None:
    check_base_ref(image)
    profile_name = release.profile_or_default(profile_name)
    fixes_dir = fixes_dir or default_fixes_dir()
    profile = fixes.load_profile(profile_name, fixes_dir)
    present = fixes.resolve(profile, profile.order, fixes_dir)
    wanted = targets(present)
    out = out or ROOT / "build" / "fixes-verify" / slug(image)
    outdir.check(out.absolute(), MARKER, "the image's folder under build/fixes-verify", verb="write")
    if dry_run:
        where = site or "SITE (the first of: the image's PYTHONPATH, " + ", ".join(_recipe_sites()) + \
            f", ... holding {PROBE})"
        print(f"docker create --label {Label.CONTAINER}={ROLE} --network=none {image} true  # never started")
        print(f"site-packages: {where}")
        for package, path in wanted:
            print(f"docker cp CID:{site or 'SITE'}/{package}/{path} -")
        print("docker rm --force CID")
        print(f"would write the report and the diffs of files that differ into {out}")
        return None
    found_site, base_files = read_base(image, site, wanted)
    verdicts = judge(profile, present, wanted, base_files, fixes_dir)
    _write(out, image, found_site, verdicts, wanted, base_files, profile, profile_name)
    return Report(image, found_site, verdicts, out)


def read_base(image: str, site: str | None, wanted) -> tuple[str, dict[tuple[str, str], bytes | None]]:
    """(the base's site-packages, {(package, path): its bytes or None}) of every wanted target file."""
    engine.require_daemon()
    info = _inspect(image)
    with created(image) as cid:
        candidates = [site] if site else site_candidates((info.get("Config") or {}).get("Env"), _recipe_sites())
        found_site = find_site(cid, candidates)
        if found_site is None:
            raise UsageError(f"no site-packages with {PROBE} found in {image}",
                             hint=f"looked in {', '.join(candidates)}; name it with --site DIR")
        say(f"{image}: reading {len(wanted)} target files from {found_site} (container {cid[:12]}, never started)")
        files = {key: read_file(cid, f"{found_site}/{key[0]}/{key[1]}") for key in wanted}
    for (package, path), data in files.items():
        why = not_source(data) if data is not None else ""
        if why:
            raise UsageError(f"{found_site}/{package}/{path} in {image} is {why}, not the Python source the "
                             "pack patches",
                             hint="is --base the vllm-gaudi image you meant? (--site names its site-packages)")
    return found_site, files


def not_source(data: bytes) -> str:
    """Why a base's target file cannot be a Python source to patch and diff; '' when it can be one."""
    nul = data.find(b"\0")
    if nul >= 0:
        return f"binary (a NUL byte at offset {nul})"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})"
    return ""


def _inspect(image: str) -> dict:
    if not engine.image_exists(image):
        raise UsageError(f"no image {image} on this Docker engine",
                         hint=f"pull it first (docker pull {image}); fixes.verify --base never pulls or runs it")
    return engine.inspect(image)


def _recipe_sites() -> list[str]:
    from ..recipe import recipes

    try:
        return list(dict.fromkeys(str(r.recipe.base.site_packages) for r in recipes.load_all()))
    except UsageError:  # a broken recipe elsewhere does not stop a look at a base
        return []


def judge(profile: fixes.ProfileSpec, present: dict[str, fixes.FixSpec], wanted: dict[tuple[str, str], str],
           base_files: dict[tuple[str, str], bytes | None], fixes_dir: Path) -> list[Verdict]:
    verdicts = []
    with tempfile.TemporaryDirectory(prefix="cookbook-verify-base.") as tmp:
        staging = Path(tmp)
        stage_files(base_files, staging)
        for name in profile.order:
            spec = present.get(name)
            if spec is None:
                verdicts.append(Verdict(name, NOT_WRITTEN))
                continue
            states = [FileState(t.package, f, sha, sha_of(base_files[(t.package, f)]))
                      for t in spec.targets for f, sha in t.files.items()]
            if any(s.found is None for s in states):
                verdict, why = classify(states, "not tried")
            else:
                outcome = patch_verdict(name, spec, staging, fixes_dir)
                verdict, why = classify(states, outcome.status, outcome.detail)
            verdicts.append(Verdict(name, verdict, why, tuple(s.name for s in states if s.found not in (None, s.want))))
    return verdicts


def stage_files(files: dict[tuple[str, str], bytes | None], staging: Path) -> None:
    """The files the base has, laid out as staging/package/path for the patch tool."""
    for (package, path), data in files.items():
        if data is not None:
            (staging / package / path).parent.mkdir(parents=True, exist_ok=True)
            (staging / package / path).write_bytes(data)


def sha_of(data: bytes | None) -> str | None:
    return None if data is None else fixes.fixplan.sha256_bytes(data)


def diff_name(package: str, path: str) -> str:
    return f"diffs/{package}/{path}.diff"


def _write(out: Path, image: str, site: str, verdicts: list[Verdict], wanted: dict[tuple[str, str], str],
           base_files: dict[tuple[str, str], bytes | None], profile: fixes.ProfileSpec, profile_name: str) -> None:
    """The verdicts (verdicts.json) and, for each target file that differs, the unified diff of the
    pristine file (from the upstream cache) against the base's, written whole and swapped into `out`."""
    with outdir.staged(out, MARKER, f"written by invoke fixes.verify --base {image}\n") as tmp:
        diffs, missing_cache = pristine_diffs(profile, wanted, base_files)
        for (package, path), diff in diffs.items():
            target = tmp / diff_name(package, path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(diff)
        report = {"image": image, "site_packages": site, "profile": profile_name,
                  "verdicts": [asdict(v) for v in verdicts],
                  "diffs": [diff_name(*k) for k in diffs],
                  "diffs_missing": missing_cache}
        (tmp / "verdicts.json").write_text(json.dumps(report, indent=2) + "\n")


def pristine_diffs(profile: fixes.ProfileSpec, wanted: dict[tuple[str, str], str],
                   base_files: dict[tuple[str, str], bytes | None]) -> tuple[dict[tuple[str, str], str], str]:
    """({(package, path): unified diff of the pristine file (upstream cache) against the base's} for each
    target file the base has with other bytes, what is missing when the upstream cache is not here)."""
    from .fix_new import unified_diff
    from .fix_sources import package_roots

    differing = sorted(key for key, sha in wanted.items()
                       if base_files[key] is not None and sha_of(base_files[key]) != sha)
    if not differing:
        return {}, ""
    try:
        roots = package_roots(profile)
    except UpstreamError as exc:  # a Gaudi host may not have it: the verdicts stand, the diffs wait
        return {}, exc.what
    return {(package, path): unified_diff(path, (roots[package] / path).read_bytes(), base_files[(package, path)])
            for package, path in differing}, ""


def describe(report: Report) -> list[str]:
    """The terminal summary: one line per fix, why below it, and where each diff is (+/- line counts)."""
    rel = shown(report.out)
    lines = [f"{report.image}: site-packages {report.site}"]
    for v in report.verdicts:
        lines.append(f"{v.fix:36} {v.verdict}")
        if v.verdict == NO_APPLY and v.why:
            lines += ["    " + line for line in v.why.splitlines()[:12]]
        for name in v.differing:
            package, path = name.split("/", 1)
            diff = report.out / diff_name(package, path)
            if diff.is_file():
                text = diff.read_text().splitlines()
                plus = sum(1 for line in text if line.startswith("+") and not line.startswith("+++"))
                minus = sum(1 for line in text if line.startswith("-") and not line.startswith("---"))
                lines.append(f"    {name} differs (+{plus} -{minus} lines): {rel / diff_name(package, path)}")
            else:
                lines.append(f"    {name} differs (no diff: the upstream cache is missing; invoke upstream.fetch)")
    counts = {k: sum(v.verdict == k for v in report.verdicts) for k in (MATCHES, DIFFERS, NO_APPLY, NOT_WRITTEN)}
    lines.append(", ".join(f"{n} {k}" for k, n in counts.items() if n) + f"; report in {rel / 'verdicts.json'}")
    return lines


def task(image: str, profile_name: str, site: str | None = None, dry_run: bool = False) -> None:
    """`invoke fixes.verify --base IMAGE`: the report fix by fix, then the verdict (Report.require)."""
    report = verify_base(image, profile_name, site, dry_run=dry_run)
    if report is None:
        return
    for line in describe(report):
        print(line)
    report.require()


def failure(report: Report) -> str:
    """The words of a run's verdict when the pack does not apply as recorded."""
    bad = [v.fix for v in report.verdicts if v.verdict == NO_APPLY]
    if bad:
        return f"{len(bad)} fix(es) do not apply to {report.image}: {', '.join(bad)}"
    files = sorted({name for v in report.verdicts for name in v.differing})
    return (f"the pack applies to {report.image}, but {len(files)} target file(s) are not the pristine ones: "
            f"a build on it refuses them (exit {EXIT_DIFFERS}); a candidate pack for it: "
            f"invoke fixes.rebase --base {report.image}")


def shown(path: Path) -> Path:
    try:
        return path.absolute().relative_to(Path.cwd())
    except ValueError:
        return path
