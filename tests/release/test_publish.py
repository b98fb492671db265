"""cookbook/release/publish.py: the refusals as a table, then `publish` against real registries on 127.0.0.1
(Debian's docker-registry, one of them with htpasswd auth), each push read back through the
registry's HTTP API by tests/registries.py rather than by the code under test.

The image the tests publish is a stand-in build: the only kind this machine can make. It is built
from a test recipe (tmp tree, base.digest set) with a test pack whose every fix is written, passes
the real image checks, and goes out with `allow_standin=True`, which only the library takes (the
task has no such switch) and which keeps `-standin` on every tag. Its labels are never edited."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cookbook.host import engine
from cookbook.host.errors import PublishError
from cookbook.image import imagecheck, steps
from cookbook.recipe import recipes
from cookbook.release import publish, supply

from .. import packs, registries
from ..conftest import TEST_REPO, variant
from ..test_tasks import invoke

IMAGE_ID = "sha256:" + "1" * 64
OTHER_ID = "sha256:" + "2" * 64
BASE = "sha256:" + "3" * 64
GOOD = {"cookbook.standin": "false", "cookbook.fixes.not-written": "", "cookbook.recipe": "r",
        "cookbook.recipe.hash": "h" * 64, "org.opencontainers.image.base.digest": BASE,
        "cookbook.publishable": "true"}


def facts(labels=None, remote=None, base=BASE):
    return publish.Facts("r", "h" * 64, base, IMAGE_ID, {**GOOD, **(labels or {})}, remote, "reg/r:v1")


@pytest.mark.parametrize("f,allow_standin,words", [
    (facts(), False, []),
    (facts(remote=IMAGE_ID), False, []),  # the same image again: no refusal (a no-op)
    (facts({"cookbook.standin": "true"}), False, ["stand-in image"]),
    (facts({"cookbook.standin": "true"}), True, []),
    ({**facts().__dict__, "labels": {k: v for k, v in GOOD.items() if k != "cookbook.standin"}}, False,
     ["stand-in image (cookbook.standin=<missing>)"]),
    (facts({"cookbook.fixes.not-written": "gdn-prefix-cache"}), False,
     ["not all written (cookbook.fixes.not-written: gdn-prefix-cache)"]),
    (facts({"cookbook.allow-unwritten-fixes": "true"}), False, ["--allow-unwritten-fixes"]),
    (facts({"cookbook.allow-unwritten-fixes": "false"}), False, []),
    (facts({"cookbook.publishable": "false"}), False, ["may not be published (cookbook.publishable=false)"]),
    ({**facts().__dict__, "labels": {k: v for k, v in GOOD.items() if k != "cookbook.publishable"}}, False,
     ["may not be published (cookbook.publishable=<missing>)"]),
    (facts({"cookbook.recipe.hash": "x" * 64}), False, ["another version of r"]),
    (facts({"cookbook.recipe": "other"}), False, ["another recipe"]),
    (facts(base=None), False, ["does not pin its base by digest"]),
    (facts({"org.opencontainers.image.base.digest": OTHER_ID}), False, ["is not the recipe's base.digest"]),
    (facts(remote=OTHER_ID), False, ["reg/r:v1 already holds a different image"]),
    (facts({"cookbook.standin": "true", "cookbook.fixes.not-written": "a,b"}, base=None), False,
     ["stand-in", "not all written", "base by digest"]),
])
def test_refusals(f, allow_standin, words):
    f = f if isinstance(f, publish.Facts) else publish.Facts(**f)
    found = publish.refusals(f, allow_standin=allow_standin)
    assert len(found) == len(words), found
    for word, reason in zip(words, found, strict=True):
        assert word in reason


SUITE = "5" * 64
REV = "c" * 40


def report(**over):
    good = {"image_id": IMAGE_ID, "recipe_hash": "h" * 64, "suite_sha256": SUITE, "standin": False,
            "revision": REV, "pytest_exit": 0, "passed": True,
            "checks": [{"check": "test_labels.py::test_a", "outcome": "passed"},
                       {"check": "test_manifest.py::test_b", "outcome": "passed"}]}
    return {**good, **over}


REVISION = {"org.opencontainers.image.revision": REV}


@pytest.mark.parametrize("rep,labels,allow_standin,words", [
    (report(), REVISION, False, []),
    # A forged evidence file of two fields (passed, image_id): every missing fact is a reason.
    ({"passed": True, "image_id": IMAGE_ID}, REVISION, False,
     ["another version of the recipe", "another suite", "stand-in image", "no check ran", "pytest exit None",
      "checks ran from an unknown checkout"]),
    (report(image_id=OTHER_ID), REVISION, False, ["ran on image sha256:222222222222"]),
    (report(suite_sha256="6" * 64), REVISION, False, ["another suite (666666666666), not this checkout's"]),
    (report(checks=[]), REVISION, False, ["no check ran"]),
    (report(checks=[{"check": "a", "outcome": "failed"}], passed=False, pytest_exit=1), REVISION, False,
     ["checks not passed: a failed", "did not pass (pytest exit 1)"]),
    (report(checks=[{"check": "g", "outcome": "skipped"}]), REVISION, False, ["checks not passed: g skipped"]),
    (report(standin=True, checks=[{"check": "g", "outcome": "skipped"}]), REVISION, True, []),
    (report(standin=True), REVISION, False, ["checks were of a stand-in image"]),
    (report(), {}, False, ["image was built from an unknown checkout"]),
    (report(), {"org.opencontainers.image.revision": REV + "-dirty"}, False,
     ["image was built from an uncommitted (ccc"]),
    (report(revision=REV + "-dirty"), REVISION, False, ["checks ran from an uncommitted"]),
])
def test_evidence_problems(rep, labels, allow_standin, words):
    found = publish.evidence_problems(rep, IMAGE_ID, "h" * 64, SUITE, labels, allow_standin=allow_standin)
    assert len(found) == len(words), found
    for word, reason in zip(words, found, strict=True):
        assert word in reason


@pytest.mark.parametrize("standin,moving", [
    (False, ["v0.26.0", "latest"]),
    (True, ["v0.26.0-standin", "latest-standin"]),
])
def test_remote_tags(standin, moving):
    assert publish.remote_tags("v0.26.0-abcd1234", "v0.26.0", standin) == ("v0.26.0-abcd1234", moving)


@pytest.mark.parametrize(("labels", "standin", "tag"), [
    ({"cookbook.content.hash": "abcdef1234567890"}, False, "v0.26.0-abcdef12"),
    ({"cookbook.content.hash": "abcdef1234567890"}, True, "v0.26.0-abcdef12-standin"),
    (None, False, "v0.26.0-<sha256>"),  # a dry run with no such local image: where the hash goes
    ({}, False, None), ({"cookbook.content.hash": ""}, False, None)])
def test_content_tag_from_the_labels(labels, standin, tag):
    """One content tag for the push and its dry run, from the image's own label."""
    loaded = recipes.load("qwen3.5-27b-fp8")
    if tag is None:
        with pytest.raises(PublishError, match="no cookbook.content.hash label"):
            publish.content_tag_from("img", labels, loaded, standin)
    else:
        assert publish.content_tag_from("img", labels, loaded, standin) == tag


