"""`invoke fixes.drift --to REF`: what a newer vllm-gaudi (and the vLLM it runs on) does to our fix pack.

The pack is applied in order to pristine copies of the new release's sources, exactly as `fixes.verify`
does for the pinned one (the same staging and patch verdict), and each fix gets one verdict:

  applies               its patches apply as they are (the target may have changed elsewhere)
  fixed upstream        the release carries the change, so the fix can be retired: its patches reverse-apply
                        (the change as written), or, where they neither apply nor reverse-apply, every line
                        they add is in the release's file, in the patch's order (the same change amid other
                        edits; blank lines and indentation aside). A fix that only removes lines is never
                        judged by the second rule: absent lines prove nothing
  conflicts             a hunk fails; the report shows it and the function it lands in
  target moved or gone  a target file, or the function the failing hunk is in, is not where it was

Where fix.yaml's `upstream` names a merged fix with `fixed_in`, the row says so, and whether REF (when it
is a release tag) is that release or later: the record stands beside the verdict, never in place of it.

A second staging copy of the pinned release, with the same fixes applied in order, is what names the
function: a hunk's line numbers are in the coordinates of that tree, and Python's ast finds the def
around them there and then finds that def in the new file (or elsewhere in the new package).
The pack is never changed.
"""

from __future__ import annotations

import ast
import json
import re
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from inimage import versions

from ..host import upstream
from ..host.errors import PackFailure, UpstreamError, UsageError, printable
from ..host.paths import ROOT
from ..host.paths import fixes_dir as default_fixes_dir
from ..host.progress import say
from ..recipe import fixes, release
from .fix_sources import apply_patch, package_roots, stage, targets_of
from .fix_verify import patch_verdict

APPLIES, UPSTREAM, CONFLICTS, GONE, NOT_WRITTEN = (
    "applies", "fixed upstream", "conflicts", "target moved or gone", "not written")
REVERSE_APPLIES = "already upstream"  # fix_verify's status for a patch that reverse-applies
PORTS_AS_IS = {APPLIES, NOT_WRITTEN}  # anything else means the pack needs work before it moves on


@dataclass(frozen=True)
class Verdict:
    fix: str
    verdict: str
    detail: str = ""
    hunk: str = ""  # the failing hunk, for conflicts
    function: str = ""  # where the failing hunk lands: Class.method, or "module level"
    upstream: str = ""  # what fix.yaml records of a release that fixes it (recorded_fix)


@dataclass(frozen=True)
class Report:
    ref: str
    commit: str
    vllm: str
    vllm_note: str
    profile: str
    verdicts: list[Verdict] = field(default_factory=list)

    @property
    def ports(self) -> bool:
        return all(v.verdict in PORTS_AS_IS for v in self.verdicts)


# ------------------------------------------------------------------------------------------- vLLM


def vllm_version(ref: str, stable_commit: str | None, known: dict[str, str], override: str | None
                 ) -> tuple[str, str]:
    """The PyPI vLLM version to check a vllm-gaudi ref against, and how it was chosen.

    vllm-gaudi names its vLLM in VLLM_STABLE_COMMIT (a commit, not a version); a commit a profile pins
    maps to that profile's version. Without one, vllm-gaudi's releases are numbered after the vLLM
    release they build on (v0.26.0 on vLLM 0.26.0), so a release tag names it."""
    if override:
        return override, f"vLLM {override} as given (--vllm)"
    if stable_commit and stable_commit in known:
        return known[stable_commit], f"{ref} pins vLLM {stable_commit[:9]} (VLLM_STABLE_COMMIT), which is vLLM " \
                                     f"{known[stable_commit]}"
    tag = re.fullmatch(r"v?(\d+\.\d+\.\d+)(?:rc\d+|\.post\d+)?", ref)
    pinned = f"pins vLLM {stable_commit[:9]}, a commit no profile maps to a release" if stable_commit else \
        "has no VLLM_STABLE_COMMIT"
    if tag:
        return tag.group(1), f"{ref} {pinned}; vLLM {tag.group(1)} from PyPI, the release its tag is named after"
    raise UpstreamError(f"cannot tell which vLLM release {ref} runs on: it {pinned}",
                        hint="name it: --vllm VERSION (a vLLM version on PyPI)")


