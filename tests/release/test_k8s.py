"""invoke k8s: manifests rendered from a real stand-in image of qwen3.5-27b-fp8 (built on the engine, read
with the Docker SDK), checked against what the image says when asked another way (docker inspect, cat
of its manifest), and validated against the Kubernetes and KServe schemas. No cluster runs here."""

import copy
import json
import os
import subprocess
import sys

import pytest
import yaml

from cookbook.host import cli, engine
from cookbook.host.errors import ManifestError, UsageError
from cookbook.host.names import HF_CACHE_IN_IMAGE
from cookbook.host.paths import ROOT
from cookbook.image import steps
from cookbook.recipe import recipes
from cookbook.release import k8s

RID = "qwen3.5-27b-fp8"
REPO = "cookbook-test-k8s"  # this module's own image tags, removed at the end


@pytest.fixture(scope="module")
def built(docker_engine, upstream_cache):
    image = steps.build_recipe(RID, use_standin=True, repo=REPO)
    yield image
    for tag in image.tags:
        engine.docker("rmi", tag, check=False)  # untags; the layers stay shared with the other tags


@pytest.fixture(scope="module")
def truth(built):
    """The image as docker inspect and its own manifest file say, independent of k8s.read_image."""
    config = engine.inspect(built.image_id)["Config"]
    manifest = json.loads(engine.docker("run", "--rm", "--entrypoint", "cat", built.image_id,
                                        k8s.MANIFEST_IN_IMAGE).stdout)
    return config, manifest


@pytest.fixture(scope="module")
def facts(built):
    return k8s.read_image(built.tags[0])


def digest_ref(built) -> str:
    # A local build has no registry digest; its image id has the same form and stands in for one.
    return f"registry.example/{RID}@{built.image_id}"


def rendered(built, facts, **kw):
    opts = k8s.Options(image=digest_ref(built), **kw)
    return k8s.render(recipes.load(RID), facts, opts)


def containers(objects):
    if "deployment.yaml" in objects:
        return objects["deployment.yaml"]["spec"]["template"]["spec"]["containers"]
    return objects["servingruntime.yaml"]["spec"]["containers"]


@pytest.mark.docker
def test_facts_are_the_images(facts, truth):
    config, manifest = truth
    assert facts.port == manifest["port"] and f"{facts.port}/tcp" in config["ExposedPorts"]
    assert facts.health_path == manifest["health_path"] and facts.env == manifest["env"]
    assert facts.start_period_s * 10**9 == config["Healthcheck"]["StartPeriod"]
    assert facts.labels == config["Labels"] and facts.standin


MODES = [dict(replicas=1), dict(replicas=3), dict(replicas=1, kserve=True), dict(replicas=2, kserve=True)]