def test_dry_run_names_no_secret_and_pushes_nothing(monkeypatch, capsys):
    monkeypatch.setenv("COOKBOOK_REGISTRY_USER", "me")
    monkeypatch.setenv("COOKBOOK_REGISTRY_PASSWORD", "dry-run-secret")
    publish.publish("qwen3.5-27b-fp8", "127.0.0.1:1/ns", dry_run=True)
    out = capsys.readouterr().out
    assert "docker://127.0.0.1:1/ns/qwen3.5-27b-fp8:v0.26.0-" in out and "--dest-tls-verify=false" in out
    assert "dry-run-secret" not in out and "COOKBOOK_REGISTRY_USER" in out


def test_an_image_not_built_is_named_with_the_command_that_builds_it(docker_engine):
    out = invoke("publish", "--recipe", "qwen3.6-27b-fp8", "--registry", "127.0.0.1:1",
                 "--repo", "cookbook-never-built")
    assert out.returncode == 2 and "Traceback" not in out.stderr  # a name to mend, as for every missing image
    assert "no local image cookbook-never-built/qwen3.6-27b-fp8:v0.26.0\n" in out.stderr
    assert "invoke build --recipe qwen3.6-27b-fp8" in out.stderr


# --- against real registries ---------------------------------------------------------------------