def known_vllm_commits(fixes_dir: Path) -> dict[str, str]:
    out = {}
    for name in fixes.profile_names(fixes_dir):
        pin = fixes.load_profile(name, fixes_dir).packages["vllm"]
        out[pin.commit] = pin.version
    return out


def new_sources(ref: str, profile: fixes.ProfileSpec, source: str, vllm: str | None, fixes_dir: Path,
                dry_run: bool = False) -> tuple[str, dict[str, Path], str, str]:
    """(commit, package roots, vLLM version, how it was chosen) of REF, from the cache or fetched into it."""
    pins = fixes.pins_of(profile)
    if ref in (pins.vllm_gaudi_version, pins.vllm_gaudi_commit):
        tree = upstream.fetch_vllm_gaudi(pins, source, dry_run=dry_run)
    else:
        tree = upstream.fetch_ref(ref, source, dry_run=dry_run)
    if dry_run:
        version, note = vllm or "<its vLLM>", "dry run: read from the fetched tree"
        print(f"pip download vllm=={version} (unless cached), then apply the pack in order to copies of both")
        return ref, {}, version, note
    stable = tree / "VLLM_STABLE_COMMIT"
    version, note = vllm_version(ref, stable.read_text().strip() if stable.is_file() else None,
                                 known_vllm_commits(fixes_dir), vllm)
    vllm_tree = upstream.fetch_vllm(upstream.Pins(ref, tree.name, version))
    return tree.name, {"vllm_gaudi": tree / "vllm_gaudi", "vllm": vllm_tree / "vllm"}, version, note


# -------------------------------------------------------------------------------------- the report


def compare(profile_name: str, new_roots: dict[str, Path], fixes_dir: Path | None = None, ref: str = ""
            ) -> list[Verdict]:
    """Each fix of the profile's order against the new sources (of REF, named in the rows), in order."""
    fixes_dir = fixes_dir or default_fixes_dir()
    profile = fixes.load_profile(profile_name, fixes_dir)
    present = fixes.resolve(profile, profile.order, fixes_dir)
    targets = targets_of(present)
    out = []
    with tempfile.TemporaryDirectory(prefix="cookbook-drift.") as tmp:
        old, new = Path(tmp) / "old", Path(tmp) / "new"
        stage(package_roots(profile), targets, old)
        stage(new_roots, {(p, f) for p, f in targets if (new_roots[p] / f).is_file()}, new)
        for name in profile.order:
            spec = present.get(name)
            if spec is None:
                out.append(Verdict(name, NOT_WRITTEN))
                continue
            verdict = _judge(name, spec, new_roots, old, new, fixes_dir)
            out.append(replace(verdict, upstream=recorded_fix(spec.upstream, ref)))
            for patch in spec.patches:  # the pinned tree as the next fix was made against
                apply_patch(fixes_dir, name, patch.file, patch.package, old)
    return out