@pytest.mark.docker
@pytest.mark.parametrize("mode", MODES, ids=lambda m: f"{'kserve' if m.get('kserve') else 'plain'}-{m['replicas']}")
def test_manifests_agree_with_the_image(built, facts, truth, mode):
    config, manifest = truth
    objects = rendered(built, facts, env=(("VLLM_SKIP_WARMUP", "false"),), **mode)
    k8s.validate(objects)  # every object passes its schema
    (c,) = containers(objects)
    assert c["image"] == digest_ref(built)
    assert c["ports"] == [{"name": "http", "containerPort": manifest["port"], "protocol": "TCP"}]
    assert c["resources"]["limits"] == {"habana.ai/gaudi": str(recipes.load(RID).recipe.hardware.cards)}
    check = config["Healthcheck"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": manifest["health_path"], "port": "http"}
        assert c[probe]["timeoutSeconds"] * 10**9 == check["Timeout"]
    startup = c["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] * 10**9 >= check["StartPeriod"]
    assert c["livenessProbe"]["periodSeconds"] * 10**9 == check["Interval"]
    assert c["livenessProbe"]["failureThreshold"] == check["Retries"]
    env = {e["name"]: e for e in c["env"]}
    assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
        "name": "hf-token", "key": "token", "optional": True}}}  # by reference, never a value
    assert env["VLLM_SKIP_WARMUP"]["value"] == "false"  # the override given
    assert not (set(env) - {"HF_TOKEN", "VLLM_SKIP_WARMUP"}) & set(manifest["env"])  # the rest is in the image
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts == {"model-cache": HF_CACHE_IN_IMAGE, "dshm": "/dev/shm", "tmp": "/tmp"}  # docs/serving.md's list
    vols = {v["name"]: v for v in (objects.get("deployment.yaml", {}).get("spec", {}).get("template", {})
                                    .get("spec") or objects["servingruntime.yaml"]["spec"])["volumes"]}
    assert vols["dshm"]["emptyDir"] == {"medium": "Memory"} and vols["tmp"]["emptyDir"] == {}
    # Restricted: a read-only root, no privilege escalation, every capability dropped but SYS_NICE.
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"], "add": ["SYS_NICE"]},
                                    "seccompProfile": {"type": "RuntimeDefault"}}
    assert set(c["resources"]["requests"]) == {"cpu", "memory"}
    assert ("pdb.yaml" in objects) == (mode["replicas"] > 1)
    assert ("service.yaml" in objects) == (not mode.get("kserve"))
    if "service.yaml" in objects:
        assert objects["service.yaml"]["spec"]["ports"][0]["port"] == manifest["port"]
        assert objects["service.yaml"]["spec"]["selector"] == objects["deployment.yaml"]["spec"]["selector"][
            "matchLabels"]
    if mode.get("kserve"):
        predictor = objects["inferenceservice.yaml"]["spec"]["predictor"]
        assert predictor["minReplicas"] == predictor["maxReplicas"] == mode["replicas"]
        assert predictor["model"]["runtime"] == objects["servingruntime.yaml"]["metadata"]["name"]
    else:
        assert objects["deployment.yaml"]["spec"]["replicas"] == mode["replicas"]
    labels = config["Labels"]
    meta = next(iter(objects.values()))["metadata"]
    assert meta["annotations"]["cookbook.recipe.hash"] == labels["cookbook.recipe.hash"]


def sample(kserve: bool) -> dict[str, dict]:
    """Rendered without an image (facts as schema_samples makes them): for the validation table."""
    loaded = recipes.load(RID)
    facts = k8s.ImageFacts({"cookbook.recipe": RID}, 8000, "/health", {}, 1800, 30, 10, 3)
    return k8s.render(loaded, facts, k8s.Options("r.example/x@sha256:" + "a" * 64, replicas=2, kserve=kserve))


def first_container(objects):
    return containers(objects)[0]


BROKEN = [
    ("unknown field in a Deployment's container", False, "deployment.yaml",
     lambda o: first_container(o).update(cpus=2), "cpus"),
    ("a port as text", False, "service.yaml", lambda o: o["service.yaml"]["spec"]["ports"][0].update(port="http"),
     "spec.ports.0.port"),
    ("PDB without a selector's kind of value", False, "pdb.yaml",
     lambda o: o["pdb.yaml"]["spec"].update(selector="all"), "spec.selector"),
    ("replicas as text in an InferenceService", True, "inferenceservice.yaml",
     lambda o: o["inferenceservice.yaml"]["spec"]["predictor"].update(minReplicas="two"), "minReplicas"),
    ("unknown field in a ServingRuntime's container", True, "servingruntime.yaml",
     lambda o: first_container(o).update(gpus=1), "gpus"),
    ("a ServingRuntime container without a name", True, "servingruntime.yaml",
     lambda o: first_container(o).pop("name"), "'name' is a required property"),
]