USER, PASSWORD = "cookbook", "right-horse-battery"


@pytest.fixture(scope="session")
def publishable(docker_engine, upstream_cache, tmp_path_factory):
    """(recipe path, Built): a stand-in build of a test recipe whose fixes are all written, with passing
    image checks. Tests that load the recipe set its pack with the `pack` fixture."""
    tmp = tmp_path_factory.mktemp("publishable")
    pack = packs.make(tmp, only=True)
    data = variant({"fixes.opt_in": [], "fixes.why": {}, "fixes.not_needed": {}, "serve.enable_prefix_caching": False,
                    "base.digest": BASE})  # a test recipe: never built FROM this digest (stand-in base)
    path = tmp / "recipes" / "Test" / "Publish-Test" / "recipe.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COOKBOOK_FIXES_DIR", str(pack))
        mp.setattr(steps, "revision", lambda: COMMITTED)
        built = steps.build_recipe(str(path), use_standin=True, repo=TEST_REPO)
        loaded = recipes.load(path)
        result = imagecheck.run(loaded, built.tags[0], steps.base_for(loaded, True))
        assert result.passed, result.evidence
    yield path, built
    engine.docker("rmi", *built.tags, check=False)


# The checkout as CI has it, committed: publish refuses an image built, or checked, from an unknown or
# uncommitted checkout, and a developer's worktree running these tests may well be uncommitted.
COMMITTED = "0123456789abcdef" * 2 + "01234567"


@pytest.fixture
def pack(publishable, monkeypatch) -> str:
    """The publishable recipe's fix pack as the cookbook's, and a committed checkout, for one test."""
    folder = str(Path(str(publishable[0])).parents[3] / "fixes")
    monkeypatch.setenv("COOKBOOK_FIXES_DIR", folder)
    monkeypatch.setattr(steps, "revision", lambda: COMMITTED)
    return folder


@pytest.fixture(scope="session")
def auth_registry(tmp_path_factory):
    with registries.running(tmp_path_factory.mktemp("registry-auth"), USER, PASSWORD) as server:
        yield server


@pytest.fixture
def env_creds(monkeypatch, tmp_path):
    from cookbook.host.paths import cache_dir

    monkeypatch.setenv("COOKBOOK_CACHE", str(cache_dir()))  # the evidence stays where it was written
    monkeypatch.setenv("HOME", str(tmp_path))  # no Docker config of the machine's
    monkeypatch.delenv("DOCKER_CONFIG", raising=False)
    monkeypatch.setenv("COOKBOOK_REGISTRY_USER", USER)
    monkeypatch.setenv("COOKBOOK_REGISTRY_PASSWORD", PASSWORD)


def docker_config(tmp_path, host, user, password) -> Path:
    import base64

    folder = tmp_path / "docker-config"
    folder.mkdir()
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    (folder / "config.json").write_text(json.dumps({"auths": {host: {"auth": token}}}))
    return folder


