"""`invoke k8s`: plain Kubernetes manifests that serve a built recipe image on a Gaudi fleet.

One Gaudi host serves one replica; Intel's Gaudi device plugin offers the cards as `habana.ai/gaudi`.
The manifests come from the recipe and from the image itself (its config and the manifest.json it ships,
read with the Docker SDK), so the probes, port and env are the ones the image was built with:

  Deployment (or, with --kserve, a KServe ServingRuntime and InferenceService in RawDeployment mode),
  a Service on the image's port (KServe makes its own), and a PodDisruptionBudget when replicas > 1.

The objects are plain YAML, one file each, no templating and no namespace, so `kubectl apply -f DIR`
and a kustomization's `resources:` take them as they are. Every object is validated before anything
is written: the Kubernetes kinds with kubernetes-validate (strict: unknown fields are errors), the
KServe kinds against KServe's CRD schema (cookbook/schemas/kserve.yaml, see k8s_schema.py).
"""

from __future__ import annotations

import io
import json
import math
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from . import engine, fixes, k8s_schema
from .errors import ManifestError, UsageError, printable
from .paths import ROOT
from .progress import say
from .recipes import LoadedRecipe

K8S_VERSION = "1.32"  # the Kubernetes API the manifests are validated against (kubernetes-validate's schemas)
GAUDI = "habana.ai/gaudi"  # the extended resource Intel's Gaudi device plugin advertises
MANIFEST_IN_IMAGE = fixes.fixplan.MANIFEST
HF_CACHE = "/root/.cache/huggingface"  # the image runs as root; the Hub client caches here
CONTAINER = "vllm"
KSERVE_CONTAINER = "kserve-container"  # the name KServe expects for a runtime's serving container
STARTUP_PERIOD_S = 10
OBJECT_FILES = {"deployment.yaml", "service.yaml", "pdb.yaml", "servingruntime.yaml", "inferenceservice.yaml"}
DIGEST_REF = re.compile(r"^[a-z0-9][^@\s]*@sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class ImageFacts:
    """What the built image says about serving it: its manifest and its HEALTHCHECK."""

    labels: dict[str, str]
    port: int
    health_path: str
    env: dict[str, str]
    start_period_s: int
    interval_s: int
    timeout_s: int
    retries: int

    @property
    def standin(self) -> bool:
        return self.labels.get("cookbook.standin") == "true"


def facts_of(config: dict, manifest: dict) -> ImageFacts:
    """From an image's config (docker inspect .Config) and its cookbook manifest; refuses an image that
    is not a cookbook recipe image or whose config and manifest disagree."""
    labels = config.get("Labels") or {}
    if "cookbook.recipe" not in labels:
        raise ManifestError("the image carries no cookbook.recipe label: it was not built by `invoke build`")
    port = manifest["port"]
    if f"{port}/tcp" not in (config.get("ExposedPorts") or {}):
        raise ManifestError(f"the image's manifest says port {port}, but the image exposes "
                            f"{', '.join(config.get('ExposedPorts') or {}) or 'nothing'}")
    check = config.get("Healthcheck") or {}
    if not check.get("Test"):
        raise ManifestError("the image has no HEALTHCHECK: its probes cannot be sized from it")
    ns = 1_000_000_000
    return ImageFacts(labels=labels, port=port, health_path=manifest["health_path"], env=manifest["env"],
                      start_period_s=check.get("StartPeriod", 0) // ns, interval_s=check.get("Interval", 30 * ns) // ns,
                      timeout_s=check.get("Timeout", 30 * ns) // ns, retries=check.get("Retries", 3))


def read_image(ref: str) -> ImageFacts:
    """The image's config and manifest, read with the Docker SDK from a created (never started) container."""
    import docker.errors

    client = engine.sdk()
    try:
        image = client.images.get(ref)
    except docker.errors.ImageNotFound:
        raise ManifestError(f"no image {ref} on this Docker engine",
                            hint="pull it first, or name a local tag of the same image with --local") from None
    container = client.containers.create(image.id, entrypoint=["true"])
    try:
        chunks, _ = container.get_archive(MANIFEST_IN_IMAGE)
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
            manifest = json.load(tar.extractfile(tar.getmembers()[0]))
    except docker.errors.NotFound:
        raise ManifestError(f"{ref} has no {MANIFEST_IN_IMAGE}: it was not built by `invoke build`") from None
    finally:
        container.remove(force=True)
    return facts_of(image.attrs["Config"], manifest)


def check_image(loaded: LoadedRecipe, facts: ImageFacts, allow_standin: bool) -> None:
    got = facts.labels["cookbook.recipe"], facts.labels.get("cookbook.recipe.hash")
    if got != (loaded.id, loaded.hash):
        raise ManifestError(f"the image was built from recipe {got[0]} ({(got[1] or '?')[:12]}), not {loaded.id} "
                            f"({loaded.hash[:12]})", hint="build the recipe again, or name the image built from it")
    if facts.standin and not allow_standin:
        raise ManifestError("the image is built on the stand-in base: it serves no model",
                            hint="build on the real base, or pass --standin to render for a try-out anyway")


def name_of(recipe_id: str) -> str:
    """A DNS-1035 label (Service names need one): qwen3.5-27b-fp8 -> qwen3-5-27b-fp8."""
    name = re.sub(r"[^a-z0-9-]+", "-", recipe_id.lower()).strip("-")
    return (name if name[:1].isalpha() else "r-" + name)[:63].rstrip("-")


def probes(facts: ImageFacts) -> dict:
    """Startup sized to the image's HEALTHCHECK start period (the model's load and compile time), then
    readiness and liveness on the same path, liveness as patient as the image's own health check."""
    get = {"httpGet": {"path": facts.health_path, "port": "http"}, "timeoutSeconds": facts.timeout_s}
    return {
        "startupProbe": {**get, "periodSeconds": STARTUP_PERIOD_S,
                         "failureThreshold": max(1, math.ceil(facts.start_period_s / STARTUP_PERIOD_S))},
        "readinessProbe": {**get, "periodSeconds": 10, "failureThreshold": 3},
        "livenessProbe": {**get, "periodSeconds": facts.interval_s, "failureThreshold": facts.retries},
    }


@dataclass(frozen=True)
class Options:
    image: str  # NAME@sha256:DIGEST
    replicas: int = 1
    kserve: bool = False
    env: tuple[tuple[str, str], ...] = ()  # run-time overrides; the recipe's env is in the image already
    hf_secret: str = "hf-token"  # a Secret with key `token`; optional, a public model needs none
    cache_claim: str = "hf-model-cache"  # a PersistentVolumeClaim for the Hub cache (ReadWriteMany for replicas > 1)


def check_options(opts: Options) -> None:
    if not opts.image:
        raise ManifestError("--image is required: the image to run, pinned as NAME@sha256:DIGEST")
    if not DIGEST_REF.match(opts.image):
        raise ManifestError(f"--image {opts.image} is not pinned by digest", hint="give NAME@sha256:<64 hex>")
    if opts.replicas < 1:
        raise ManifestError("--replicas must be at least 1")


def parse_replicas(text) -> int:
    """`--replicas` as typed (a string; invoke would cast with a traceback): a whole number, default 1."""
    try:
        return 1 if text is None else int(str(text).strip())
    except ValueError:
        raise UsageError(f"--replicas takes a whole number, not {printable(repr(text))}") from None


def parse_env(pairs: list[str] | None) -> tuple[tuple[str, str], ...]:
    out = []
    for pair in pairs or []:
        k, sep, v = pair.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise ManifestError(f"--env {pair!r} is not NAME=VALUE")
        out.append((k, v))
    return tuple(out)


def container(loaded: LoadedRecipe, facts: ImageFacts, opts: Options, name: str) -> dict:
    env = [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": opts.hf_secret, "key": "token",
                                                                "optional": True}}}]
    env += [{"name": k, "value": v} for k, v in opts.env]
    cards = str(loaded.recipe.hardware.cards)
    return {
        "name": name,
        "image": opts.image,
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"name": "http", "containerPort": facts.port, "protocol": "TCP"}],
        "env": env,
        # Extended resources: the request must equal the limit, so the limit alone says it.
        "resources": {"limits": {GAUDI: cards}},
        "volumeMounts": [{"name": "model-cache", "mountPath": HF_CACHE}, {"name": "dshm", "mountPath": "/dev/shm"}],
        # `docker run --cap-add=sys_nice` on one host; --ipc=host becomes the memory-backed /dev/shm below.
        "securityContext": {"capabilities": {"add": ["SYS_NICE"]}},
        **probes(facts),
    }


