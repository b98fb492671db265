"""`invoke fixes.verify --base IMAGE` against three images built here, FROM scratch (no Python in them:
the base is read, never run), holding the real pack's target files as a base's site-packages: the
pristine files, the files with a comment line added at the top of one, and the files with a line a patch
removes changed. Plus the pure parts, table-driven."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from cookbook.fixpack import fix_base
from cookbook.fixpack.fix_base import DIFFERS, MATCHES, NO_APPLY, FileState
from cookbook.fixpack.fix_sources import package_roots
from cookbook.host import engine
from cookbook.host.errors import FAILED, PackDiffers, PackFailure
from cookbook.host.paths import FIXES, ROOT
from cookbook.recipe import fixes, recipes

from ..conftest import TEST_REPO

SITE = str(recipes.load("qwen3.5-27b-fp8").recipe.base.site_packages)  # what the cookbook assumes of the base
SHA_A, SHA_B = "a" * 64, "b" * 64


def fs(found, want=SHA_A, path="x.py"):
    return FileState("vllm", path, want, found)


@pytest.mark.parametrize("files, patched, said, verdict", [
    ([fs(SHA_A)], "applies", "", MATCHES),
    ([fs(SHA_A), fs(SHA_A, path="y.py")], "applies", "", MATCHES),
    ([fs(SHA_B)], "applies", "", DIFFERS),
    ([fs(SHA_A), fs(SHA_B, path="y.py")], "applies", "", DIFFERS),
    ([fs(SHA_A)], "conflicts", "x.py: patch failed", NO_APPLY),
    ([fs(SHA_B)], "conflicts", "x.py: patch failed", NO_APPLY),
    ([fs(SHA_B)], "already upstream", "reverse-applies", NO_APPLY),
    ([fs(None)], "not tried", "", NO_APPLY),
    ([fs(SHA_A), fs(None, path="y.py")], "applies", "", NO_APPLY),
])
def test_classify(files, patched, said, verdict):
    got, why = fix_base.classify(files, patched, said)
    assert got == verdict
    if verdict == NO_APPLY:
        assert why  # always says why
    if verdict == DIFFERS:
        assert "y.py" in why or "x.py" in why


@pytest.mark.parametrize("verdicts, error, code", [
    ([], None, 0),
    ([MATCHES, MATCHES], None, 0),
    ([MATCHES, fix_base.NOT_WRITTEN], None, 0),
    ([MATCHES, DIFFERS], PackDiffers, fix_base.EXIT_DIFFERS),
    ([DIFFERS, NO_APPLY], PackFailure, FAILED),
    ([NO_APPLY], PackFailure, FAILED),
])
def test_error_class(verdicts, error, code):
    found = fix_base.error_class(verdicts)
    assert found is error and (found.exit_code if found else 0) == code


@pytest.mark.parametrize("env, recipe_sites, first", [
    (None, ["/r/site"], "/r/site"),
    (["PATH=/usr/bin", "PYTHONPATH=/opt/py:/opt/more:relative"], ["/r/site"], "/opt/py"),
    (["PYTHONPATH="], [], "/usr/local/lib/python3.11/dist-packages"),
])
def test_site_candidates(env, recipe_sites, first):
    got = fix_base.site_candidates(env, recipe_sites)
    assert got[0] == first and len(got) == len(set(got))
    assert "relative" not in got and "/usr/lib/python3/dist-packages" in got


@pytest.mark.parametrize("line, hinted", [
    ("#9 0.41 apply_all:   - vllm/x.py (target of f): sha256 ab, the pristine release file has cd: edited", True),
    ("apply_all:   - vllm/x.py (target of f) is missing: /s/vllm/x.py does not exist; use the release's", True),
    ("#9 0.41 apply_all: error: neither git nor patch is installed", False),
    ("COPY failed: file not found in build context", False),
])
def test_build_failure_names_fixes_verify_only_for_base_files(line, hinted):
    from cookbook.image import build

    hint = build.verify_hint(["step 3/6", line, "executor failed"], "base:1")
    assert (hint == "check the pack against the base: invoke fixes.verify --base base:1") is hinted


# ------------------------------------------------------------------------------ three real images


def first_removed_line(spec_name: str, spec: fixes.FixSpec, roots) -> tuple[str, str, str] | None:
    """(package, path, line) of a line one of the fix's patches removes that occurs once in its file."""
    for ref in spec.patches:
        text = (FIXES / spec_name / ref.file).read_text()
        path = None
        for line in text.splitlines():
            if line.startswith("+++ b/"):
                path = line[6:]
            elif line.startswith("-") and not line.startswith("---") and line[1:].strip() and path:
                pristine = (roots[ref.package] / path).read_text()
                if pristine.count(line[1:] + "\n") == 1:
                    return ref.package, path, line[1:]
    return None