@pytest.mark.parametrize("why,kserve,file,breakage,said", BROKEN, ids=[b[0] for b in BROKEN])
def test_validation_refuses(why, kserve, file, breakage, said):
    objects = sample(kserve)
    k8s.validate(copy.deepcopy(objects))  # unbroken, they pass
    breakage(objects)
    with pytest.raises(ManifestError) as err:
        k8s.validate(objects)
    assert f"{file}: " in str(err.value) and said in str(err.value)


def test_no_yaml_aliases_and_a_header():
    files = k8s.dump(recipes.load(RID), sample(False), "x@sha256:" + "a" * 64)
    for text in files.values():
        assert "&id" not in text and "*id" not in text
        assert text.startswith("# DO NOT EDIT")
        assert yaml.safe_load(text)["apiVersion"]


@pytest.mark.parametrize("rid,name", [("qwen3.5-27b-fp8", "qwen3-5-27b-fp8"), ("3b_Model", "r-3b-model"),
                                      ("a" * 70, "a" * 63)])
def test_name_of(rid, name):
    assert k8s.name_of(rid) == name


@pytest.mark.parametrize("opts,said", [
    (k8s.Options("gaudi-cookbook/qwen:latest"), "not pinned by digest"),
    (k8s.Options(None), "--image is required"),
    (k8s.Options("r/x@sha256:" + "a" * 64, replicas=0), "at least 1"),
])
def test_options_are_checked_before_anything(opts, said):
    facts = k8s.ImageFacts({"cookbook.recipe": RID}, 8000, "/health", {}, 1800, 30, 10, 3)
    with pytest.raises(UsageError, match=said):
        k8s.render(recipes.load(RID), facts, opts)
    with pytest.raises(UsageError, match=said):
        k8s.run(recipes.load(RID), opts)  # before the image is read


@pytest.mark.parametrize("args, said", [
    (("--replicas", "0", "--image", "r/x@sha256:" + "a" * 64), "--replicas must be at least 1"),
    ((), "--image is required"),
    (("--image", "r/x:latest"), "not pinned by digest"),
    (("--image", "r/x@sha256:" + "a" * 64, "--env", "HF_TOKEN=hf_topsecret"), "never written into a manifest"),
    (("--image", "r/x@sha256:" + "a" * 64, "--env", "HF_TOKEN hf_topsecret"), "fix: NAME=VALUE"),
])
def test_argument_mistakes_exit_2(args, said):
    out = invoke("k8s", "--recipe", RID, *args, "--dry-run")
    assert out.returncode == 2 and said in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and "topsecret" not in out.stderr


def test_env_override_cannot_change_the_hpu_mode():
    facts = k8s.ImageFacts({"cookbook.recipe": RID}, 8000, "/health", {"PT_HPU_LAZY_MODE": "0"}, 1800, 30, 10, 3)
    opts = k8s.Options("r/x@sha256:" + "a" * 64, env=(("PT_HPU_LAZY_MODE", "1"),))
    with pytest.raises(UsageError, match="applied for compile mode"):
        k8s.render(recipes.load(RID), facts, opts)
    same = k8s.Options("r/x@sha256:" + "a" * 64, env=(("PT_HPU_LAZY_MODE", "0"), ("VLLM_SKIP_WARMUP", "false")))
    assert k8s.render(recipes.load(RID), facts, same)


@pytest.mark.parametrize("env,said", [
    ((("HF_TOKEN", "hf_x"),), "never written into a manifest"),
    ((("VLLM_API_KEY", "k"),), "never written into a manifest"),
    ((("my_password", "p"),), "never written into a manifest"),
    ((("VLLM_COMPACT_GDN", "0"),), "rule gdn-fix-needs-compact-gdn"),  # the image's guard would refuse it
    ((("VLLM_DECODE_BS_BUCKET_MAX", "x"),), "takes a whole number"),
])
def test_overrides_the_image_would_refuse_or_that_carry_a_secret(env, said):
    facts = k8s.ImageFacts({"cookbook.recipe": RID}, 8000, "/health", {"PT_HPU_LAZY_MODE": "0"}, 1800, 30, 10, 3)
    opts = k8s.Options("r/x@sha256:" + "a" * 64, env=env)
    with pytest.raises(UsageError, match=said) as err:
        k8s.render(recipes.load(RID), facts, opts)
    assert "hf_x" not in str(err.value)
    unsafe = k8s.Options("r/x@sha256:" + "a" * 64, env=(*env, ("COOKBOOK_ALLOW_UNSAFE", "1")))
    if "rule" in said:  # as in the image: COOKBOOK_ALLOW_UNSAFE=1 starts despite a rule, never a bad value
        assert k8s.render(recipes.load(RID), facts, unsafe)