def volumes(opts: Options) -> list[dict]:
    # /dev/shm counts against the pod's memory; no sizeLimit because the recipe states none.
    return [{"name": "model-cache", "persistentVolumeClaim": {"claimName": opts.cache_claim}},
            {"name": "dshm", "emptyDir": {"medium": "Memory"}}]


def metadata(loaded: LoadedRecipe, facts: ImageFacts, name: str) -> dict:
    version = facts.labels.get("org.opencontainers.image.version", "")
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "gaudi-cookbook"}
    if version:
        labels["app.kubernetes.io/version"] = version[:63]
    keep = ("cookbook.recipe", "cookbook.recipe.hash", "cookbook.manifest.hash", "cookbook.model",
            "cookbook.vllm-gaudi.version", "cookbook.gaudi-sw", "cookbook.fixes")
    return {"name": name, "labels": labels,
            "annotations": {k: facts.labels[k] for k in keep if facts.labels.get(k)}}


def render(loaded: LoadedRecipe, facts: ImageFacts, opts: Options) -> dict[str, dict]:
    """file name -> object. Pure: the recipe, the image's facts and the options decide every field."""
    check_options(opts)
    overridden = {**facts.env, **dict(opts.env)}
    want, built = fixes.fixplan.hpu_mode(overridden), fixes.fixplan.hpu_mode(facts.env)
    if want != built:  # the image's start-up check (apply_all --check) holds the mode its fixes were made for
        raise ManifestError(f"--env PT_HPU_LAZY_MODE={overridden.get('PT_HPU_LAZY_MODE')} asks for {want} mode; "
                            f"the image's fixes were applied for {built} mode, and it would refuse to start",
                            hint="build an image of a recipe for that mode")
    name = name_of(loaded.id)
    meta = metadata(loaded, facts, name)
    out: dict[str, dict] = {}
    if opts.kserve:
        runtime = f"{name}-runtime"
        out["servingruntime.yaml"] = {
            "apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime",
            "metadata": {**meta, "name": runtime},
            "spec": {"supportedModelFormats": [{"name": "vllm-gaudi", "autoSelect": False}],
                     "containers": [container(loaded, facts, opts, KSERVE_CONTAINER)],
                     "volumes": volumes(opts)},
        }
        out["inferenceservice.yaml"] = {
            "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            # A plain Deployment and Service, no Knative (scale-to-zero would drop a model that takes many
            # minutes to load). KServe 0.19+ calls the mode Standard and still takes RawDeployment, the one
            # name older releases know too.
            "metadata": {**meta, "annotations": {**meta["annotations"],
                                                 "serving.kserve.io/deploymentMode": "RawDeployment"}},
            "spec": {"predictor": {"minReplicas": opts.replicas, "maxReplicas": opts.replicas,
                                   "model": {"modelFormat": {"name": "vllm-gaudi"}, "runtime": runtime}}},
        }
        selector = {"serving.kserve.io/inferenceservice": name}
    else:
        selector = {"app.kubernetes.io/name": name}
        out["deployment.yaml"] = {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
            "spec": {
                "replicas": opts.replicas,
                "selector": {"matchLabels": selector},
                # No surge: a fleet has no spare card for an extra replica during a rollout.
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
                "template": {
                    "metadata": {"labels": meta["labels"], "annotations": meta["annotations"]},
                    "spec": {"containers": [container(loaded, facts, opts, CONTAINER)], "volumes": volumes(opts)},
                },
            },
        }
        out["service.yaml"] = {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": meta["labels"]},
            "spec": {"selector": selector,
                     "ports": [{"name": "http", "port": facts.port, "targetPort": "http", "protocol": "TCP"}]},
        }
    if opts.replicas > 1:
        out["pdb.yaml"] = {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "labels": meta["labels"]},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector}},
        }
    return out


