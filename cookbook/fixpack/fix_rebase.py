"""`invoke fixes.rebase --base IMAGE`: a candidate pack for a base whose target files differ from the
pristine ones but still take the patches (at an offset).

The base's target files are read as `fixes.verify --base` reads them (fix_base: `docker create`, never
run). The pack is applied in order to a scratch copy of them with the image's applier's own patch tool; each
patch of a fix that differs is written again as the diff between the files before and after it, so it
applies to the base's files with no offset, and the fix's pristine sha256 become the base's. The
candidate is a whole fixes folder (profiles/, every fix, pack.json) under build/fixes-rebase/IMAGE/,
which the loader reads as it reads fixes/; the fix lab runs on it with the base's files as its
pristine tree, and since its tests import those files (the base's code), in a container: never on the
host, never with the caller's environment (fix_lab.run_contained). The accepted pack (fixes/) is never
written: the reviewer reads review/ and copies the rebased fix folders over by hand.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..host import outdir
from ..host.errors import FixError, PackFailure
from ..host.paths import ROOT
from ..host.paths import fixes_dir as default_fixes_dir
from ..host.progress import say
from ..recipe import fixes, release
from . import fix_base, fix_lab
from .fix_base import DIFFERS, MATCHES, NO_APPLY
from .fix_new import unified_diff
from .fix_sources import apply_patch

MARKER = ".cookbook-fixes-rebase"
PACK = "fixes"  # the candidate fixes folder inside the output
REVIEW = "review"


@dataclass(frozen=True)
class Outcome:
    fix: str
    verdict: str  # fix_base's: matches, differs but applies, does not apply, not written
    why: str = ""
    differing: tuple[str, ...] = ()
    patches: tuple[str, ...] = ()  # the re-anchored patch files (rebased fixes only)


@dataclass
class Result:
    image: str
    site: str
    out: Path
    outcomes: list[Outcome]
    review: list[str] = field(default_factory=list)  # paths under `out` a reviewer must read, in order
    lab: fix_lab.Report | None = None
    lab_note: str = ""

    @property
    def rebased(self) -> list[str]:
        return [o.fix for o in self.outcomes if o.verdict == DIFFERS]

    @property
    def failed(self) -> bool:
        return any(o.verdict == NO_APPLY for o in self.outcomes) or (self.lab is not None and not self.lab.ok)


def reanchor(order: list[str], present: dict[str, fixes.FixSpec], verdicts: dict[str, str],
             base_files: dict[tuple[str, str], bytes | None], fixes_dir: Path) -> dict[str, dict[str, str]]:
    """{fix: {patch file: its new text}} for the fixes that differ but apply: the pack applied in order
    to the base's files (the fixes that apply, as fix_base judged them), and each such patch regenerated
    as the diff of its files before and after it, so it applies to what precedes it with no offset."""
    out: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="cookbook-rebase.") as tmp:
        staging = Path(tmp)
        fix_base.stage_files(base_files, staging)
        for name in order:
            if verdicts.get(name) not in (MATCHES, DIFFERS):
                continue
            for ref in present[name].patches:
                paths = fixes.patch_paths((fixes_dir / name / ref.file).read_text(encoding="utf-8"))
                before = {p: (staging / ref.package / p).read_bytes() for p in paths}
                ok, said = apply_patch(fixes_dir, name, ref.file, ref.package, staging)
                if not ok:  # fix_base found it applies to this very tree
                    raise FixError(f"fix {name}: {ref.file} no longer applies on the second pass: {said}")
                if verdicts[name] == DIFFERS:
                    out.setdefault(name, {})[ref.file] = "".join(
                        unified_diff(p, before[p], (staging / ref.package / p).read_bytes())
                        for p in paths if (staging / ref.package / p).read_bytes() != before[p])
    return out


def rehash(text: str, changes: dict[str, tuple[str, str]]) -> str:
    """fix.yaml's text with each target's pristine sha256 replaced ({path: (old, new)}), comments and
    layout kept, so the reviewer's diff of fix.yaml shows the hashes alone."""
    for path, (old, new) in changes.items():
        text, n = re.subn(rf"^(\s*['\"]?{re.escape(path)}['\"]?\s*:\s*['\"]?){old}\b", rf"\g<1>{new}", text,
                          flags=re.M)
        if n != 1:
            raise FixError(f"fix.yaml names {path} with sha256 {old[:12]} {n} times, not once")
    return text