D = "sha256:" + "d" * 64


@pytest.mark.parametrize("image_id,repo_digests,ok", [
    (D, (), True),  # the local image is the pinned one (a local build: its id)
    ("sha256:" + "1" * 64, ("registry.example/q@" + D,), True),  # pulled: its repo digest
    ("sha256:" + "1" * 64, ("registry.example/q@sha256:" + "2" * 64,), False),
    ("sha256:" + "1" * 64, (), False),
])
def test_digest_problem(image_id, repo_digests, ok):
    facts = k8s.ImageFacts({}, 8000, "/health", {}, 1800, 30, 10, 3, image_id, repo_digests)
    said = k8s.digest_problem("registry.example/q@" + D, facts)
    assert (said is None) == ok, said


@pytest.mark.parametrize("pairs,want", [(None, ()), (["A=1", "B=x=y", "C="], (("A", "1"), ("B", "x=y"), ("C", "")))])
def test_env_pairs(pairs, want):
    assert k8s.env_pairs(cli.parse_env(pairs)) == want


@pytest.mark.parametrize("bad", ["A", "1A=x", "=x", "HF_TOKEN hf_secretvalue", "HF-TOKEN=hf_secretvalue"])
def test_env_pairs_refuses(bad):
    with pytest.raises(UsageError, match="NAME=VALUE") as err:
        k8s.env_pairs(cli.parse_env([bad]))
    assert "secretvalue" not in str(err.value)  # a pasted token is never echoed


CONFIG = {"Labels": {"cookbook.recipe": RID}, "ExposedPorts": {"8000/tcp": {}},
          "Healthcheck": {"Test": ["CMD", "x"], "StartPeriod": 1800 * 10**9, "Interval": 30 * 10**9,
                          "Timeout": 10 * 10**9, "Retries": 3}}
MANIFEST = {"port": 8000, "health_path": "/health", "env": {}}


@pytest.mark.parametrize("change,said", [
    ({"Labels": {}}, "no cookbook.recipe label"),
    ({"ExposedPorts": {"9000/tcp": {}}}, "exposes 9000/tcp"),
    ({"Healthcheck": None}, "no HEALTHCHECK"),
])
def test_facts_refuse_an_image_that_is_not_a_recipe_image(change, said):
    with pytest.raises(ManifestError, match=said):
        k8s.facts_of({**CONFIG, **change}, MANIFEST)


def test_check_image_refuses_standin_and_another_recipe():
    loaded = recipes.load(RID)
    standin = k8s.facts_of({**CONFIG, "Labels": {"cookbook.recipe": RID, "cookbook.recipe.hash": loaded.hash,
                                                 "cookbook.standin": "true"}}, MANIFEST)
    with pytest.raises(ManifestError, match="stand-in"):
        k8s.check_image(loaded, standin, allow_standin=False)
    k8s.check_image(loaded, standin, allow_standin=True)
    other = k8s.facts_of({**CONFIG, "Labels": {"cookbook.recipe": RID, "cookbook.recipe.hash": "0" * 64}}, MANIFEST)
    with pytest.raises(ManifestError, match="built from recipe"):
        k8s.check_image(loaded, other, allow_standin=True)


def invoke(*args):
    exe = [sys.executable, "-m", "invoke"]
    return subprocess.run([*exe, *args], cwd=ROOT, capture_output=True, text=True)