def _judge(name: str, spec: fixes.FixSpec, new_roots: dict[str, Path], old: Path, new: Path,
           fixes_dir: Path) -> Verdict:
    for t in spec.targets:
        for rel in t.files:
            if not (new_roots[t.package] / rel).is_file():
                return Verdict(name, GONE, _gone_file(t.package, rel, new_roots[t.package]))
    outcome = patch_verdict(name, spec, new, fixes_dir)
    if outcome.status == APPLIES:
        changed = [f"{t.package}/{rel}" for t in spec.targets for rel, sha in t.files.items()
                   if fixes.fixplan.sha256_file(new_roots[t.package] / rel) != sha]
        return Verdict(name, APPLIES, f"{', '.join(changed)} changed upstream: the patch applies; the new "
                                      "profile needs the new pristine sha256" if changed else "")
    if outcome.status == REVERSE_APPLIES:
        return Verdict(name, UPSTREAM, outcome.detail)
    if outcome.status != CONFLICTS:
        return Verdict(name, outcome.status, outcome.detail)
    if carries(name, spec, new_roots, fixes_dir):
        return Verdict(name, UPSTREAM, "its patches do not apply, but every line they add is in the release's "
                                       "files, in order: the release carries the change amid other edits")
    package = outcome.patch.package
    failed = failing_hunk((fixes_dir / name / outcome.patch.file).read_text(), outcome.said)
    if failed is None:  # the tool's message named no hunk: say what it said
        return Verdict(name, CONFLICTS, outcome.detail)
    rel, hunk = failed
    where = f"{package}/{rel} hunk {hunk.header}"
    qualname = enclosing_def((old / package / rel).read_text(), hunk.first_change)
    if qualname is None:
        return Verdict(name, CONFLICTS, f"{where} at module level no longer matches", hunk.text, "module level")
    line = find_def((new / package / rel).read_text(), qualname)
    if line is not None:
        return Verdict(name, CONFLICTS, f"{where} in {qualname} (now at line {line}) no longer matches",
                       hunk.text, qualname)
    moved = find_elsewhere(new_roots[package], qualname.rsplit(".", 1)[-1], skip=rel)
    gone = f"{where}: {qualname} is not in {rel} any more" + (
        f"; a def of that name is at {package}/{moved[0]}:{moved[1]}" if moved else ", nor anywhere in the package")
    return Verdict(name, GONE, gone, hunk.text, qualname)


def added_lines(diff: str) -> dict[str, list[str]]:
    """{file: the lines a -p1 diff adds to it, stripped, blank ones left out}, in the diff's order."""
    out: dict[str, list[str]] = {}
    for path, hunk in hunks(diff):
        added = [line[1:].strip() for line in hunk.text.splitlines()[1:] if line.startswith("+")]
        out.setdefault(path, []).extend(line for line in added if line)
    return out


def holds_in_order(text: str, lines: list[str]) -> bool:
    """Whether the text's lines, stripped, hold these lines in this order (others between them allowed)."""
    have = iter(line.strip() for line in text.splitlines())
    return all(any(line == got for got in have) for line in lines)


def carries(name: str, spec: fixes.FixSpec, roots: dict[str, Path], fixes_dir: Path) -> bool:
    """Whether the release's files hold every line the fix's patches add, file by file in the patches'
    order: the fix's change is there though its patches no longer apply. False for a fix that adds
    nothing (a removal is not judged this way) and where a file the patches add to is missing."""
    wanted: dict[tuple[str, str], list[str]] = {}
    for ref in spec.patches:
        for rel, lines in added_lines((fixes_dir / name / ref.file).read_text()).items():
            wanted.setdefault((ref.package, rel), []).extend(lines)
    if not any(wanted.values()):
        return False
    for (package, rel), lines in wanted.items():
        path = roots[package] / rel
        if not path.is_file() or not holds_in_order(path.read_text(errors="replace"), lines):
            return False
    return True


def recorded_fix(upstream: fixes.Upstream, ref: str) -> str:
    """What fix.yaml records of the releases that fix the bug (each merged fix with `fixed_in`), and,
    where REF is a release tag, whether REF is that release or later."""
    key = versions.version_key
    said = []
    for found in upstream.found:
        if not found.fixed_in:
            continue
        text = f"fix.yaml: {found.ref} fixes it in {found.fixed_in}"
        if fixes.RELEASE_TAG.fullmatch(ref):
            text += f" ({ref} is {'that release or later' if key(ref) >= key(found.fixed_in) else 'earlier'})"
        said.append(text)
    return "; ".join(said)


