"""KServe's CRD schema, for validating the ServingRuntime and InferenceService `invoke k8s --kserve` renders.

KServe publishes its CRDs (config/crd/full/serving.kserve.io_*.yaml in its repository); their
openAPIV3Schema is what the API server checks. The full InferenceService CRD is about 2 MB because it
embeds the pod spec many times, so the committed cookbook/release/schemas/kserve.yaml keeps, of each schema,
the fields the cookbook's manifests use plus every field KServe marks required, with KServe's types,
formats, enums and patterns as they are (descriptions dropped). scripts/derive-kserve-schema.py derives
it from a KServe checkout; tests/release/test_k8s_schema.py derives it again where one is at hand and fails on drift.

Validation closes every object of the schema (a field the schema does not list is an error), as
`kubectl apply --validate=strict` does on a cluster; the API server would otherwise drop it silently.
A field the cookbook starts to use that KServe has needs the schema derived again.
"""

from __future__ import annotations

import copy
import functools
import subprocess
from pathlib import Path

import yaml

SCHEMA = Path(__file__).parent / "schemas" / "kserve.yaml"
CRDS = {
    "ServingRuntime": "config/crd/full/serving.kserve.io_servingruntimes.yaml",
    "InferenceService": "config/crd/full/serving.kserve.io_inferenceservices.yaml",
}
KSERVE_REF = "v0.20.0"  # the KServe release whose CRDs the committed schema comes from


def key(obj: dict) -> str:
    return f"{obj['apiVersion']}/{obj['kind']}"


def prune(schema: dict, samples: list) -> dict:
    """The schema reduced to what the samples use (and what it requires), recursively."""
    node = {k: v for k, v in schema.items() if k not in ("properties", "items", "additionalProperties", "description")}
    dicts = [s for s in samples if isinstance(s, dict)]
    if "properties" in schema:
        used = {k for s in dicts for k in s} | set(schema.get("required", []))
        node["properties"] = {k: prune(schema["properties"][k], [s[k] for s in dicts if k in s])
                              for k in sorted(used) if k in schema["properties"]}
    if "items" in schema:
        node["items"] = prune(schema["items"], [i for s in samples if isinstance(s, list) for i in s])
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        node["additionalProperties"] = prune(extra, [v for s in dicts for v in s.values()])
    elif extra is not None:
        node["additionalProperties"] = extra
    return node


def closed(schema: dict) -> dict:
    """A copy in which every object that lists its properties refuses others (unless KServe says to keep them)."""
    node = copy.copy(schema)
    if "properties" in node:
        node["properties"] = {k: closed(v) for k, v in node["properties"].items()}
        if "additionalProperties" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
            node["additionalProperties"] = False
    for k in ("items", "additionalProperties"):
        if isinstance(node.get(k), dict):
            node[k] = closed(node[k])
    for k in ("anyOf", "allOf", "oneOf"):
        if k in node:
            node[k] = [closed(s) for s in node[k]]
    return node


def read_crd(source: str, ref: str, path: str) -> dict:
    """A CRD file at a ref of a KServe git repository (bare or not)."""
    git_dir = ["--git-dir", source] if (Path(source) / "HEAD").is_file() else ["-C", source]
    out = subprocess.run(["git", *git_dir, "show", f"{ref}:{path}"], capture_output=True, text=True, check=True)
    return yaml.load(out.stdout, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # megabytes


def commit_of(source: str, ref: str) -> str:
    git_dir = ["--git-dir", source] if (Path(source) / "HEAD").is_file() else ["-C", source]
    return subprocess.run(["git", *git_dir, "rev-parse", f"{ref}^{{commit}}"], capture_output=True, text=True,
                          check=True).stdout.strip()


def derive(source: str, ref: str, samples: list[dict]) -> str:
    """The text of cookbook/release/schemas/kserve.yaml from a KServe checkout and the cookbook's rendered objects."""
    schemas = {}
    for kind, path in CRDS.items():
        crd = read_crd(source, ref, path)
        group = crd["spec"]["group"]
        for version in crd["spec"]["versions"]:
            of_version = [s for s in samples if s["kind"] == kind and s["apiVersion"] == f"{group}/{version['name']}"]
            if of_version:
                schemas[f"{group}/{version['name']}/{kind}"] = prune(version["schema"]["openAPIV3Schema"], of_version)
    head = (f"# DO NOT EDIT: derived by scripts/derive-kserve-schema.py from KServe {ref} (kserve/kserve, commit\n"
            f"# {commit_of(source, ref)}), files\n" + "".join(f"#   {path}\n" for path in CRDS.values()) +
            "# the openAPIV3Schema of each version the cookbook renders, pruned to the fields its manifests use and\n"
            "# the fields KServe requires, descriptions dropped (cookbook/release/k8s_schema.py says why).\n"
            "# KServe is licensed under the Apache License 2.0 (its LICENSE file); this is a derivative of its CRDs,\n"
            "# used only to validate what `invoke k8s --kserve` renders.\n")
    return head + yaml.safe_dump({"kserve": ref, "schemas": schemas}, sort_keys=True, width=120)


@functools.cache
def _validators() -> dict:
    import jsonschema

    doc = yaml.safe_load(SCHEMA.read_text())
    return {k: jsonschema.Draft7Validator(closed(v)) for k, v in doc["schemas"].items()}


def problems(obj: dict) -> list[str]:
    validator = _validators().get(key(obj))
    if validator is None:
        return [f"no KServe schema for {key(obj)} in {SCHEMA.name}: derive it again (scripts/derive-kserve-schema.py)"]
    return [f"{'.'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}"
            for e in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))]
