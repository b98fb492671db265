#!/usr/bin/env python3
"""Apply the cookbook's fix pack to the vllm / vllm-gaudi sources installed in this image.

It runs inside the image at build time with the image's own Python, so it uses the standard
library only. It reads pack.json (generated on the host from fixes/*/fix.yaml and
fixes/profiles/*.yaml; by default the one beside this file) and works all or nothing. Which fixes a
selection gets, their requirements and the HPU mode are decided by fixplan.py beside it, the same
file the cookbook imports on the host.

Usage:
  apply_all.py --profile v0.26.0 [OPT_IN ...] [--site DIR] [--record PATH] [--pack PATH] [--dry-run] [--quiet]
  apply_all.py --check  [--record PATH] [--site DIR] [--pack PATH]
  apply_all.py --revert [--record PATH] [--site DIR] [--pack PATH] [--dry-run]
  apply_all.py --list   [--profile NAME] [--pack PATH]

--profile applies the profile's fixes that are in this pack and not opt-in, plus the opt-ins
named. It refuses (changing nothing) unless every requirement, env guard (e.g.
VLLM_COMPACT_GDN=1), dependency range (e.g. xgrammar>=0.2.4) and mode holds (PT_HPU_LAZY_MODE=1
means lazy, otherwise compile), the installed versions and commits are the profile's, and every
target file is the pristine release file. It then applies every patch to copies in a staging
directory (git apply, or patch where git is absent), replaces the changed files and writes the
record (default /opt/cookbook/fix-record.json). Running it again with the same selection does nothing.

--check verifies the image against its record: every patched file unchanged, the required env
set, and the HPU mode the fixes were applied for. It is fast enough for container start-up.
--revert reverse-applies the recorded fixes, restoring the pristine files, and removes the record.
--list shows a profile's fixes: profile or opt-in, in this pack or not.
--site DIR looks for the packages in DIR instead of on sys.path (tests, unusual layouts); a fix's
dependencies are looked for in DIR, then on the path of the Python running this script.

Exit status: 0 success, 1 refused (nothing changed), 2 usage error.
"""

# Only what --check needs is imported here; apply and revert import the rest where they need it,
# so that the check run at every container start stays well under 100 ms.
import argparse
import json
import os
import sys

try:
    import fixplan
except ModuleNotFoundError:  # loaded by path rather than run as a script: fixplan.py is beside this file
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    import fixplan

PREFIX = "apply_all: "
DEFAULT_RECORD = fixplan.RECORD
PACK_FORMAT = 1
RECORD_FORMAT = 1
MODES = fixplan.MODES
sha256_bytes = fixplan.sha256_bytes
current_mode = fixplan.hpu_mode


class PackError(Exception):
    """A refusal: main() prints the message and exits 1. Nothing was changed (or it was rolled back)."""


# ------------------------------------------------------------------------------------------ output


def emit(stream, message):
    for line in message.splitlines() or [""]:
        stream.write(PREFIX + line + "\n")
    stream.flush()


class Log:
    def __init__(self, quiet=False):
        self.quiet = quiet

    def info(self, message):
        if not self.quiet:
            emit(sys.stdout, message)

    def result(self, message):
        emit(sys.stdout, message)

    def error(self, message):
        emit(sys.stderr, "error: " + message)


def bullets(lines):
    return "\n".join("  - " + line for line in lines)


def describe_var(name, environ):
    value = environ.get(name)
    return f"{name} unset" if value is None else f"{name}={value}"


# ------------------------------------------------------------------------------------------- files