def test_publish_pushes_reads_back_and_attaches(publishable, pack, auth_registry, env_creds, monkeypatch, tmp_path):
    path, built = publishable
    done = publish.publish(str(path), f"{auth_registry.host}/team", standin=True, repo=TEST_REPO,
                           allow_standin=True)
    repo = "team/publish-test"
    content = built.tags[0].rsplit(":", 1)[1]
    assert done.tags == [content, "v0.26.0-standin", "latest-standin"]
    # Read back by a second client: every tag serves the one digest, whose config is the image.
    served = {tag: auth_registry.manifest(repo, tag) for tag in done.tags}
    assert {digest for digest, _ in served.values()} == {done.digest}
    manifest = served[content][1]
    assert manifest["config"]["digest"] == built.image_id
    config = json.loads(auth_registry.blob(repo, manifest["config"]["digest"]))
    local = engine.inspect(built.image_id)["Config"]["Labels"]
    assert config["config"]["Labels"] == local and local["cookbook.recipe"] == "publish-test"
    # The SBOM and the provenance, each an artifact whose subject is the image manifest.
    for kind, media_type, saved in (("sbom", supply.SBOM_MEDIA_TYPE, done.sbom),
                                    ("prov", supply.PROVENANCE_MEDIA_TYPE, done.provenance)):
        _, art = auth_registry.manifest(repo, supply.attachment_tag(done.digest, kind))
        assert art["subject"]["digest"] == done.digest
        assert art["config"]["mediaType"] == supply.ARTIFACT_TYPES[kind]
        (layer,) = art["layers"]
        assert layer["mediaType"] == media_type
        assert auth_registry.blob(repo, layer["digest"]) == saved.read_bytes()
    sbom = json.loads(done.sbom.read_text())
    assert sbom["spdxVersion"].startswith("SPDX-") and {"vllm", "vllm-gaudi"} <= {p["name"] for p in sbom["packages"]}
    prov = json.loads(done.provenance.read_text())
    assert prov["subject"][0]["digest"]["sha256"] == done.digest.removeprefix("sha256:")
    assert prov["predicate"]["buildDefinition"]["externalParameters"]["recipe_sha256"] == local["cookbook.recipe.hash"]
    assert prov["predicate"]["runDetails"]["byproducts"][0]["annotations"]["passed"] is True

    # Again, with the credentials from a Docker config this time: nothing is written.
    monkeypatch.delenv("COOKBOOK_REGISTRY_USER")
    monkeypatch.delenv("COOKBOOK_REGISTRY_PASSWORD")
    monkeypatch.setenv("DOCKER_CONFIG", str(docker_config(tmp_path, auth_registry.host, USER, PASSWORD)))
    before = sorted(auth_registry.tags(repo))
    again = publish.publish(str(path), f"{auth_registry.host}/team", standin=True, repo=TEST_REPO,
                            allow_standin=True)
    assert again.digest == done.digest and again.changed == []
    assert sorted(auth_registry.tags(repo)) == before


def test_wrong_credentials_are_named_never_shown(publishable, pack, auth_registry, env_creds, monkeypatch):
    path, _ = publishable
    monkeypatch.setenv("COOKBOOK_REGISTRY_PASSWORD", "wrong-horse-staple")
    with pytest.raises(PublishError) as err:
        publish.publish(str(path), f"{auth_registry.host}/wrong", standin=True, repo=TEST_REPO, allow_standin=True)
    text = str(err.value)
    assert f"registry {auth_registry.host} refused the credentials from COOKBOOK_REGISTRY_USER" in text
    assert "docker login" in text and "wrong-horse-staple" not in text


