"""`invoke fixes.rebase --base IMAGE` on the three images test_fix_base builds here (the real pack's target
files, FROM scratch, never run): the one whose file differs gets a candidate pack whose patch applies to
the base's file with no offset, whose hashes are the base's, and that the fix lab proves on the base's
files (for that one fix: async-discard-counter, the owner of the file changed, a module of its own and no
engine run); the conflicting one is reported and exits 1; fixes/ stays byte for byte as it was."""

import hashlib
import os
import re
import shutil
import subprocess
import sys

import pytest

from cookbook.fixpack import fix_base, fix_rebase
from cookbook.host.errors import FAILED, FixError
from cookbook.host.paths import FIXES, ROOT
from cookbook.recipe import fixes

from .test_fix_base import base_image, bases  # noqa: F401  (bases: the three images, a module fixture)

SHA_A, SHA_B = "a" * 64, "b" * 64


@pytest.mark.parametrize("text, changes, want", [
    (f"targets:\n- package: vllm\n  files:\n    x.py: {SHA_A}\n", {"x.py": (SHA_A, SHA_B)},
     f"targets:\n- package: vllm\n  files:\n    x.py: {SHA_B}\n"),
    # the comment and the other file's hash (the same bytes) are kept
    (f"# why\nfiles:\n  x.py: {SHA_A}  # note\n  y/x.py: {SHA_A}\n", {"x.py": (SHA_A, SHA_B)},
     f"# why\nfiles:\n  x.py: {SHA_B}  # note\n  y/x.py: {SHA_A}\n"),
    (f"files:\n  'x.py': '{SHA_A}'\n", {"x.py": (SHA_A, SHA_B)}, f"files:\n  'x.py': '{SHA_B}'\n"),
    (f"files:\n  x.py: {SHA_B}\n", {"x.py": (SHA_A, SHA_B)}, None),  # not the recorded hash: refused
])
def test_rehash(text, changes, want):
    if want is None:
        with pytest.raises(FixError):
            fix_rebase.rehash(text, changes)
    else:
        assert fix_rebase.rehash(text, changes) == want