def read_bytes(path):
    """The file's bytes, or None when it does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except (FileNotFoundError, NotADirectoryError):
        return None


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


# -------------------------------------------------------------------------------------------- pack


def default_pack_path():
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "pack.json")


def load_pack(path):
    """The parsed pack and the sha256 of its bytes; refuses a pack this script cannot rely on."""
    raw = read_bytes(path)
    if raw is None:
        raise PackError(f"no pack at {path}: generate it with the cookbook, or pass --pack PATH")
    try:
        pack = json.loads(raw)
    except ValueError as exc:
        raise PackError(f"{path} is not valid JSON ({exc}): regenerate it with the cookbook") from None
    problem = pack_problem(pack)
    if problem:
        raise PackError(f"{path}: {problem}: regenerate it with the cookbook")
    return pack, sha256_bytes(raw)


def is_str_list(value):
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def is_safe_relpath(path):
    parts = path.split("/")
    return bool(path) and not path.startswith("/") and ".." not in parts and "\\" not in path


def entries_problem(entries, fields):
    if not isinstance(entries, list):
        return "is not a list"
    for entry in entries:
        if not isinstance(entry, dict) or not all(isinstance(entry.get(f), str) for f in fields):
            return f"needs objects with {', '.join(fields)}"
        where = entry.get("path", entry.get("file"))
        if not is_safe_relpath(where):
            return f"has an unsafe path {where!r}"
    return None


def pack_problem(pack):
    """The first structural problem of a pack, or None. Checks only what this script relies on."""
    if not isinstance(pack, dict):
        return "not a JSON object"
    if pack.get("format") != PACK_FORMAT:
        return f"pack format {pack.get('format')!r}, this apply_all.py reads format {PACK_FORMAT}"
    if not isinstance(pack.get("profiles"), dict) or not isinstance(pack.get("fixes"), dict):
        return "'profiles' and 'fixes' must be objects"
    for name, profile in pack["profiles"].items():
        if not isinstance(profile, dict) or not isinstance(profile.get("packages"), dict):
            return f"profile {name} has no 'packages' object"
        if not is_str_list(profile.get("order")) or not is_str_list(profile.get("opt_in", [])):
            return f"profile {name}: 'order' and 'opt_in' must be lists of names"
        for package, want in profile["packages"].items():
            if not isinstance(want, dict) or not all(
                isinstance(want.get(k), str) for k in ("dist", "version", "commit")
            ):
                return f"profile {name}, package {package}: needs dist, version and commit strings"
    for name, fix in pack["fixes"].items():
        if not isinstance(fix, dict):
            return f"fix {name} is not an object"
        for key, fields in (
            ("targets", ("package", "path", "sha256")),
            ("patches", ("package", "file", "sha256")),
        ):
            problem = entries_problem(fix.get(key), fields)
            if problem:
                return f"fix {name}: '{key}' {problem}"
        if not is_str_list(fix.get("requires", [])) or not is_str_list(fix.get("modes", list(MODES))):
            return f"fix {name}: 'requires' and 'modes' must be lists of names"
        env = fix.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            return f"fix {name}: 'env' must map names to strings"
        dists = fix.get("dists", {})
        if not isinstance(dists, dict) or not all(isinstance(v, str) for v in dists.values()):
            return f"fix {name}: 'dists' must map distribution names to version ranges"
        for dist, spec in dists.items():
            try:
                parse_range(spec)
            except ValueError as exc:
                return f"fix {name}: 'dists' {dist}: {exc}"
    return None


def get_profile(pack, name):
    if name not in pack["profiles"]:
        known = ", ".join(sorted(pack["profiles"])) or "none"
        raise PackError(f"unknown profile {name}; this pack has: {known}")
    return pack["profiles"][name]


def opt_in_names(profile, fixes):
    # Either side saying opt-in is enough: never apply by default what someone marked optional.
    return set(profile.get("opt_in", [])) | {name for name, fix in fixes.items() if fix.get("opt_in")}


# ------------------------------------------------------------------------------- selection (1-4)


def select_fixes(profile_name, profile, fixes, named):
    """The profile's fixes in this pack that are not opt-in, plus the named opt-ins, in order."""
    order = profile["order"]
    unknown = [n for n in named if n not in order]
    if unknown:
        raise PackError(f"unknown fix {', '.join(unknown)} for profile {profile_name}; known: {', '.join(order)}")
    absent = [n for n in named if n not in fixes]
    if absent:
        raise PackError(
            f"{', '.join(absent)}: in profile {profile_name}'s order but not in this pack "
            "(its fix is not written yet, or the recipe left it out): drop it from the command line"
        )
    selected = [n for n in fixplan.select(order, opt_in_names(profile, fixes), named) if n in fixes]
    return selected, [n for n in order if n not in fixes]


def split_by_mode(selected, named, fixes, environ):
    """(kept, skipped): a profile fix made for another mode is skipped, a named one refused."""
    mode = current_mode(environ)
    lazy = describe_var("PT_HPU_LAZY_MODE", environ)
    kept, skipped, refused = [], {}, []
    for name in selected:
        modes = fixes[name].get("modes", list(MODES))
        if mode in modes:
            kept.append(name)
        elif name in named:
            refused.append(
                f"{name} runs only in {'/'.join(modes)} mode, but this build is {mode} mode ({lazy}): "
                f"leave {name} out, or build in {'/'.join(modes)} mode"
            )
        else:
            skipped[name] = f"runs only in {'/'.join(modes)} mode; this build is {mode} mode ({lazy})"
    if refused:
        raise PackError("\n".join(refused))
    return kept, skipped


def requires_of(fixes):
    return {name: fix.get("requires", []) for name, fix in fixes.items()}


def check_requirements(profile_name, order, kept, skipped, fixes):
    """Every requirement of a kept fix must be kept too, and come earlier in the order."""
    problems = fixplan.requirement_problems(profile_name, order, kept, skipped, requires_of(fixes))
    if problems:
        raise PackError("\n".join(message for _, message in problems))