def _gone_file(package: str, rel: str, root: Path) -> str:
    others = sorted(p.relative_to(root).as_posix() for p in root.rglob(Path(rel).name))
    return f"{package}/{rel} is gone from the new release" + (
        f"; a file of that name is at {', '.join(others)}" if others else "")


@dataclass(frozen=True)
class Hunk:
    header: str
    old_start: int
    text: str

    @property
    def first_change(self) -> int:
        """The old-file line of the hunk's first removed line (or where its first addition goes)."""
        body = self.text.splitlines()[1:]
        lead = next((i for i, line in enumerate(body) if line[:1] in "-+"), 0)
        return self.old_start + lead


def hunks(diff: str) -> list[tuple[str, Hunk]]:
    """(file, hunk) of a -p1 unified diff, the file relative to the package root."""
    out, path, current, previous = [], None, None, ""
    for line in diff.splitlines(keepends=True):
        header = line.startswith("+++ ") and previous.startswith("--- ")  # not an added "++ " line
        previous = line
        if header:
            path = line[4:].split("\t")[0].strip().split("/", 1)[-1]
            current = None
        elif line.startswith("@@"):
            m = re.match(r"@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@", line)
            current = [line]
            out.append((path, current, m))
        elif current is not None and line[:1] in (" ", "-", "+", "\\"):
            current.append(line)
        else:
            current = None
    # The header without git's guess at a function name: the report names the def from the ast.
    return [(p, Hunk(m.group(0), int(m.group(1)), "".join(lines))) for p, lines, m in out]


def failing_hunk(diff: str, said: str) -> tuple[str, Hunk] | None:
    """The hunk git apply (`patch failed: FILE:LINE`, LINE the hunk's old start) or patch
    (`Hunk #N FAILED`) reports, from the diff it was given."""
    all_hunks = hunks(diff)
    m = re.search(r"patch failed: (\S+):(\d+)", said)
    if m:
        return next(((p, h) for p, h in all_hunks if p == m.group(1) and h.old_start == int(m.group(2))), None)
    m = re.search(r"(?:patching|checking) file (\S+)\s*\nHunk #(\d+) FAILED", said)
    if m:
        of_file = [(p, h) for p, h in all_hunks if p == m.group(1)]
        n = int(m.group(2)) - 1
        return of_file[n] if n < len(of_file) else None
    return None


def _defs(tree: ast.AST, prefix: str = ""):
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = prefix + node.name
            yield name, node
            yield from _defs(node, name + ".")


def _parse(source: str) -> ast.AST | None:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):
        return None


def enclosing_def(source: str, line: int) -> str | None:
    """The innermost function (or class) around a line, as Class.method; None at module level."""
    tree = _parse(source)
    inside = [(name, node) for name, node in _defs(tree)] if tree else []
    around = [(name, node) for name, node in inside if node.lineno <= line <= node.end_lineno]
    return max(around, key=lambda item: item[1].lineno)[0] if around else None


def find_def(source: str, qualname: str) -> int | None:
    tree = _parse(source)
    return next((node.lineno for name, node in _defs(tree) if name == qualname), None) if tree else None


def find_elsewhere(root: Path, leaf: str, skip: str) -> tuple[str, int] | None:
    """A def named `leaf` in another file of the package (text search first, ast to be sure)."""
    pattern = re.compile(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(leaf)}\b", re.M)
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        text = path.read_text(errors="replace")
        if rel == skip or not pattern.search(text):
            continue
        tree = _parse(text)
        for name, node in _defs(tree) if tree else []:
            if name.rsplit(".", 1)[-1] == leaf:
                return rel, node.lineno
    return None


