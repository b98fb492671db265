"""pack.json, the index the host generates from fixes/*/fix.yaml and fixes/profiles/*.yaml: read, refused
unless it has the shape this package relies on, and its profiles and targets looked up."""

import json

from .files import read_bytes
from .fixplan import MODES, sha256_bytes
from .output import PackError
from .versions import parse_range

PACK_FORMAT = 1


def load_pack(path):
    """The parsed pack and the sha256 of its bytes; refuses a pack the applier cannot rely on."""
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
    """The first structural problem of a pack, or None. Checks only what the applier relies on."""
    if not isinstance(pack, dict):
        return "not a JSON object"
    if pack.get("format") != PACK_FORMAT:
        return f"pack format {pack.get('format')!r}, this applier reads format {PACK_FORMAT}"
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

