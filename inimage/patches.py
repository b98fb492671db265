"""The patches (step 7): each checked against the pack (sha256, the files it touches) before anything is
applied, then applied with git apply (or patch) to copies of the target files in a staging folder, so
the real tree is never touched by a patch tool."""

import os

from .files import read_bytes
from .fixplan import sha256_bytes
from .output import PackError, bullets
from .pack import is_safe_relpath


def patch_steps(names, fixes, reverse=False):
    """(fix, patch entry) in application order: fixes in order, patches in list order (or reversed)."""
    steps = [(name, entry) for name in names for entry in fixes[name]["patches"]]
    return steps[::-1] if reverse else steps


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
    with tempfile.TemporaryDirectory(prefix="inimage.") as root:
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