@pytest.mark.docker
def test_task_writes_plain_files_and_refuses_a_standin_unasked(built, tmp_path):
    base = ["k8s", "--recipe", RID, "--image", digest_ref(built), "--local", built.tags[0]]
    other = invoke(*base[:4], "registry.example/q@sha256:" + "e" * 64, *base[5:], "--standin",
                   "--out", str(tmp_path / "other"))  # --local is not the image --image pins
    assert other.returncode == 1 and "the digest --image pins" in other.stderr and not (tmp_path / "other").exists()
    refused = invoke(*base, "--out", str(tmp_path / "no"))
    assert refused.returncode == 1 and "stand-in" in refused.stderr and "Traceback" not in refused.stderr
    dry = invoke(*base, "--standin", "--dry-run", "--out", str(tmp_path / "dry"))
    assert dry.returncode == 0 and "kind: Deployment" in dry.stdout and not (tmp_path / "dry").exists()
    out = tmp_path / "k"
    (out).mkdir()
    (out / "deployment.yaml").write_text("my own hand-written manifest\n")
    (out / "mine.yaml").write_text("kept\n")
    mine = invoke(*base, "--standin", "--out", str(out))  # a folder the cookbook did not make: refused, untouched
    assert mine.returncode == 2 and "not replacing it" in mine.stderr and "Traceback" not in mine.stderr
    assert (out / "deployment.yaml").read_text() == "my own hand-written manifest\n"
    out = tmp_path / "ours"
    first = invoke(*base, "--standin", "--replicas", "2", "--out", str(out))
    assert first.returncode == 0, first.stderr
    assert (out / "pdb.yaml").is_file() and (out / k8s.MARKER).is_file()
    done = invoke(*base, "--standin", "--replicas", "1", "--out", str(out))  # its own folder: replaced whole
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == [k8s.MARKER, "deployment.yaml", "service.yaml"]
    docs = [yaml.safe_load((out / f).read_text()) for f in ("deployment.yaml", "service.yaml")]
    assert [d["kind"] for d in docs] == ["Deployment", "Service"]
    assert all("namespace" not in d["metadata"] for d in docs)  # kubectl -n / kustomize decide


@pytest.mark.docker
def test_local_must_be_the_pushed_image_it_pins(built, tmp_path):
    """Pushed to a real registry on 127.0.0.1: the engine records the repo digest, and --local is taken
    for that digest only; a pin on another digest of the same repository is refused, nothing written."""
    from .. import registries

    with registries.running(tmp_path / "registry") as server:
        tag = f"{server.host}/q:k8s"
        engine.docker("tag", built.image_id, tag)
        try:
            engine.docker("push", tag, timeout=600)
            digest, _ = server.manifest("q", "k8s")  # read back by a second client
            base = ["k8s", "--recipe", RID, "--local", tag, "--standin"]
            ok = invoke(*base, "--image", f"{server.host}/q@{digest}", "--out", str(tmp_path / "ok"))
            assert ok.returncode == 0, ok.stderr
            assert f"{server.host}/q@{digest}" in (tmp_path / "ok" / "deployment.yaml").read_text()
            wrong = invoke(*base, "--image", f"{server.host}/q@sha256:{'0' * 64}", "--out", str(tmp_path / "no"))
            assert wrong.returncode == 1 and "the digest --image pins" in wrong.stderr
            assert not (tmp_path / "no").exists()
        finally:
            engine.docker("rmi", tag, check=False)
            for ref in engine.inspect(built.image_id).get("RepoDigests") or []:
                if ref.startswith(server.host + "/"):
                    engine.docker("rmi", ref, check=False)


