"""What the image has installed (step 5), found without importing it (vllm_gaudi needs Gaudi software):
each package's location, version and commit against the profile's, and each target file against the
pristine release file's sha256."""

import os

from .files import MISSING, differs, read_bytes
from .versions import installed_version


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

