"""cookbook/publish.py: the refusals as a table, then `publish` against real registries on 127.0.0.1
(Debian's docker-registry, one of them with htpasswd auth), each push read back through the
registry's HTTP API by tests/registries.py rather than by the code under test.

The image the tests publish is a stand-in build: the only kind this machine can make. It is built
from a test recipe (tmp tree, base.digest set) with a test pack whose every fix is written, passes
the real image checks, and goes out with `allow_standin=True`, which only the library takes (the
task has no such switch) and which keeps `-standin` on every tag. Its labels are never edited."""

import json
import subprocess
from pathlib import Path

import pytest

from cookbook import engine, imagecheck, publish, recipes, steps, supply
from cookbook.errors import PublishError

from . import packs, registries
from .conftest import TEST_REPO, variant
from .test_tasks import invoke

IMAGE_ID = "sha256:" + "1" * 64
OTHER_ID = "sha256:" + "2" * 64
BASE = "sha256:" + "3" * 64
GOOD = {"cookbook.standin": "false", "cookbook.fixes.not-written": "", "cookbook.recipe": "r",
        "cookbook.recipe.hash": "h" * 64, "org.opencontainers.image.base.digest": BASE,
        "cookbook.publishable": "true"}


def facts(labels=None, checks=None, remote=None, base=BASE):
    return publish.Facts("r", "h" * 64, base, IMAGE_ID, {**GOOD, **(labels or {})}, checks, remote, "reg/r:v1")


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
    (facts(checks="image sha256:1 has no image-check result"), False,
     ["checks have not passed: image sha256:1 has no"]),
    (facts({"cookbook.recipe.hash": "x" * 64}), False, ["another version of r"]),
    (facts({"cookbook.recipe": "other"}), False, ["another recipe"]),
    (facts(base=None), False, ["does not pin its base by digest"]),
    (facts({"org.opencontainers.image.base.digest": OTHER_ID}), False, ["is not the recipe's base.digest"]),
    (facts(remote=OTHER_ID), False, ["reg/r:v1 already holds a different image"]),
    (facts({"cookbook.standin": "true", "cookbook.fixes.not-written": "a,b"}, checks="failed", base=None), False,
     ["stand-in", "not all written", "checks have not passed", "base by digest"]),
])
def test_refusals(f, allow_standin, words):
    f = f if isinstance(f, publish.Facts) else publish.Facts(**f)
    found = publish.refusals(f, allow_standin=allow_standin)
    assert len(found) == len(words), found
    for word, reason in zip(words, found, strict=True):
        assert word in reason


@pytest.mark.parametrize("standin,moving", [
    (False, ["v0.26.0", "latest"]),
    (True, ["v0.26.0-standin", "latest-standin"]),
])
def test_remote_tags(standin, moving):
    assert publish.remote_tags("v0.26.0-abcd1234", "v0.26.0", standin) == ("v0.26.0-abcd1234", moving)


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
    assert out.returncode == 1 and "Traceback" not in out.stderr
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
        built = steps.build_recipe(str(path), use_standin=True, repo=TEST_REPO)
        loaded = recipes.load(path)
        result = imagecheck.run(loaded, built.tags[0], steps.base_for(loaded, True))
        assert result.passed, result.evidence
    yield path, built
    engine.docker("rmi", *built.tags, check=False)


@pytest.fixture
def pack(publishable, monkeypatch) -> str:
    """The publishable recipe's fix pack as the cookbook's, for one test."""
    folder = str(Path(str(publishable[0])).parents[3] / "fixes")
    monkeypatch.setenv("COOKBOOK_FIXES_DIR", folder)
    return folder


@pytest.fixture(scope="session")
def auth_registry(tmp_path_factory):
    with registries.running(tmp_path_factory.mktemp("registry-auth"), USER, PASSWORD) as server:
        yield server


@pytest.fixture
def env_creds(monkeypatch, tmp_path):
    from cookbook.paths import cache_dir

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
    from cookbook import registry

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
    # A test-only image: the publishable one plus the label issue 7's --allow-unwritten-fixes sets.
    (ctx / "Dockerfile").write_text(f"FROM {built.tags[0]}\nLABEL cookbook.allow-unwritten-fixes=true\n")
    iid = tmp_path / "iid"
    engine.docker("build", "-q", "--iidfile", str(iid), str(ctx))
    relabelled = iid.read_text().strip()
    try:
        out = subprocess.run(
            [str(Path(__file__).parent.parent / ".venv/bin/invoke"), "publish", "--recipe", str(path), "--registry",
             f"{auth_registry.host}/refused", "--image", relabelled, "--repo", TEST_REPO, "--standin"],
            capture_output=True, text=True, timeout=120,
            env={**__import__("os").environ, "COOKBOOK_FIXES_DIR": pack,
                 "COOKBOOK_REGISTRY_USER": USER, "COOKBOOK_REGISTRY_PASSWORD": PASSWORD},
            cwd=Path(__file__).parent.parent)
    finally:
        engine.docker("rmi", relabelled, check=False)
    assert out.returncode == 1 and out.stderr.startswith("error: ") and "Traceback" not in out.stderr
    for reason in ("stand-in image", "--allow-unwritten-fixes", "image checks have not passed"):
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
    from cookbook import registry

    content = built.tags[0].rsplit(":", 1)[1]
    with registry.credentials(auth_registry.host) as creds:
        first = registry.Registry(f"{auth_registry.host}/half", creds).push_image(
            built.image_id, f"{auth_registry.host}/half/publish-test:{content}")
    done = publish.publish(str(path), f"{auth_registry.host}/half", standin=True, repo=TEST_REPO,
                           allow_standin=True, sbom=False)
    assert done.digest == first, (done, first)
    assert done.changed == ["v0.26.0-standin", "latest-standin"], done
    assert sorted(auth_registry.tags("half/publish-test")) == sorted(done.tags)