@pytest.mark.parametrize("text", ["abc", "1.5", ""])
def test_replicas_that_are_not_a_number_are_one_line(text):
    out = invoke("k8s", "--replicas", text, "--dry-run")
    assert out.returncode == 2 and "--replicas takes a whole number" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_docker_run_options_follow_the_pod_spec():
    pod = sample(False)["deployment.yaml"]["spec"]["template"]["spec"]
    argv = k8s.docker_run_options(pod)
    assert {"--read-only", "--security-opt=no-new-privileges", "--cap-drop=ALL", "--cap-add=SYS_NICE"} <= set(argv)
    assert {"--tmpfs=/tmp:rw,exec,mode=1777", "--tmpfs=/dev/shm:rw,exec,mode=1777",
            f"--volume=hf-model-cache:{HF_CACHE_IN_IMAGE}"} <= set(argv)
    assert "--env=VLLM_CACHE_ROOT=/tmp/vllm-cache" in argv and not any("HF_TOKEN" in a for a in argv)
    pod["containers"][0]["securityContext"]["runAsUser"] = 1000  # no silent parting of the two
    with pytest.raises(ManifestError, match="runAsUser"):
        k8s.docker_run_options(pod)


def test_an_env_override_of_a_cache_root_replaces_the_default():
    loaded = recipes.load(RID)
    facts = k8s.ImageFacts({"cookbook.recipe": RID}, 8000, "/health", {}, 1800, 30, 10, 3)
    opts = k8s.Options("r.example/x@sha256:" + "a" * 64, env=(("VLLM_CACHE_ROOT", "/tmp/mine"),))
    env = first_container(k8s.render(loaded, facts, opts))["env"]
    assert [e["value"] for e in env if e["name"] == "VLLM_CACHE_ROOT"] == ["/tmp/mine"]


# The CPU image (tests/cpu_image.py) serving the trained tiny model under the confinement the Deployment
# writes: read-only root, every capability dropped but SYS_NICE, no privilege escalation, and only the
# pod's volumes writable. It must start, pass the smoke checks the CPU image can, and have nothing it
# writes refused. The vLLM CPU build has no C++ compiler for the sampler's compiled logprob ranks: no check
# that asks for logprobs, and `--enforce-eager` (the one difference from the pod's command).
CPU_CHECKS = ("known-answers", "tool-call-streamed", "json-schema", "needle-cold", "health-after")
REFUSED_WRITE = ("Read-only file system", "Permission denied", "Operation not permitted")


def test_the_confined_pod_serves_the_cpu_image(docker_engine, made_images, vllm_cpu, tmp_path):
    import time
    import urllib.request
    import uuid

    from .. import cpu_image
    from ..conftest import TEST_REPO
    from ..cpu_server import tiny_model_dir
    from ..prove.test_serve import free_port

    path, tags, pack = cpu_image.build(tmp_path / "image", TEST_REPO)
    made_images.extend(tags)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COOKBOOK_FIXES_DIR", str(pack))
        loaded, facts = recipes.load(str(path)), k8s.read_image(tags[0])
        objects = k8s.render(loaded, facts, k8s.Options(image=f"localhost/x@{facts.image_id}"))
    pod = objects["deployment.yaml"]["spec"]["template"]["spec"]
    name, port, claim = f"cookbook-test-pod-{uuid.uuid4().hex[:8]}", free_port(), pod["volumes"][0]
    volume = f"cookbook-test-hf-{uuid.uuid4().hex[:8]}"  # the claim, as a Docker volume of this test's own
    claim["persistentVolumeClaim"]["claimName"] = volume
    argv = ["run", "--detach", "--name", name, "--publish", f"127.0.0.1:{port}:{facts.port}",
            *k8s.docker_run_options(pod), f"--env=COOKBOOK_MODEL_PATH={cpu_image.MODEL_IN_IMAGE}",
            f"--volume={tiny_model_dir()}:{cpu_image.MODEL_IN_IMAGE}:ro", tags[0], "--enforce-eager"]
    try:
        engine.docker(*argv)
        deadline = time.monotonic() + 900
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            state = engine.docker("inspect", "--format", "{{.State.Running}}", name).stdout.strip()
            alive = state == "true" and time.monotonic() < deadline
            assert alive, engine.docker("logs", name, check=False).stderr[-3000:]
            time.sleep(3)
        only = [a for c in CPU_CHECKS for a in ("--only", c)]
        smoke = subprocess.run([sys.executable, "-m", "invoke", "smoke", "--recipe", str(path), "--url",
                                f"http://127.0.0.1:{port}", *only, "--out", str(tmp_path / "smoke")],
                               cwd=ROOT, capture_output=True, text=True, timeout=900,
                               env={**os.environ, "COOKBOOK_FIXES_DIR": str(pack)})
        logs = engine.docker("logs", name, check=False)
        log = logs.stdout + logs.stderr
        assert smoke.returncode == 0, smoke.stdout[-3000:] + smoke.stderr[-2000:]
        refused = [line for line in log.splitlines() if any(r in line for r in REFUSED_WRITE)]
        assert not refused, "\n".join(refused[:20])
        # vLLM did write its cache, where the pod points it (the emptyDir at /tmp)
        listed = engine.docker("exec", name, "ls", k8s.WRITABLE_ENV["VLLM_CACHE_ROOT"], check=False)
        assert listed.returncode == 0 and listed.stdout.strip(), listed.stderr
    finally:
        engine.docker("rm", "--force", "--volumes", name, check=False)
        engine.docker("volume", "rm", volume, check=False)