def check_env(kept, fixes, environ):
    """The union of the kept fixes' required env; refuses when os.environ does not hold it."""
    required, problems = {}, []
    for name in kept:
        for var, want in sorted(fixes[name].get("env", {}).items()):
            required[var] = want
            if environ.get(var) != want:
                problems.append(
                    f"{name} needs {var}={want}, found {describe_var(var, environ)}: "
                    f"set {var}={want} for the build (and every run), or leave {name} out"
                )
    if problems:
        raise PackError("\n".join(problems))
    return required


def plan_selection(pack, profile_name, profile, named, environ):
    """Steps 1-4: which fixes to apply, which to skip and why, and the env they need."""
    fixes = pack["fixes"]
    selected, not_in_pack = select_fixes(profile_name, profile, fixes, named)
    cycle = fixplan.find_cycle(selected, requires_of(fixes))
    if cycle:
        raise PackError(fixplan.cycle_message(cycle))
    kept, skipped = split_by_mode(selected, set(named), fixes, environ)
    check_requirements(profile_name, profile["order"], kept, skipped, fixes)
    env = check_env(kept, fixes, environ)
    return {
        "fixes": kept,
        "skipped": skipped,
        "not_in_pack": not_in_pack,
        "env": env,
        "mode": current_mode(environ),
    }


# ------------------------------------------------------------------------- dependency ranges


