"""Dependency ranges: a fix's `dists` ({xgrammar: ">=0.2.4"}) against the versions installed, read the way
PEP 440 orders releases, without the `packaging` library (standard library only)."""

from .output import PackError


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


def installed_version(dist, site, anywhere=False):
    """The installed version of a distribution, or None: in --site DIR when given (and, with `anywhere`,
    then on the path of the Python running this: the image's, which serves with it), else on that path."""
    import importlib.metadata

    if site:
        for found in importlib.metadata.distributions(name=dist, path=[site]):
            return found.version
        if not anywhere:
            return None
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
            version = installed_version(dist, site, anywhere=True)
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