BROKEN_MANIFESTS = {  # what /opt/cookbook/manifest.json is in each image, and what the refusal says
    "not-json": ("text", b"port: 8000\n", "is not JSON"),
    "not-utf8": ("text", b'{"port": 8000, "health_path": "/h\xff", "env": {}}', "is not UTF-8 text"),
    "no-port": ("text", b'{"health_path": "/health", "env": {}}', "has no port between 1 and 65535"),
    "string-port": ("text", b'{"port": "8000", "health_path": "/health", "env": {}}', "has no port"),
    "no-env": ("text", b'{"port": 8000, "health_path": "/health"}', "has no env"),
    "array": ("text", b"[]", "is not a JSON object"),
    "folder": ("folder", b"", "is a folder, not a file"),
    "symlink": ("symlink", b"", "is a symlink"),
}


@pytest.fixture(scope="module")
def broken_images(docker_engine, tmp_path_factory):
    """One tiny image FROM scratch per broken manifest (never started: k8s only creates a container to copy
    the file out), tagged under this module's repository and removed at the end."""
    made = {}
    for kind, (form, data, _) in BROKEN_MANIFESTS.items():
        ctx = tmp_path_factory.mktemp(f"manifest-{kind}")
        target = ctx / "opt" / "cookbook" / "manifest.json"
        target.parent.mkdir(parents=True)
        if form == "text":
            target.write_bytes(data)
        elif form == "folder":
            (target / "inside").mkdir(parents=True)
        else:
            target.symlink_to("/etc/passwd")
        (ctx / "Dockerfile").write_text(f"FROM scratch\nCOPY opt/ /opt/\nLABEL cookbook.recipe={RID}\n")
        tag = f"{REPO}/broken-manifest-{kind}:test"
        engine.docker("build", "-q", "-t", tag, str(ctx))
        made[kind] = (tag, engine.inspect(tag)["Id"])
    yield made
    for tag, _ in made.values():
        engine.docker("rmi", tag, check=False)