def base_image(tmp_path_factory, made_images, kind, edit=None) -> str:
    """An image FROM scratch holding the pack's target files (the pristine ones) and vllm_gaudi's
    __init__.py as a base's site-packages, `edit(site folder)` applied first; its tag (removed with the
    session's images)."""
    profile = fixes.load_profile("v0.26.0")
    roots = package_roots(profile)
    ctx = tmp_path_factory.mktemp(f"base-{kind}")
    site = ctx / "site"
    for package, path in [*fix_base.targets(fixes.resolve(profile, profile.order)), ("vllm_gaudi", "__init__.py")]:
        (site / package / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(roots[package] / path, site / package / path)
    if edit:
        edit(site)
    (ctx / "Dockerfile").write_text(f"FROM scratch\nCOPY site/ {SITE}/\n")
    tag = f"{TEST_REPO}/fix-base-{kind}:test"
    engine.docker("build", "-q", "-t", tag, str(ctx))
    made_images.append(tag)
    return tag


@pytest.fixture(scope="module")
def bases(made_images, upstream_cache, tmp_path_factory):
    """{kind: (image, fix it concerns)} for match, differs, conflict."""
    profile = fixes.load_profile("v0.26.0")
    present = fixes.resolve(profile, profile.order)
    roots = package_roots(profile)
    # a target file only one fix edits: the others still match
    owners = {}
    for n in profile.order:
        for t in present.get(n).targets if n in present else []:
            for f in t.files:
                owners.setdefault((t.package, f), []).append(n)
    top, [first] = next((key, names) for key, names in owners.items() if len(names) == 1)
    conflict_fix, conflict = next((n, found) for n in profile.order if n in present
                                  for found in [first_removed_line(n, present[n], roots)] if found)
    def differs(site):
        target = site / top[0] / top[1]
        target.write_text("# added by the base image\n" + target.read_text())

    def conflicts(site):
        package, path, line = conflict
        target = site / package / path
        target.write_text(target.read_text().replace(line + "\n", line + "  # changed by the base\n"))

    out = {kind: (base_image(tmp_path_factory, made_images, kind, edit), fix)
           for kind, edit, fix in [("match", None, None), ("differs", differs, first),
                                   ("conflict", conflicts, conflict_fix)]}
    yield out
    for tag, _ in out.values():
        shutil.rmtree(ROOT / "build" / "fixes-verify" / fix_base.slug(tag), ignore_errors=True)


def verify(*args, env=None):
    return subprocess.run([sys.executable, "-m", "invoke", "fixes.verify", *args], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=600)


def verdicts(stdout: str) -> dict[str, str]:
    out = {}
    for line in stdout.splitlines():
        for v in (MATCHES, DIFFERS, NO_APPLY, fix_base.NOT_WRITTEN):
            if line.endswith(" " + v) and not line.startswith(" "):
                out[line[: -len(v)].strip()] = v
    return out


def containers_of(image: str) -> set[str]:
    return set(engine.docker("ps", "-a", "--filter", f"ancestor={image}", "--format", "{{.ID}}").stdout.split())


@pytest.fixture(autouse=True)
def others(request):
    """The containers there before the test: the bases' images are shared with other checkouts' test runs
    on this engine (the same layers give the same image id), whose containers are not this test's."""
    if "bases" not in request.fixturenames and "odd_bases" not in request.fixturenames:
        yield
        return
    out = engine.docker("ps", "-a", "--quiet", "--filter", "label=cookbook.container")
    _before.clear()
    _before.update(out.stdout.split())
    yield


_before: set[str] = set()


def no_container_left(image: str) -> bool:
    """No container of `image` but those that were there before the test."""
    return not containers_of(image) - _before


@pytest.mark.docker
@pytest.mark.upstream
def test_a_base_whose_files_match(bases):
    image, _ = bases["match"]
    got = verify("--base", image)
    assert got.returncode == 0, got.stdout + got.stderr
    seen = verdicts(got.stdout)
    assert seen and set(seen.values()) == {MATCHES}, got.stdout
    assert f"site-packages {SITE}" in got.stdout
    assert no_container_left(image), (containers_of(image), _before)


@pytest.mark.docker
@pytest.mark.upstream
def test_a_base_whose_file_differs_but_the_pack_applies(bases):
    image, fix = bases["differs"]
    got = verify("--base", image)
    assert got.returncode == fix_base.EXIT_DIFFERS, got.stdout + got.stderr
    assert "1 target file(s) are not the pristine ones: a build on it refuses them" in got.stderr
    seen = verdicts(got.stdout)
    assert seen[fix] == DIFFERS and {v for k, v in seen.items() if k != fix} == {MATCHES}, got.stdout
    out = ROOT / "build" / "fixes-verify" / fix_base.slug(image)
    report = json.loads((out / "verdicts.json").read_text())
    [diff] = report["diffs"]
    text = (out / diff).read_text()
    assert text.startswith("--- a/") and "+# added by the base image\n" in text
    assert f"differs (+1 -0 lines): build/fixes-verify/{fix_base.slug(image)}/{diff}" in got.stdout
    assert no_container_left(image), (containers_of(image), _before)


@pytest.mark.docker
@pytest.mark.upstream
def test_a_base_where_a_patch_conflicts(bases):
    image, fix = bases["conflict"]
    got = verify("--base", image)
    assert got.returncode == FAILED, got.stdout + got.stderr
    assert f"do not apply to {image}: " in got.stderr and fix in got.stderr
    seen = verdicts(got.stdout)
    assert seen[fix] == NO_APPLY, got.stdout
    below = got.stdout.split(f"{fix:36} {NO_APPLY}\n", 1)[1].splitlines()[0]
    assert "patch" in below  # why: the patch tool's own words
    assert no_container_left(image), (containers_of(image), _before)


@pytest.mark.docker
@pytest.mark.upstream
def test_dry_run_reads_nothing_and_errors_are_one_line(bases):
    image, _ = bases["match"]
    dry = verify("--base", image, "--dry-run")
    assert dry.returncode == 0 and "docker cp CID:SITE/" in dry.stdout and "docker rm --force CID" in dry.stdout
    assert no_container_left(image), (containers_of(image), _before)
    wrong_site = verify("--base", image, "--site", "/opt/nowhere")
    assert wrong_site.returncode == 2 and wrong_site.stderr.startswith("error: no site-packages")
    assert "Traceback" not in wrong_site.stderr and no_container_left(image)
    absent = verify("--base", f"{TEST_REPO}/no-such-base:never")
    assert absent.returncode == 2 and "error: no image" in absent.stderr and "Traceback" not in absent.stderr
    no_engine = verify("--base", image, env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert no_engine.returncode == 3 and no_engine.stderr.startswith("error: no Docker daemon answers")


@pytest.mark.docker
@pytest.mark.upstream
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_check_removes_its_container(bases, sig):
    image, _ = bases["match"]
    proc = subprocess.Popen([sys.executable, "-m", "invoke", "fixes.verify", "--base", image], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while no_container_left(image):  # until the created container exists
            assert proc.poll() is None and time.monotonic() < deadline, "the check ended before it was interrupted"
            time.sleep(0.02)
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode != 0
    assert no_container_left(image), (containers_of(image), _before)


@pytest.mark.parametrize("data, why", [
    (b"import os\n", ""),
    ("# café\n".encode(), ""),
    (b"", ""),
    (b"import os\n\x00\x01", "binary (a NUL byte at offset 10)"),
    ("# café\n".encode("latin-1"), "not UTF-8 (byte 0xe9 at offset 5)"),
])
def test_not_source(data, why):
    assert fix_base.not_source(data) == why


@pytest.fixture(scope="module")
def odd_bases(made_images, upstream_cache, tmp_path_factory):
    """{kind: (image, package/path)}: a target file that is binary, not UTF-8, or bigger than any source."""
    [target] = fixes.load_fix("async-discard-counter").targets
    [path] = target.files
    tails = {"binary": b"\x00\x01\x02", "latin1": "# café\n".encode("latin-1"),
             "huge": b"#\n" * (fix_base.MAX_FILE_BYTES // 2 + 1)}

    def edit(tail):
        def append(site):
            with open(site / target.package / path, "ab") as f:
                f.write(tail)
        return append

    out = {kind: (base_image(tmp_path_factory, made_images, kind, edit(tail)), f"{target.package}/{path}")
           for kind, tail in tails.items()}
    yield out
    for tag, _ in out.values():  # what a run that did not refuse wrote
        for folder in ("fixes-verify", "fixes-rebase"):
            shutil.rmtree(ROOT / "build" / folder / fix_base.slug(tag), ignore_errors=True)


@pytest.mark.docker
@pytest.mark.upstream
@pytest.mark.parametrize("task", ["fixes.verify", "fixes.rebase"])
@pytest.mark.parametrize("kind, said", [("binary", "is binary (a NUL byte at offset"),
                                        ("latin1", "is not UTF-8 (byte 0xe9 at offset"),
                                        ("huge", "bytes, over the 8388608 a target file may have; not read")])
def test_a_target_file_that_is_no_source_is_refused(odd_bases, task, kind, said):
    image, name = odd_bases[kind]
    lab = ["--no-lab"] if task == "fixes.rebase" else []
    got = subprocess.run([sys.executable, "-m", "invoke", task, "--base", image, *lab], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert got.returncode == 2, got.stdout + got.stderr
    assert "Traceback" not in got.stderr
    error = next(line for line in got.stderr.splitlines() if line.startswith("error: "))
    assert name in error and said in error, got.stderr
    assert no_container_left(image), (containers_of(image), _before)
    for folder in ("fixes-verify", "fixes-rebase"):
        assert not (ROOT / "build" / folder / fix_base.slug(image)).exists()  # refused before anything is written