def version_key(version):
    """A PEP 440 version's release as a comparable key, or None: trailing zeros dropped, then 0 for
    a pre- or dev release and 1 otherwise, so 0.2.4rc1 < 0.2.4 == 0.2.4.0 == 0.2.4.post1 == 0.2.4+cpu.
    Post and local parts are not ordered: a range names releases."""
    import re

    match = re.match(r"^v?(\d+(?:\.\d+)*)(.*)$", version.strip())
    if not match:
        return None
    release = [int(part) for part in match.group(1).split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    pre = re.match(r"^[-_.]?(a|b|c|rc|alpha|beta|pre|preview|dev)", match.group(2), re.IGNORECASE)
    return tuple(release), 0 if pre else 1


RANGE_OPS = (">=", "<=", "==", "!=", ">", "<")


def parse_range(spec):
    """[(operator, key)] of a range like ">=0.2.4,<1.0"; ValueError when it is not one."""
    clauses = []
    for part in spec.split(","):
        part = part.strip()
        op = next((op for op in RANGE_OPS if part.startswith(op)), None)
        key = version_key(part[len(op):]) if op else None
        if key is None:
            raise ValueError(f"{spec!r} is not a version range like '>=0.2.4' or '>=0.2.4,<1.0'")
        clauses.append((op, key))
    return clauses


def in_range(version, spec):
    """Whether an installed version string falls in the range spec."""
    import operator

    ops = {">=": operator.ge, "<=": operator.le, "==": operator.eq,
           "!=": operator.ne, ">": operator.gt, "<": operator.lt}
    key = version_key(version)
    return key is not None and all(ops[op](key, want) for op, want in parse_range(spec))


def dependency_version(dist, site):
    """The installed version of a fix's dependency: in --site DIR first, then on the path of the
    Python running this script (the image's, which serves with it); None when not installed."""
    import importlib.metadata

    if site:
        for found in importlib.metadata.distributions(name=dist, path=[site]):
            return found.version
    try:
        return importlib.metadata.distribution(dist).version
    except importlib.metadata.PackageNotFoundError:
        return None


def check_dists(kept, fixes, site):
    """{dist: installed version} for the kept fixes' dependency ranges; refuses when one is not installed
    or out of its range."""
    found, problems = {}, []
    where = f" in {site} or on this Python's path" if site else ""
    for name in kept:
        for dist, spec in sorted(fixes[name].get("dists", {}).items()):
            version = dependency_version(dist, site)
            if version is None:
                problems.append(
                    f"{name} needs {dist}{spec}, which is not installed{where}: install it, or leave {name} out"
                )
            elif not in_range(version, spec):
                problems.append(
                    f"{name} needs {dist}{spec}, found {dist} {version}: install {dist}{spec} in the image, "
                    f"or leave {name} out"
                )
            else:
                found[dist] = version
    if problems:
        raise PackError("\n".join(problems))
    return found


# ---------------------------------------------------------------------------- image match (5)


def locate_package(name, site):
    """The package's directory, found without importing it (vllm_gaudi needs Gaudi software)."""
    if site:
        path = os.path.join(site, name)
        return os.path.abspath(path) if os.path.isdir(path) else None
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.abspath(list(spec.submodule_search_locations)[0])


def installed_version(dist, site):
    import importlib.metadata

    if site:
        for found in importlib.metadata.distributions(name=dist, path=[site]):
            return found.version
        return None
    try:
        return importlib.metadata.distribution(dist).version
    except importlib.metadata.PackageNotFoundError:
        return None


def recorded_commit(location):
    """The commit setuptools-scm wrote into _version.py (read as text), or None if not recorded."""
    import re

    text = read_bytes(os.path.join(location, "_version.py"))
    if text is None:
        return None
    match = re.search(
        r"^__commit_id__\s*=\s*(?:commit_id\s*=\s*)?(?:'([^']*)'|\"([^\"]*)\")",
        text.decode("utf-8", "replace"),
        re.M,
    )
    commit = match and (match.group(1) or match.group(2) or "").strip().lower()
    if not commit:
        return None
    # setuptools-scm writes 'g' + the abbreviated git hash
    return commit[1:] if commit.startswith("g") else commit


def same_commit(found, expected):
    """Commits match when the shorter (at least 7 hex digits) is a prefix of the longer."""
    found, expected = found.lower(), expected.lower()
    n = min(len(found), len(expected))
    return n >= 7 and found[:n] == expected[:n]


def compare_commit(package, info, want):
    """Problems with the installed commit; an accepted other commit becomes a note instead."""
    found = info["commit"]
    if found is None:
        info["notes"].append(f"{package}: the install records no commit; relying on its version and file hashes")
        return []
    if same_commit(found, want["commit"]):
        return []
    accepted = want.get("accepted_commits") or {}
    for key, reason in accepted.items():
        if same_commit(found, key):
            info["notes"].append(
                f"{package}: installed commit {found} is not the profile's {want['commit'][:12]}, "
                f"but is accepted: {reason}"
            )
            return []
    return [
        f"{package}: installed commit {found} (from {package}/_version.py) is neither the profile's "
        f"{want['commit'][:12]} nor an accepted one ({', '.join(accepted) or 'none'}): use the release's "
        "base image, or vet this commit and add it to the profile's accepted_commits"
    ]


def inspect_packages(profile_name, profile, site):
    """({package: location, version, commit, notes}, [problems]) for the profile's packages."""
    packages, problems = {}, []
    where = f" in {site}" if site else ""
    for package, want in profile["packages"].items():
        location = locate_package(package, site)
        if location is None:
            problems.append(f"package {package} is not installed{where}: use the {profile_name} base image")
            continue
        version = installed_version(want["dist"], site)
        if version is None:
            problems.append(
                f"package {package} at {location} has no {want['dist']} distribution metadata{where}: "
                "it was not installed with pip; use the release's base image"
            )
            continue
        info = {"location": location, "version": version, "commit": recorded_commit(location), "notes": []}
        packages[package] = info
        if version != want["version"]:
            problems.append(
                f"{package}: installed version {version}, profile {profile_name} is for {want['version']}: "
                "use that release's base image, or a profile made for this version"
            )
        problems += compare_commit(package, info, want)
    return packages, problems


def collect_targets(names, fixes, profile):
    """{(package, path): {sha256, fixes}} over the named fixes, in first-seen order."""
    targets = {}
    for name in names:
        for target in fixes[name]["targets"]:
            package, path = target["package"], target["path"]
            if package not in profile["packages"]:
                raise PackError(
                    f"fix {name} targets {package}/{path}, but the profile has no package {package}: "
                    "fix the fix.yaml and regenerate the pack"
                )
            entry = targets.setdefault((package, path), {"sha256": target["sha256"], "fixes": []})
            if entry["sha256"] != target["sha256"]:
                raise PackError(
                    f"{entry['fixes'][0]} and {name} list different pristine sha256 for {package}/{path}: "
                    "the pack is inconsistent; regenerate it"
                )
            entry["fixes"].append(name)
    return targets


def check_pristine(targets, packages):
    """Problems for each target file that is missing or not the pristine release file."""
    problems = []
    for (package, path), target in targets.items():
        if package not in packages:
            continue  # the missing package is already reported
        full = os.path.join(packages[package]["location"], path)
        of = f"{package}/{path} (target of {', '.join(target['fixes'])})"
        found = differs(full, target["sha256"])
        if found == MISSING:
            problems.append(f"{of} is missing: {full} does not exist; use the release's base image")
        elif found:
            problems.append(
                f"{of}: sha256 {found}, the pristine release file has {target['sha256']}: "
                f"{full} was edited or comes from another release; reinstall the package"
            )
    return problems


MISSING = "missing"


def differs(path, want):
    """None when the file's sha256 is `want`; else its sha256, or MISSING."""
    data = read_bytes(path)
    if data is None:
        return MISSING
    found = sha256_bytes(data)
    return None if found == want else found


# ------------------------------------------------------------------------------------- record


def read_record(path, missing_ok):
    raw = read_bytes(path)
    if raw is None:
        if missing_ok:
            return None
        raise PackError(
            f"no fix record at {path}: this image was not built by the cookbook or the fixes were never applied"
        )
    try:
        record = json.loads(raw)
    except ValueError:
        record = None
    if (
        not isinstance(record, dict)
        or record.get("format") != RECORD_FORMAT
        or not isinstance(record.get("files"), list)
        or not isinstance(record.get("packages"), dict)
    ):
        raise PackError(f"the fix record {path} is damaged or of another format: rebuild the image")
    return record


def record_locations(record, site):
    """Where each recorded package is: the record's absolute location, or DIR/package with --site."""
    return {
        package: os.path.join(site, package) if site else info["location"]
        for package, info in record["packages"].items()
    }


def drifted_files(record, locations):
    """Problems for each recorded file whose current sha256 is not its recorded 'after'."""
    problems = []
    for entry in record["files"]:
        package, path = entry["package"], entry["path"]
        if package not in locations:
            problems.append(f"{package}/{path}: the record has no location for package {package}")
            continue
        full = os.path.join(locations[package], path)
        by = ", ".join(entry.get("fixes", [])) or "no fix"
        found = differs(full, entry["after"])
        if found == MISSING:
            problems.append(f"{package}/{path} (patched by {by}) is missing: {full}")
        elif found:
            problems.append(
                f"{package}/{path} (patched by {by}) was edited after the fixes were applied: "
                f"sha256 {found}, recorded {entry['after']}"
            )
    return problems


def write_record(path, record):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    data = (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()
    atomic_write(path, data, 0o644)  # readable by the unprivileged user --check runs as


# -------------------------------------------------------------------------------- patches (7)


def patch_paths(text):
    """The package-relative files a -p1 unified diff touches, from its headers.

    Hunk bodies are skipped by their line counts, so a removed line starting with "-- " is not
    mistaken for a header. This only reads names; applying is left to git apply / patch.
    """
    import re

    hunk = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
    paths, old, new = [], 0, 0
    for line in text.splitlines():
        if old > 0 or new > 0:
            tag = line[:1]
            if tag in (" ", ""):
                old, new = old - 1, new - 1
            elif tag == "-":
                old -= 1
            elif tag == "+":
                new -= 1
            elif tag != "\\":
                raise ValueError(f"hunk ends early before {line[:60]!r}")
            continue
        match = hunk.match(line)
        if match:
            old = int(match.group(1) or 1)
            new = int(match.group(2) or 1)
        elif line.startswith(("--- ", "+++ ")):
            name = line[4:].split("\t")[0].strip()
            if name != "/dev/null":
                if "/" not in name:
                    raise ValueError(f"{name!r} has no a/ or b/ prefix (patches are -p1)")
                paths.append(name.split("/", 1)[1])
        elif line.startswith(("rename from ", "rename to ", "copy from ", "copy to ")):
            paths.append(line.split(" ", 2)[2])
    if old > 0 or new > 0:
        raise ValueError("the last hunk is cut short")
    for path in paths:
        if not is_safe_relpath(path):
            raise ValueError(f"unsafe path {path!r}")
    return list(dict.fromkeys(paths))


def verify_patches(steps, fixes, pack_dir):
    """Before anything is applied: each patch file is the one the pack lists (sha256) and touches
    only its fix's declared targets. Returns {(fix, file): [(package, path) touched]}."""
    touched, problems = {}, []
    for name, entry in steps:
        label = f"{name}: patch {entry['file']}"
        data = read_bytes(os.path.join(pack_dir, entry["file"]))
        if data is None:
            problems.append(f"{label} is missing from the pack directory {pack_dir}: regenerate the pack")
            continue
        if sha256_bytes(data) != entry["sha256"]:
            problems.append(
                f"{label} has sha256 {sha256_bytes(data)}, the pack lists {entry['sha256']}: "
                "it was changed after the pack was generated; regenerate the pack"
            )
            continue
        try:
            paths = patch_paths(data.decode("utf-8", "surrogateescape"))
        except ValueError as exc:
            problems.append(f"{label} is not a usable -p1 unified diff: {exc}")
            continue
        if not paths:
            problems.append(f"{label} touches no file: it is empty or not a unified diff")
        declared = {t["path"] for t in fixes[name]["targets"] if t["package"] == entry["package"]}
        for path in paths:
            if path not in declared:
                problems.append(
                    f"{label} touches {entry['package']}/{path}, which {name} does not list in its "
                    "targets: add it (with its pristine sha256) to the fix.yaml and regenerate the pack"
                )
        touched[(name, entry["file"])] = [(entry["package"], path) for path in paths]
    if problems:
        raise PackError("the pack's patches are not usable; nothing was changed:\n" + bullets(problems))
    return touched


def find_patch_tool():
    import shutil

    for tool in ("git", "patch"):
        exe = shutil.which(tool)
        if exe:
            return tool, exe
    raise PackError("neither git nor patch is installed: install one in the image before applying fixes")


def run_patch_tool(tool, patch_file, cwd, staging_root, reverse, check_only=False):
    """(ok, output) of applying one patch file inside cwd (check_only: test it, change nothing)."""
    import subprocess

    kind, exe = tool
    env = dict(os.environ)
    if kind == "git":
        cmd = [exe, "apply", "-p1", "--whitespace=nowarn"]
        # Never find an enclosing repository (git apply would then work relative to its root and
        # silently skip paths outside cwd) and ignore the builder's git config.
        env.update(GIT_CEILING_DIRECTORIES=staging_root, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    else:
        cmd = [exe, "-p1", "--batch", "--forward", "--no-backup-if-mismatch", "--reject-file=-"]
    if reverse:
        cmd.append("-R")
    if check_only:
        cmd.append("--check" if kind == "git" else "--dry-run")
    cmd += ["-i" if kind == "patch" else "--", patch_file]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    return proc.returncode == 0, (proc.stdout + proc.stderr).strip()


def patch_in_staging(originals, steps, pack_dir, reverse, log):
    """Apply steps [(fix, patch entry)] to copies of originals {(package, path): bytes} in a
    temporary directory and return the resulting bytes of every file. The real tree is never
    touched; the first failing patch raises PackError with the tool's message."""
    import tempfile

    tool = find_patch_tool()
    log.info(f"staging: {'reverse-applying' if reverse else 'applying'} {len(steps)} patches with {tool[0]}")
    with tempfile.TemporaryDirectory(prefix="apply_all.") as root:
        for (package, path), data in originals.items():
            staged = os.path.join(root, package, path)
            os.makedirs(os.path.dirname(staged), exist_ok=True)
            with open(staged, "wb") as f:
                f.write(data)
        for name, entry in steps:
            cwd = os.path.join(root, entry["package"])
            os.makedirs(cwd, exist_ok=True)
            ok, output = run_patch_tool(tool, os.path.join(pack_dir, entry["file"]), cwd, root, reverse)
            if not ok:
                if reverse:
                    mend = "the files are not what the recorded fixes produced; rebuild the image from its base"
                else:
                    mend = (
                        "the target files are pristine, so the patch was not made against the release with "
                        "the earlier fixes of the order applied: regenerate it"
                    )
                said = "\n".join("    | " + line for line in output.splitlines())
                raise PackError(
                    f"{name}: patch {entry['file']} does not {'reverse-' if reverse else ''}apply to "
                    f"{entry['package']} ({tool[0]} says):\n{said}\n{mend}; nothing was changed"
                )
        results = {}
        for package, path in originals:
            data = read_bytes(os.path.join(root, package, path))
            if data is None:
                raise PackError(f"a patch deletes {package}/{path}: fixes may only modify files")
            results[(package, path)] = data
        return results


# ------------------------------------------------------------------------------------- commands


def patch_steps(names, fixes, reverse=False):
    """(fix, patch entry) in application order: fixes in order, patches in list order (or reversed)."""
    steps = [(name, entry) for name in names for entry in fixes[name]["patches"]]
    return steps[::-1] if reverse else steps


def report_selection(plan, profile_name, log):
    log.info(f"profile {profile_name}, {plan['mode']} mode: {len(plan['fixes'])} fixes: {', '.join(plan['fixes'])}")
    for name, reason in plan["skipped"].items():
        log.info(f"skipped {name}: {reason}")
    if plan["not_in_pack"]:
        log.info(f"not in this pack: {', '.join(plan['not_in_pack'])}")


def already_applied(record, plan, profile_name, packages, record_path, log):
    """Step 6: exit 0 for the same selection on an unchanged tree; refuse anything else."""
    if record.get("profile") != profile_name or record.get("fixes") != plan["fixes"]:
        raise PackError(
            f"{record_path} records profile {record.get('profile')} with fixes "
            f"{', '.join(record.get('fixes') or []) or 'none'}, but this run selects profile {profile_name} "
            f"with {', '.join(plan['fixes']) or 'none'}: revert first (apply_all.py --revert "
            f"--record {record_path}), then apply"
        )
    locations = {package: info["location"] for package, info in packages.items()}
    problems = drifted_files(record, locations)
    if problems:
        raise PackError(
            f"the fixes are recorded as applied ({record_path}) but the tree changed since:\n"
            f"{bullets(problems)}\nrebuild the image from its base"
        )
    log.result(
        f"already applied: {len(plan['fixes'])} fixes, {len(record['files'])} files match the record "
        f"{record_path} (profile {profile_name}); nothing changed"
    )
    return 0


def build_record(profile_name, pack_sha, plan, packages, targets, touched, originals, results):
    files = []
    for package, path in targets:
        by = [name for (name, _), paths in touched.items() if (package, path) in paths]
        files.append(
            {
                "package": package,
                "path": path,
                "before": sha256_bytes(originals[(package, path)]),
                "after": sha256_bytes(results[(package, path)]),
                "fixes": list(dict.fromkeys(by)),
            }
        )
    return {
        "format": RECORD_FORMAT,
        "profile": profile_name,
        "pack_sha256": pack_sha,
        "mode": plan["mode"],
        "fixes": plan["fixes"],
        "skipped": plan["skipped"],
        "not_in_pack": plan["not_in_pack"],
        "env": plan["env"],
        "dists": plan["dists"],
        "packages": packages,
        "files": files,
    }


def cmd_apply(args, log):
    pack_path = args.pack or default_pack_path()
    pack, pack_sha = load_pack(pack_path)
    pack_dir = os.path.dirname(os.path.abspath(pack_path))
    fixes = pack["fixes"]
    profile = get_profile(pack, args.profile)
    plan = plan_selection(pack, args.profile, profile, args.opt_in, os.environ)
    plan["dists"] = check_dists(plan["fixes"], fixes, args.site)
    report_selection(plan, args.profile, log)

    packages, problems = inspect_packages(args.profile, profile, args.site)
    for info in packages.values():
        for note in info["notes"]:
            log.result(f"note: {note}")
    record = read_record(args.record, missing_ok=True)
    if record is not None and not problems:
        return already_applied(record, plan, args.profile, packages, args.record, log)
    targets = collect_targets(plan["fixes"], fixes, profile)
    if record is None:  # an applied tree never has pristine hashes: only the package problems count
        problems += check_pristine(targets, packages)
    if problems:
        raise PackError(
            f"the image does not match profile {args.profile} ({len(problems)} problems); "
            f"nothing was changed:\n{bullets(problems)}"
        )

    steps = patch_steps(plan["fixes"], fixes)
    touched = verify_patches(steps, fixes, pack_dir)
    locations = {package: info["location"] for package, info in packages.items()}
    originals = {key: read_bytes(os.path.join(locations[key[0]], key[1])) for key in targets}
    results = patch_in_staging(originals, steps, pack_dir, reverse=False, log=log)
    changes = file_changes(originals, results, locations)
    record = build_record(args.profile, pack_sha, plan, packages, targets, touched, originals, results)

    if args.dry_run:
        for entry in record["files"]:
            if entry["before"] != entry["after"]:
                log.result(f"dry run: would change {entry['package']}/{entry['path']} ({', '.join(entry['fixes'])})")
        log.result(f"dry run: {len(plan['fixes'])} fixes apply cleanly; nothing changed, no record written")
        return 0
    commit(changes, lambda: write_record(args.record, record), f"write the record {args.record}")
    log.result(
        f"applied {len(plan['fixes'])} fixes to {len(changes)} files (profile {args.profile}, "
        f"{plan['mode']} mode); record {args.record}"
    )
    return 0


def cmd_check(args, log):
    record = read_record(args.record, missing_ok=False)
    problems = drifted_files(record, record_locations(record, args.site))
    for var, want in sorted(record.get("env", {}).items()):
        if os.environ.get(var) != want:
            problems.append(
                f"the applied fixes need {var}={want}, found {describe_var(var, os.environ)}: "
                f"run the container with -e {var}={want}"
            )
    # Fixes were chosen for the build's mode (some are skipped in one mode); a run in the other
    # mode would serve with a fix set nobody checked.
    built_mode, mode = record.get("mode"), current_mode(os.environ)
    if built_mode and mode != built_mode:
        problems.append(
            f"the fixes were applied for {built_mode} mode, but PT_HPU_LAZY_MODE says {mode} mode "
            f"(found {describe_var('PT_HPU_LAZY_MODE', os.environ)}): run in the mode the image was built for"
        )
    if args.pack:
        raw = read_bytes(args.pack)
        if raw is None or sha256_bytes(raw) != record.get("pack_sha256"):
            problems.append(f"{args.pack} is not the pack these fixes were applied from")
    if problems:
        raise PackError(
            f"the image does not match its fix record {args.record} (profile {record.get('profile')}):\n"
            + bullets(problems)
        )
    log.result(
        f"ok: {len(record.get('fixes', []))} fixes, {len(record['files'])} files match the record "
        f"(profile {record.get('profile')})"
    )
    return 0


def cmd_revert(args, log):
    record = read_record(args.record, missing_ok=False)
    pack_path = args.pack or default_pack_path()
    pack, pack_sha = load_pack(pack_path)
    if pack_sha != record.get("pack_sha256"):
        raise PackError(
            f"{pack_path} is not the pack these fixes were applied from (sha256 {pack_sha}, the record "
            f"says {record.get('pack_sha256')}): revert with that pack (--pack PATH)"
        )
    fixes, names = pack["fixes"], record.get("fixes", [])
    locations = record_locations(record, args.site)
    problems = drifted_files(record, locations)
    if problems:
        raise PackError(f"cannot revert: the tree changed since the fixes were applied:\n{bullets(problems)}")

    steps = patch_steps(names, fixes, reverse=True)
    verify_patches(steps, fixes, os.path.dirname(os.path.abspath(pack_path)))
    originals = {
        (e["package"], e["path"]): read_bytes(os.path.join(locations[e["package"]], e["path"])) for e in record["files"]
    }
    results = patch_in_staging(originals, steps, os.path.dirname(os.path.abspath(pack_path)), True, log)
    wrong = [
        f"{e['package']}/{e['path']}: sha256 {sha256_bytes(results[(e['package'], e['path'])])} after "
        f"reverting, recorded before {e['before']}"
        for e in record["files"]
        if sha256_bytes(results[(e["package"], e["path"])]) != e["before"]
    ]
    if wrong:
        raise PackError(f"reverting does not give back the recorded files; nothing was changed:\n{bullets(wrong)}")
    changes = file_changes(originals, results, locations)

    if args.dry_run:
        for entry in record["files"]:
            if entry["before"] != entry["after"]:
                log.result(f"dry run: would restore {entry['package']}/{entry['path']}")
        log.result(f"dry run: would revert {len(names)} fixes and remove {args.record}; nothing changed")
        return 0
    commit(changes, lambda: os.unlink(args.record), f"remove the record {args.record}")
    log.result(
        f"reverted {len(names)} fixes: {len(changes)} files restored (profile {record.get('profile')}); "
        f"removed {args.record}"
    )
    return 0


def cmd_list(args, log):
    pack, _ = load_pack(args.pack or default_pack_path())
    fixes = pack["fixes"]
    for profile_name in [args.profile] if args.profile else sorted(pack["profiles"]):
        profile = get_profile(pack, profile_name)
        order, opt_in = profile["order"], opt_in_names(profile, fixes)
        present = sum(name in fixes for name in order)
        log.result(
            f"profile {profile_name} (gaudi_sw {profile.get('gaudi_sw', '?')}): "
            f"{len(order)} fixes, {present} in this pack"
        )
        width = max(map(len, order), default=0)
        for name in order:
            kind = "opt-in" if name in opt_in else "profile"
            status = "in pack" if name in fixes else "not in this pack"
            title = fixes.get(name, {}).get("title", "")
            log.result(f"  {name:<{width}}  {kind:<7}  {status:<16}  {title}".rstrip())
    return 0


# ----------------------------------------------------------------------------------------- main


class Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        emit(sys.stderr, f"usage error: {message}")
        sys.exit(2)


def parse_args(argv):
    parser = Parser(
        prog="apply_all.py",
        description="Apply, check, revert or list the cookbook's fix pack.",
        epilog="See the module docstring (head fixes/apply_all.py) for what each step checks.",
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--check", action="store_true", help="verify the image against its fix record")
    action.add_argument("--revert", action="store_true", help="restore the pristine files, remove the record")
    action.add_argument("--list", action="store_true", help="list a profile's fixes")
    parser.add_argument("--profile", help="the profile to apply (or list)")
    parser.add_argument("opt_in", nargs="*", metavar="OPT_IN", help="opt-in fixes to apply too")
    parser.add_argument("--site", help="find the packages in DIR instead of on sys.path")
    parser.add_argument("--record", default=DEFAULT_RECORD, help=f"the fix record (default {DEFAULT_RECORD})")
    parser.add_argument("--pack", help="pack.json (default: the one beside this script)")
    parser.add_argument("--dry-run", action="store_true", help="check and stage everything, change nothing")
    parser.add_argument("--quiet", action="store_true", help="print only notes, errors and the result")
    args = parser.parse_intermixed_args(argv)

    applying = not (args.check or args.revert or args.list)
    if applying and not args.profile:
        parser.error("say --profile NAME to apply (or --check, --revert, --list)")
    if args.opt_in and not applying:
        parser.error("opt-in fixes are named only when applying (--profile NAME OPT_IN ...)")
    if args.profile and (args.check or args.revert):
        parser.error("--check and --revert take the profile from the record, not --profile")
    if args.dry_run and (args.check or args.list):
        parser.error("--dry-run goes with applying or --revert")
    return args


def main(argv=None):
    args = parse_args(argv)
    log = Log(args.quiet)
    command = cmd_check if args.check else cmd_revert if args.revert else cmd_list if args.list else cmd_apply
    try:
        return command(args, log)
    except PackError as exc:
        log.error(str(exc))
        return 1
    except OSError as exc:
        log.error(f"{exc}; nothing was changed")
        return 1


if __name__ == "__main__":
    sys.exit(main())