@pytest.mark.docker
@pytest.mark.parametrize("kind", list(BROKEN_MANIFESTS))
def test_an_image_whose_manifest_is_not_the_cookbooks_is_one_line_exit_2(broken_images, tmp_path, kind):
    """`invoke k8s --local` on an image whose manifest.json is not JSON, not UTF-8, lacks port, is a folder
    or a symlink: one line naming the image and the file, exit 2, no traceback, nothing written, and the
    container it created to read the file is gone."""
    tag, image_id = broken_images[kind]
    out = invoke("k8s", "--recipe", RID, "--image", f"registry.example/q@{image_id}", "--local", tag,
                 "--out", str(tmp_path / "k"))
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith(f"error: {tag}: {k8s.MANIFEST_IN_IMAGE} {BROKEN_MANIFESTS[kind][2]}"), out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "k").exists()
    left = engine.docker("ps", "--all", "--quiet", "--filter", f"ancestor={image_id}").stdout.split()
    assert not left


@pytest.mark.parametrize("stat, said", [
    ({"mode": 0o644, "size": 300}, None),
    ({"mode": (1 << 31) | 0o755, "size": 4096}, "is a folder"),
    ({"mode": (1 << 27) | 0o777, "size": 11, "linkTarget": "/etc/passwd"}, "is a symlink"),
    ({"mode": 0o644, "size": (1 << 20) + 1}, "is larger than"),
])
def test_archive_problem(stat, said):
    got = k8s.archive_problem(stat)
    assert got == said if said is None else said in got


@pytest.mark.parametrize("kserve", [False, True])
def test_a_four_card_recipe_asks_for_four_cards_and_budgets_replicas(tmp_path, kserve):
    """tests/multicard.py's recipe: all four cards in the one pod of a replica, the CPUs and memory sized by
    them, and a budget of one replica down whose unready replicas never stall a drain."""
    from .. import multicard

    root = tmp_path / "recipes"
    loaded = recipes.load(multicard.write(root), root)
    facts = k8s.ImageFacts({"cookbook.recipe": multicard.ID}, 8000, "/health", {}, 1800, 30, 10, 3)
    objects = k8s.render(loaded, facts, k8s.Options("r.example/x@sha256:" + "a" * 64, replicas=2, kserve=kserve))
    k8s.validate(objects)
    (c,) = containers(objects)
    n = multicard.CARDS
    assert c["resources"] == {"limits": {"habana.ai/gaudi": str(n)},
                              "requests": {"cpu": str(8 * n), "memory": f"{64 * n}Gi"}}  # docs/kubernetes.md's
    budget = objects["pdb.yaml"]["spec"]
    assert budget["maxUnavailable"] == 1 and budget["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    one = k8s.render(loaded, facts, k8s.Options("r.example/x@sha256:" + "a" * 64, replicas=1, kserve=kserve))
    assert "pdb.yaml" not in one  # one replica: a budget could only block every drain or say nothing
    off = (("PT_HPU_ENABLE_LAZY_COLLECTIVES", "false"),)  # lazy mode at tensor parallel 4: the image would refuse it
    with pytest.raises(UsageError, match="rule lazy-collectives-for-tensor-parallel"):
        k8s.render(loaded, facts, k8s.Options("r.example/x@sha256:" + "a" * 64, env=off, kserve=kserve))


@pytest.mark.parametrize("rid, cards", [("mixtral-8x7b-instruct-v0.1-gaudi2", 2), ("llama-3.1-70b-instruct-gaudi3", 4),
                                        ("llama-3.1-405b-instruct-gaudi3", 8)])
def test_an_imported_multi_card_recipe_deploys_with_its_card_count(rid, cards):
    """The catalogue's own multi-card recipes (tensor parallel 2, 4 and 8 from upstream's table): every card
    of a replica in its one pod, the manifests valid, a budget for more than one replica."""
    loaded = recipes.load(rid)
    facts = k8s.ImageFacts({"cookbook.recipe": rid}, 8000, "/health", {}, 1800, 30, 10, 3)
    objects = k8s.render(loaded, facts, k8s.Options("r.example/x@sha256:" + "a" * 64, replicas=2))
    k8s.validate(objects)
    (c,) = containers(objects)
    assert c["resources"]["limits"] == {"habana.ai/gaudi": str(cards)}
    assert objects["pdb.yaml"]["spec"]["maxUnavailable"] == 1