def test_a_content_tag_holding_another_image_is_refused(publishable, pack, auth_registry, env_creds, monkeypatch,
                                                         tmp_path):
    path, built = publishable
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text("FROM scratch\nCOPY x /x\n")
    (tmp_path / "ctx" / "x").write_text("another image\n")
    other = tmp_path / "iid"
    engine.docker("build", "-q", "--iidfile", str(other), str(tmp_path / "ctx"))
    other_id = other.read_text().strip()
    from cookbook.release import registry

    content = built.tags[0].rsplit(":", 1)[1]
    try:
        with registry.credentials(auth_registry.host) as creds:
            registry.Registry(f"{auth_registry.host}/taken", creds).push_image(
                other_id, f"{auth_registry.host}/taken/publish-test:{content}")
        with pytest.raises(PublishError, match="already holds a different image") as err:
            publish.publish(str(path), f"{auth_registry.host}/taken", standin=True, repo=TEST_REPO,
                            allow_standin=True)
        assert other_id[:19] in str(err.value) and built.image_id[:19] in str(err.value)
        digest, manifest = auth_registry.manifest("taken/publish-test", content)
        assert manifest["config"]["digest"] == other_id  # left as it was
        assert auth_registry.manifest("taken/publish-test", "latest-standin") is None
    finally:
        engine.docker("rmi", other_id, check=False)


def test_the_task_refuses_a_standin_image_with_every_reason(publishable, pack, auth_registry, tmp_path):
    """Through `invoke publish` as a user runs it: the stand-in build of the real recipe (no written
    fixes, no checks run on a relabelled copy, no base digest) is refused with all its reasons and
    nothing reaches the registry. The allow-unwritten label is refused too."""
    path, built = publishable
    ctx = tmp_path / "relabel"
    ctx.mkdir()
    # A test-only image: the publishable one plus the label --allow-unwritten-fixes sets.
    (ctx / "Dockerfile").write_text(f"FROM {built.tags[0]}\nLABEL cookbook.allow-unwritten-fixes=true\n")
    iid = tmp_path / "iid"
    engine.docker("build", "-q", "--iidfile", str(iid), str(ctx))
    relabelled = iid.read_text().strip()
    try:
        out = subprocess.run(
            [str(Path(sys.executable).parent / "invoke"), "publish", "--recipe", str(path), "--registry",
             f"{auth_registry.host}/refused", "--image", relabelled, "--repo", TEST_REPO, "--standin"],
            capture_output=True, text=True, timeout=120,
            env={**__import__("os").environ, "COOKBOOK_FIXES_DIR": pack,
                 "COOKBOOK_REGISTRY_USER": USER, "COOKBOOK_REGISTRY_PASSWORD": PASSWORD},
            cwd=Path(__file__).parents[2])
    finally:
        engine.docker("rmi", relabelled, check=False)
    assert out.returncode == 1 and out.stderr.startswith("error: ") and "Traceback" not in out.stderr
    for reason in ("stand-in image", "--allow-unwritten-fixes"):
        assert reason in out.stderr
    assert PASSWORD not in out.stderr + out.stdout
    assert auth_registry.tags("refused/publish-test") == []


def test_the_real_recipe_standin_build_is_refused(publishable, auth_registry, lacking_gdn):
    """The stand-in build of qwen3.5-27b-fp8 itself, on a pack lacking gdn-prefix-cache: stand-in,
    fixes not written, no base digest."""
    built = steps.build_recipe("qwen3.5-27b-fp8", use_standin=True, repo=TEST_REPO)
    out = invoke("publish", "--recipe", "qwen3.5-27b-fp8", "--registry", f"{auth_registry.host}/real",
                 "--standin", "--repo", TEST_REPO)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    for reason in ("stand-in image", "not all written", "does not pin its base by digest"):
        assert reason in out.stderr, out.stderr
    assert built.image_id[:19] in out.stderr
    assert auth_registry.tags("real/qwen3.5-27b-fp8") == []


def test_a_half_done_publish_is_completed_without_pushing_again(publishable, pack, auth_registry, env_creds):
    """The content tag is there (a run that stopped after its first push): publishing again adds the
    moving tags only."""
    path, built = publishable
    from cookbook.release import registry

    content = built.tags[0].rsplit(":", 1)[1]
    with registry.credentials(auth_registry.host) as creds:
        first = registry.Registry(f"{auth_registry.host}/half", creds).push_image(
            built.image_id, f"{auth_registry.host}/half/publish-test:{content}")
    done = publish.publish(str(path), f"{auth_registry.host}/half", standin=True, repo=TEST_REPO,
                           allow_standin=True, sbom=False)
    assert done.digest == first, (done, first)
    assert done.changed == ["v0.26.0-standin", "latest-standin"], done
    assert sorted(auth_registry.tags("half/publish-test")) == sorted(done.tags)


