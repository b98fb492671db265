"""`invoke fixes.rebase --base IMAGE` on the three images test_fix_base builds here (the real pack's target
files, FROM scratch, never run): the one whose file differs gets a candidate pack whose patch applies to
the base's file with no offset, whose hashes are the base's, and that the fix lab proves on the base's
files (for that one fix: async-discard-counter, the owner of the file changed, a module of its own and no
engine run); the conflicting one is reported and exits 1; fixes/ stays byte for byte as it was."""

import hashlib
import re
import shutil
import subprocess
import sys

import pytest

from cookbook.fixpack import fix_base, fix_rebase
from cookbook.host.errors import FAILED, FixError
from cookbook.host.paths import FIXES, ROOT
from cookbook.recipe import fixes

from .test_fix_base import bases  # noqa: F401  (the three images, a module fixture)

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


def rebase(*args):
    return subprocess.run([sys.executable, "-m", "invoke", "fixes.rebase", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=1800)


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