def schema_samples(loaded: LoadedRecipe) -> list[dict]:
    """Every KServe object `render` makes, with every optional part, for deriving the KServe schema
    (scripts/derive-kserve-schema.py). Only which fields appear matters there, not their values."""
    labels = {"cookbook.recipe": loaded.id, "org.opencontainers.image.version": "v0",
              **{k: "x" for k in ("cookbook.recipe.hash", "cookbook.manifest.hash", "cookbook.model",
                                  "cookbook.vllm-gaudi.version", "cookbook.gaudi-sw", "cookbook.fixes")}}
    facts = ImageFacts(labels, 8000, "/health", {}, 1800, 30, 10, 3)
    opts = Options(image="sample@sha256:" + "0" * 64, replicas=2, kserve=True, env=(("SAMPLE", "1"),))
    return [o for o in render(loaded, facts, opts).values() if o["apiVersion"].startswith("serving.kserve.io/")]


def validate(objects: dict[str, dict]) -> None:
    """Every object against its schema; one error listing each problem with its file and field."""
    import kubernetes_validate

    problems = []
    for file, obj in objects.items():
        if obj["apiVersion"].startswith("serving.kserve.io/"):
            problems += [f"{file}: {p}" for p in k8s_schema.problems(obj)]
            continue
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{file}: {'.'.join(str(p) for p in exc.path) or '(top)'}: {exc.message}")
    if problems:
        raise ManifestError("the rendered manifests do not validate:\n  " + "\n  ".join(problems))