def tree_digest(root):
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def rebase(*args, env=None):
    return subprocess.run([sys.executable, "-m", "invoke", "fixes.rebase", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=1800, env={**os.environ, **(env or {})})


@pytest.fixture
def accepted_unchanged():
    before = tree_digest(FIXES)
    yield
    assert tree_digest(FIXES) == before, "fixes.rebase wrote into the accepted pack"


@pytest.fixture
def out_of(bases):  # noqa: F811
    made = []

    def out(kind):
        made.append(ROOT / "build" / "fixes-rebase" / fix_base.slug(bases[kind][0]))
        return made[-1]

    yield out
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


def zero_offset(patch, cwd):
    """(applies with no offset and no fuzz, what GNU patch said), checked only."""
    got = subprocess.run(["patch", "-p1", "--dry-run", "--batch", "--fuzz=0", "-i", str(patch)], cwd=cwd,
                         capture_output=True, text=True)
    return got.returncode == 0 and "offset" not in got.stdout and "fuzz" not in got.stdout, got.stdout


@pytest.mark.docker
@pytest.mark.upstream
def test_a_differing_base_gets_a_candidate_the_lab_proves(bases, out_of, accepted_unchanged, tmp_path):  # noqa: F811
    image, fix = bases["differs"]
    assert fix == "async-discard-counter"  # the one the lab runs below: what the docstring promises
    keep = tmp_path / "lab"
    out = out_of("differs")  # removed afterwards, even when the run fails
    got = rebase("--base", image, "--lab-fix", fix, "--keep", str(keep))
    assert got.returncode == 0, got.stdout + got.stderr
    pack = out / "fixes"
    spec = fixes.load_fix(fix, pack)
    [target] = spec.targets
    [(path, sha)] = target.files.items()
    base_file = (keep / "pristine" / target.package / path).read_bytes()  # the lab's pristine tree: the base's
    assert base_file.startswith(b"# added by the base image\n")
    assert sha == hashlib.sha256(base_file).hexdigest() != fixes.load_fix(fix).targets[0].files[path]
    site = tmp_path / "base" / target.package
    (site / path).parent.mkdir(parents=True)
    (site / path).write_bytes(base_file)
    for ref in spec.patches:
        clean, said = zero_offset(pack / fix / ref.file, site)
        assert clean, said
        moved, said = zero_offset(FIXES / fix / ref.file, site)
        assert not moved and "offset" in said  # the accepted patch needed one: there was something to re-anchor
    # every other fix kept as accepted, and a pack.json that is the candidate's own
    for name in fixes.fix_names(FIXES):
        if name != fix:
            assert tree_digest(pack / name) == tree_digest(FIXES / name)
    fixes.write_index(check=True, fixes_dir=pack)
    # what a reviewer must read, printed and there
    assert f"{fix:36} rebased" in got.stdout
    base_diff = out / "review" / fix / "base" / target.package / f"{path}.diff"
    assert "+# added by the base image\n" in base_diff.read_text()
    for name in ["fix.yaml", *(ref.file for ref in spec.patches)]:
        shown = f"read build/fixes-rebase/{fix_base.slug(image)}/review/{fix}/{name}.diff"
        assert shown in got.stdout
        assert (out / "review" / fix / f"{name}.diff").read_text().startswith(f"--- a/{fix}/{name}")
    assert f"cp build/fixes-rebase/{fix_base.slug(image)}/fixes/{fix}/* fixes/{fix}/" in got.stdout
    # the lab's verdict: its tests fail on the base's files and pass with the candidate applied
    line = next(x for x in got.stdout.splitlines() if x.strip().startswith(fix + " ") and "failed" in x)
    [(failed, ran), (passed, ran_too)] = re.findall(r"(\d+)/(\d+) (?:failed|passed)", line)
    assert failed == ran == passed == ran_too != "0", line
    assert "PROBLEM" not in line, got.stdout
    patched = (keep / "patched" / target.package / path).read_bytes()
    assert patched.startswith(b"# added by the base image\n") and patched != base_file


@pytest.mark.docker
@pytest.mark.upstream
def test_a_conflicting_fix_is_reported_not_rebased(bases, out_of, accepted_unchanged):  # noqa: F811
    image, fix = bases["conflict"]
    out = out_of("conflict")
    got = rebase("--base", image)  # the lab is not run: a fix does not apply
    assert got.returncode == FAILED, got.stdout + got.stderr
    assert f"{fix:36} does not apply: not rebased" in got.stdout
    assert "fix lab: not run: a fix does not apply to the base" in got.stdout
    assert f"do not apply to {image} and were not rebased: {fix}" in got.stderr and "Traceback" not in got.stderr
    assert tree_digest(out / "fixes" / fix) == tree_digest(FIXES / fix)  # kept as accepted, not rebased
    assert "cp " not in got.stdout  # nothing offered for acceptance


@pytest.mark.docker
@pytest.mark.upstream
def test_a_matching_base_needs_nothing_and_dry_run_writes_nothing(bases, out_of, accepted_unchanged):  # noqa: F811
    image, _ = bases["match"]
    out = out_of("match")
    dry = rebase("--base", image, "--dry-run")
    assert dry.returncode == 0 and "is not written" in dry.stdout and not out.exists()
    got = rebase("--base", image, "--no-lab")
    assert got.returncode == 0, got.stdout + got.stderr
    assert f"nothing to rebase: the pack applies to {image} as recorded" in got.stdout
    assert "fix lab: not run (--no-lab)" in got.stdout
    # a folder that is not the command's own is never replaced
    shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / "notes.txt").write_text("mine")
    refused = rebase("--base", image, "--no-lab")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert (out / "notes.txt").read_text() == "mine"


# Appended to a module the lab imports: it leaves a note on the host if it can reach the host's folder,
# then refuses to go on as root or with the caller's token (the lab's tests then fail on the patched tree).
SNOOP = """
import os as _snoop
try:
    with open({marker!r}, "w") as _f:
        _f.write(f"uid {{_snoop.getuid()}}, HF_TOKEN {{'set' if 'HF_TOKEN' in _snoop.environ else 'unset'}}")
except OSError:
    pass
if _snoop.getuid() == 0 or "HF_TOKEN" in _snoop.environ:
    raise RuntimeError("the base's code ran as root or with the caller's HF_TOKEN")
"""


@pytest.mark.docker
@pytest.mark.upstream
def test_the_lab_never_runs_a_bases_code_on_the_host(made_images, tmp_path_factory, tmp_path, accepted_unchanged):
    fix = "async-discard-counter"
    [target] = fixes.load_fix(fix).targets
    [path] = target.files
    marker = tmp_path / "ran-on-the-host"

    def snoop(site):
        module = site / target.package / path
        module.write_text(module.read_text() + SNOOP.format(marker=str(marker)))

    image = base_image(tmp_path_factory, made_images, "snoop", snoop)
    out = ROOT / "build" / "fixes-rebase" / fix_base.slug(image)
    try:
        got = rebase("--base", image, "--lab-fix", fix, env={"HF_TOKEN": "hf_not_a_real_token"})
    finally:
        shutil.rmtree(out, ignore_errors=True)
    assert not marker.exists(), f"the base's code ran on the host: {marker.read_text()}"
    # it did run, in the lab's container: its tests failed on the base's files and passed with the
    # candidate applied, so the module was imported as a non-root user without the token
    assert got.returncode == 0, got.stdout + got.stderr
    line = next(x for x in got.stdout.splitlines() if x.strip().startswith(fix + " ") and "failed" in x)
    [(failed, ran), (passed, ran_too)] = re.findall(r"(\d+)/(\d+) (?:failed|passed)", line)
    assert failed == ran == passed == ran_too != "0", line