def markdown(report: Report) -> str:
    lines = [f"# Fix pack drift: profile {report.profile} -> vllm-gaudi {report.ref} ({report.commit[:12]})", "",
             f"vLLM: {report.vllm_note}.", "",
             "| # | fix | verdict | detail | fixed in (fix.yaml) |", "|---|-----|---------|--------|-----|"]
    for i, v in enumerate(report.verdicts, 1):
        detail, recorded = ((text or "-").replace("|", "\\|").replace("\n", " ") for text in (v.detail, v.upstream))
        lines.append(f"| {i} | {v.fix} | {v.verdict} | {detail} | {recorded} |")
    lines += ["", "The pack ports as is." if report.ports else "The pack does not port as is: see the rows above."]
    retired = [v.fix for v in report.verdicts if v.verdict == UPSTREAM]
    if retired:
        lines += ["", f"Fixed upstream, so to retire on {report.ref} (out of that release's profile): "
                      f"{', '.join(retired)}."]
    failing = [v for v in report.verdicts if v.hunk]
    for v in failing:
        lines += ["", f"## {v.fix}: the failing hunk ({v.function})", "", "```diff", v.hunk.rstrip("\n"), "```"]
    return "\n".join(lines) + "\n"


def to_json(report: Report) -> str:
    doc = {k: v for k, v in asdict(report).items() if k != "verdicts"}
    doc["ports_as_is"] = report.ports
    doc["verdicts"] = [asdict(v) for v in report.verdicts]
    return json.dumps(doc, indent=2) + "\n"


def ref_problem(ref: str) -> str | None:
    """Why REF is not a vllm-gaudi tag or commit to fetch (None: it may be). A word starting with '-' is a
    flag that invoke handed to the positional argument (`fixes.drift --help`), never a ref to ask GitHub for."""
    if not ref or ref.startswith("-"):
        return "a ref does not start with '-' (a flag was taken for the ref)" if ref else "no ref given"
    if any(not ch.isprintable() or ch.isspace() for ch in ref):
        return "a ref holds no spaces or control characters"
    return None


def default_out(ref: str) -> Path:
    return ROOT / "build" / "drift" / re.sub(r"[^A-Za-z0-9._-]", "_", ref)


def run(ref: str, profile_name: str | None = None, source: str | None = None, vllm: str | None = None,
        out: Path | None = None, fixes_dir: Path | None = None, dry_run: bool = False) -> Report | None:
    """Fill the cache for REF if needed, compare, write drift.md and drift.json into out; print the table."""
    said = ref_problem(ref)
    if said:
        raise UsageError(f"fixes.drift {printable(repr(ref))}: {said}",
                         hint="a ref is a tag or a commit, e.g. v0.27.0; the task's help: invoke --help fixes.drift")
    profile_name = release.profile_or_default(profile_name)
    fixes_dir = fixes_dir or default_fixes_dir()
    profile = fixes.load_profile(profile_name, fixes_dir)
    out = out or default_out(ref)
    commit, roots, version, note = new_sources(ref, profile, source or upstream.GITHUB, vllm, fixes_dir, dry_run)
    if dry_run:
        print(f"would write {out / 'drift.md'} and {out / 'drift.json'}; the pack is not changed")
        return None
    say(f"applying profile {profile_name}'s pack in order to vllm-gaudi {ref} and vLLM {version}")
    report = Report(ref, commit, version, note, profile_name, compare(profile_name, roots, fixes_dir, ref))
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("drift.md", markdown(report)), ("drift.json", to_json(report))):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(out / name)
    print(markdown(report), end="")
    say(f"report in {out}")
    return report


def task(ref: str, profile_name: str, source: str | None, vllm: str | None, out: Path | None,
         dry_run: bool = False) -> None:
    """`invoke fixes.drift`: `run`, then the verdict (PackFailure, exit 1) when the pack does not port."""
    report = run(ref, profile_name, source, vllm, out, dry_run=dry_run)
    if report is not None and not report.ports:
        raise PackFailure(f"the pack does not port to {ref} as is (the rows above)")