def header(loaded: LoadedRecipe, image: str) -> str:
    return (f"# DO NOT EDIT: generated by `invoke k8s --recipe {loaded.id}` from {loaded.rel_path} and the labels\n"
            f"# and manifest of {image}; render again instead. Validated for Kubernetes {K8S_VERSION}.\n")


class _Plain(yaml.SafeDumper):
    """No anchors and aliases: every object reads on its own, as kubectl and kustomize expect."""

    def ignore_aliases(self, data):
        return True


def dump(loaded: LoadedRecipe, objects: dict[str, dict], image: str) -> dict[str, str]:
    return {file: header(loaded, image) + yaml.dump(obj, Dumper=_Plain, sort_keys=False, width=120)
            for file, obj in objects.items()}


def default_out(loaded: LoadedRecipe, kserve: bool) -> Path:
    return ROOT / "build" / "k8s" / (loaded.id + ("-kserve" if kserve else ""))


def write(files: dict[str, str], out: Path) -> None:
    """Each file through a temporary sibling. An object file of ours that this render has not (pdb.yaml
    of an earlier render with more replicas) is removed, so `kubectl apply -f DIR` applies just these;
    other files in DIR are left alone."""
    out.mkdir(parents=True, exist_ok=True)
    for file, text in files.items():
        tmp = out / f".{file}.tmp"
        tmp.write_text(text)
        tmp.replace(out / file)
    for stale in OBJECT_FILES - set(files):
        (out / stale).unlink(missing_ok=True)


def run(loaded: LoadedRecipe, opts: Options, local: str | None = None, out: Path | None = None,
        allow_standin: bool = False, dry_run: bool = False) -> dict[str, str]:
    check_options(opts)
    facts = read_image(local or opts.image)
    check_image(loaded, facts, allow_standin)
    objects = render(loaded, facts, opts)
    validate(objects)
    files = dump(loaded, objects, opts.image)
    out = out or default_out(loaded, opts.kserve)
    if dry_run:
        for file, text in files.items():
            print(f"--- would write {out / file}\n{text}", end="")
        return files
    write(files, out)
    say(f"{len(files)} manifests in {out} (validated); apply with: kubectl apply -f {out}")
    for file in files:
        print(out / file)
    return files
