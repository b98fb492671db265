"""The fix record (fixplan.RECORD in an image): what was applied, for which mode and env, and every
patched file's sha256 before and after, which --check, --revert and a second apply hold the tree to."""

import json
import os

from .files import MISSING, atomic_write, differs, read_bytes
from .fixplan import sha256_bytes
from .output import PackError

RECORD_FORMAT = 1


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


def write_record(path, record):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    data = (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()
    atomic_write(path, data, 0o644)  # readable by the unprivileged user --check runs as