def rebase(image: str, profile_name: str | None = None, site: str | None = None, out: Path | None = None,
           fixes_dir: Path | None = None, lab: bool = True, lab_fixes: list[str] | None = None,
           keep: Path | None = None, dry_run: bool = False) -> Result | None:
    fix_base.check_base_ref(image)
    profile_name = release.profile_or_default(profile_name)
    fixes_dir = fixes_dir or default_fixes_dir()
    profile = fixes.load_profile(profile_name, fixes_dir)
    present = fixes.resolve(profile, profile.order, fixes_dir)
    wanted = fix_base.targets(present)
    out = out or ROOT / "build" / "fixes-rebase" / fix_base.slug(image)
    outdir.check(out.absolute(), MARKER, "the image's folder under build/fixes-rebase", verb="write")
    fix_lab.check_named(lab_fixes, profile_name, fixes_dir)
    if dry_run:
        print(f"read {len(wanted)} target files from {image} as `invoke fixes.verify --base {image} --dry-run` shows")
        print(f"write the candidate pack (a copy of {fixes_dir} with the fixes that differ but apply re-anchored "
              f"on the base's files and their pristine sha256 the base's) into {out / PACK}")
        print(f"write what a reviewer must read into {out / REVIEW}; {fixes_dir} is not written")
        print("then the fix lab on the candidate, the base's files as its pristine tree: "
              + (("only " + ", ".join(lab_fixes)) if lab_fixes else "every written fix and the pack's modules")
              if lab else "no fix lab (--no-lab)")
        return None
    found_site, base_files = fix_base.read_base(image, site, wanted)
    judged = fix_base.judge(profile, present, wanted, base_files, fixes_dir)
    outcomes = [Outcome(v.fix, v.verdict, v.why, v.differing) for v in judged]
    verdicts = {o.fix: o.verdict for o in outcomes}
    new_patches = reanchor(profile.order, present, verdicts, base_files, fixes_dir)
    outcomes = [Outcome(o.fix, o.verdict, o.why, o.differing, tuple(new_patches.get(o.fix, {})))
                for o in outcomes]
    pristine, missing_cache = fix_base.pristine_diffs(profile, wanted, base_files)
    review: list[str] = []
    with outdir.staged(out, MARKER, f"written by invoke fixes.rebase --base {image}\n") as tmp:
        pack = tmp / PACK
        (pack / "profiles").mkdir(parents=True)
        shutil.copyfile(fixes_dir / "profiles" / f"{profile_name}.yaml", pack / "profiles" / f"{profile_name}.yaml")
        for name in present:
            shutil.copytree(fixes_dir / name, pack / name)
        for o in outcomes:
            if o.verdict != DIFFERS:
                continue
            spec = present[o.fix]
            changes = {p: (sha, fix_base.sha_of(base_files[(t.package, p)]))
                       for t in spec.targets for p, sha in t.files.items()
                       if fix_base.sha_of(base_files[(t.package, p)]) != sha}
            yaml_path = pack / o.fix / "fix.yaml"
            old_yaml = yaml_path.read_text()
            yaml_path.write_text(rehash(old_yaml, changes))
            written = [("fix.yaml", old_yaml.encode(), yaml_path.read_bytes())]
            for file, text in new_patches[o.fix].items():
                (pack / o.fix / file).write_text(text)
                written.append((file, (fixes_dir / o.fix / file).read_bytes(), text.encode()))
            for name in o.differing:
                key = tuple(name.split("/", 1))
                if key in pristine:
                    review.append(_write(tmp, f"{REVIEW}/{o.fix}/base/{name}.diff", pristine[key]))
            for file, old, new in written:
                if old == new:  # the base moved nothing near this patch's hunks: only the hash changed
                    continue
                review.append(_write(tmp, f"{REVIEW}/{o.fix}/{file}.diff", unified_diff(f"{o.fix}/{file}", old, new)))
        fixes.write_index(fixes_dir=pack)
        report = {"image": image, "site_packages": found_site, "profile": profile_name, "accepted": str(fixes_dir),
                  "outcomes": [o.__dict__ | {"differing": list(o.differing), "patches": list(o.patches)}
                               for o in outcomes],
                  "review": review, "diffs_missing": missing_cache}
        (tmp / "rebase.json").write_text(json.dumps(report, indent=2) + "\n")
    result = Result(image, found_site, out, outcomes, review)
    if not lab:
        result.lab_note = "not run (--no-lab)"
    elif any(o.verdict == NO_APPLY for o in outcomes):
        result.lab_note = "not run: a fix does not apply to the base"
    else:
        say(f"fix lab on the candidate {out / PACK}, the base's target files as the pristine tree")
        result.lab = fix_lab.lab(lab_fixes or None, keep, profile_name=profile_name, fixes_dir=out / PACK,
                                 base_files={k: v for k, v in base_files.items() if v is not None})
        (out / "lab.txt").write_text("\n".join(fix_lab.describe(result.lab)) + "\n")
    return result