def docker_build(tmp_path: Path, name: str, dockerfile: str, files: dict[str, str] | None = None) -> str:
    """A test-only image from DOCKERFILE; returns its id."""
    ctx = tmp_path / name
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(dockerfile)
    for rel, text in (files or {}).items():
        (ctx / rel).write_text(text)
    iid = tmp_path / f"{name}.iid"
    engine.docker("build", "-q", "--iidfile", str(iid), str(ctx))
    return iid.read_text().strip()


def remove_image(image_id: str) -> None:
    left = engine.docker("ps", "-aq", "--filter", f"ancestor={image_id}", check=False).stdout.split()
    if left:
        engine.docker("rm", "-f", *left, check=False)
    engine.docker("rmi", "-f", image_id, check=False)


def test_forged_evidence_and_labels_do_not_publish_a_plain_binary(publishable, pack, auth_registry, env_creds,
                                                                  tmp_path):
    """A forgery: an image that is not a cookbook image (one plain file, no shell, no Python) with
    the labels of a good build copied onto it, and a hand-written two-field evidence file saying it
    passed. publish runs the checks itself on that image and refuses it; nothing reaches the registry."""
    path, built = publishable
    labels = engine.inspect(built.image_id)["Config"]["Labels"]
    label_lines = "".join(f"LABEL {json.dumps(k)}={json.dumps(v)}\n" for k, v in labels.items())
    forged = docker_build(tmp_path, "forged", "FROM scratch\nCOPY payload /payload\n" + label_lines,
                          {"payload": "\x7fELF not a cookbook image\n"})
    try:
        assert engine.inspect(forged)["Config"]["Labels"] == labels
        evidence = imagecheck.evidence_path(forged)
        evidence.parent.mkdir(parents=True, exist_ok=True)
        evidence.write_text(json.dumps({"passed": True, "image_id": forged}))
        with pytest.raises(PublishError, match="image checks") as err:
            publish.publish(str(path), f"{auth_registry.host}/forged", image=forged, standin=True, repo=TEST_REPO,
                            allow_standin=True)
        assert forged[:19] in str(err.value)
        assert auth_registry.tags("forged/publish-test") == []
    finally:
        remove_image(forged)
        import shutil

        shutil.rmtree(imagecheck.evidence_path(forged).parent, ignore_errors=True)


def test_a_name_repointed_during_publish_cannot_mix_images(publishable, pack, auth_registry, env_creds, tmp_path,
                                                          monkeypatch):
    """A concurrent build re-points the name right after publish looks it up: what goes out, under the
    content tag of the image looked up, is that image and only it."""
    path, built = publishable
    other = docker_build(tmp_path, "other", f"FROM {built.tags[0]}\nLABEL cookbook.test.other=yes\n")
    name = f"{TEST_REPO}/repointed:moving"
    engine.docker("tag", built.image_id, name)
    looked_up = []
    real_inspect = engine.inspect

    def inspect_then_repoint(ref):
        info = real_inspect(ref)
        if ref == name:
            looked_up.append(info["Id"])
            engine.docker("tag", other, name)  # the concurrent build, right after the lookup
        return info

    monkeypatch.setattr(engine, "inspect", inspect_then_repoint)
    try:
        done = publish.publish(str(path), f"{auth_registry.host}/repoint", image=name, standin=True, repo=TEST_REPO,
                               allow_standin=True, sbom=False)
    finally:
        monkeypatch.setattr(engine, "inspect", real_inspect)
        engine.docker("rmi", name, check=False)
        remove_image(other)
    assert looked_up == [built.image_id]
    assert done.tags[0] == built.tags[0].rsplit(":", 1)[1]
    for tag in done.tags:
        digest, manifest = auth_registry.manifest("repoint/publish-test", tag)
        assert digest == done.digest and manifest["config"]["digest"] == built.image_id, tag