def _write(root: Path, rel: str, text: str) -> str:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text)
    return rel


def describe(result: Result, accepted: Path | None = None) -> list[str]:
    """Per fix its verdict; for the rebased ones what to read; the lab; how to accept the candidate."""
    accepted = accepted or default_fixes_dir()
    rel = fix_base.shown(result.out)
    lines = [f"{result.image}: site-packages {result.site}; candidate pack in {rel / PACK}"]
    for o in result.outcomes:
        state = {DIFFERS: "rebased", NO_APPLY: "does not apply: not rebased", MATCHES: "matches: kept as accepted"}
        lines.append(f"{o.fix:36} {state.get(o.verdict, o.verdict)}")
        if o.verdict == NO_APPLY and o.why:
            lines += ["    " + line for line in o.why.splitlines()[:12]]
        if o.verdict == DIFFERS:
            lines.append(f"    differs: {', '.join(o.differing)}")
            lines += [f"    read {rel / r}" for r in result.review if r.startswith(f"{REVIEW}/{o.fix}/")]
            lines += [f"    {file}: the same hunks, at the same lines (only the hashes changed)"
                      for file in o.patches if f"{REVIEW}/{o.fix}/{file}.diff" not in result.review]
    if result.lab is not None:
        lines += ["fix lab on the candidate (the base's files as the pristine tree):",
                  *("    " + line for line in fix_lab.describe(result.lab))]
    else:
        lines.append(f"fix lab: {result.lab_note}")
    if result.rebased and not result.failed:
        shown = fix_base.shown(accepted)
        lines.append(f"{shown} is unchanged. To accept the candidate, after reading the diffs above:")
        lines += [f"    cp {rel / PACK / name}/* {shown / name}/" for name in result.rebased]
        lines.append("    invoke fixes.index   # then commit, with the base named in the message")
    elif not result.rebased and not result.failed:
        lines.append(f"nothing to rebase: the pack applies to {result.image} as recorded")
    return lines


def task(image: str, profile_name: str, site: str | None = None, lab: bool = True,
         lab_fixes: list[str] | None = None, keep: Path | None = None, dry_run: bool = False) -> None:
    """`invoke fixes.rebase`: the candidate and what to read, then the verdict (PackFailure, exit 1)."""
    result = rebase(image, profile_name, site, lab=lab, lab_fixes=lab_fixes, keep=keep, dry_run=dry_run)
    if result is None:
        return
    for line in describe(result):
        print(line)
    if result.failed:
        raise PackFailure(failure(result))


def failure(result: Result) -> str:
    bad = [o.fix for o in result.outcomes if o.verdict == NO_APPLY]
    if bad:
        return f"{len(bad)} fix(es) do not apply to {result.image} and were not rebased: {', '.join(bad)}"
    return "the fix lab found problems with the candidate (above); it is not fit to accept"