def test_image_checks_check_the_image_they_file_evidence_under(publishable, pack, tmp_path, monkeypatch):
    """`invoke test` the same way: the name is re-pointed to a tampered image right after the lookup; the
    checks still run on the image looked up, whose id the evidence names."""
    path, built = publishable
    tampered = docker_build(tmp_path, "tampered", f"FROM {built.tags[0]}\nUSER root\n"
                            "RUN echo tampered >> /opt/cookbook/manifest.json\n")
    name = f"{TEST_REPO}/repointed-test:moving"
    engine.docker("tag", built.image_id, name)
    real_inspect = engine.inspect

    def inspect_then_repoint(ref):
        info = real_inspect(ref)
        if ref == name:
            engine.docker("tag", tampered, name)
        return info

    monkeypatch.setattr(engine, "inspect", inspect_then_repoint)
    loaded = recipes.load(path)
    try:
        result = imagecheck.run(loaded, name, steps.base_for(loaded, True))
    finally:
        monkeypatch.setattr(engine, "inspect", real_inspect)
        engine.docker("rmi", name, check=False)
        remove_image(tampered)
    assert result.report["image_id"] == built.image_id and result.evidence == imagecheck.evidence_path(built.image_id)
    assert result.passed, [c for c in result.report["checks"] if c["outcome"] == "failed"]
    assert result.report["suite_sha256"] == imagecheck.suite_hash() and result.report["revision"] == COMMITTED


def test_moving_tags_move_last(publishable, pack, auth_registry, env_creds, tmp_path):
    """A failure after the push leaves the version tag and latest unmoved: first the SBOM cannot be
    written (its path is a folder), then the digest file cannot (same). --no-moving-tags pushes, attaches
    and writes the digest file and moves nothing; publishing the same image again then moves the moving
    tags and nothing else."""
    path, built = publishable
    repo = "late/publish-test"
    content = built.tags[0].rsplit(":", 1)[1]
    sbom_file = imagecheck.evidence_path(built.image_id).parent / "sbom.spdx.json"
    saved = sbom_file.read_bytes() if sbom_file.is_file() else None
    sbom_file.unlink(missing_ok=True)
    sbom_file.mkdir(parents=True)
    try:
        with pytest.raises(OSError):
            publish.publish(str(path), f"{auth_registry.host}/late", standin=True, repo=TEST_REPO, allow_standin=True)
    finally:
        sbom_file.rmdir()
        if saved is not None:
            sbom_file.write_bytes(saved)
    assert auth_registry.tags(repo) == [content]  # pushed, nothing attached, nothing moved
    with pytest.raises(OSError):
        publish.publish(str(path), f"{auth_registry.host}/late", standin=True, repo=TEST_REPO, allow_standin=True,
                        digest_file=str(tmp_path))
    attached = [t for t in auth_registry.tags(repo) if t.startswith("sha256-")]
    assert len(attached) == 2 and sorted(auth_registry.tags(repo)) == sorted([content, *attached])

    digest_file = tmp_path / "pushed.txt"
    done = publish.publish(str(path), f"{auth_registry.host}/late", standin=True, repo=TEST_REPO, allow_standin=True,
                           moving_tags=False, digest_file=str(digest_file))
    assert digest_file.read_text() == f"{auth_registry.host}/{repo}@{done.digest}\n"
    assert done.tags == [content] and auth_registry.manifest(repo, "latest-standin") is None
    again = publish.publish(str(path), f"{auth_registry.host}/late", standin=True, repo=TEST_REPO, allow_standin=True)
    assert again.changed == ["v0.26.0-standin", "latest-standin"]
    assert {auth_registry.manifest(repo, t)[0] for t in again.tags} == {done.digest}
