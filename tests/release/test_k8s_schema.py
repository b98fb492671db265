"""The KServe schema the cookbook validates against: pruning and closing as pure functions, and the
committed cookbook/release/schemas/kserve.yaml derived again from KServe's own CRDs where a KServe repository
is at hand (COOKBOOK_KSERVE_FROM, a clone or a bare mirror), failing when it has drifted."""

import os
from pathlib import Path

import jsonschema
import pytest
import yaml

from cookbook.recipe import recipes
from cookbook.release import k8s, k8s_schema

CANDIDATES = [os.environ.get("COOKBOOK_KSERVE_FROM"), "/work/.mirror/kserve+kserve/repo"]

SCHEMA = {
    "type": "object", "description": "dropped", "required": ["name"],
    "properties": {
        "name": {"type": "string"},
        "unused": {"type": "string"},
        "list": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "integer"},
                                                                               "b": {"type": "string"}}}},
        "map": {"type": "object", "additionalProperties": {"type": "object", "properties": {"x": {"type": "integer"},
                                                                                            "y": {"type": "string"}}}},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                 "properties": {"k": {"type": "string"}}},
        "q": {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True},
    },
}


def test_prune_keeps_what_is_used_and_required():
    got = k8s_schema.prune(SCHEMA, [{"list": [{"a": 1}], "map": {"m": {"y": "v"}}, "q": 1}])
    assert "description" not in got and got["required"] == ["name"]
    assert sorted(got["properties"]) == ["list", "map", "name", "q"]
    assert list(got["properties"]["list"]["items"]["properties"]) == ["a"]
    assert list(got["properties"]["map"]["additionalProperties"]["properties"]) == ["y"]
    assert got["properties"]["q"] == SCHEMA["properties"]["q"]


@pytest.mark.parametrize("doc,ok", [
    ({"name": "n"}, True),
    ({"name": "n", "other": 1}, False),  # closed: a field the schema does not list
    ({"name": "n", "list": [{"a": 1, "c": 2}]}, False),
    ({"name": "n", "map": {"k": {"x": 1, "z": 1}}}, False),
    ({"name": "n", "free": {"k": "v", "anything": 1}}, True),  # KServe says keep unknown fields here
    ({"name": "n", "q": "10Gi"}, True),
    ({"q": 1}, False),
])
def test_closed_refuses_unknown_fields(doc, ok):
    errors = list(jsonschema.Draft7Validator(k8s_schema.closed(SCHEMA)).iter_errors(doc))
    assert (not errors) == ok, errors


def test_committed_schema_covers_what_the_cookbook_renders():
    doc = yaml.safe_load(k8s_schema.SCHEMA.read_text())
    assert doc["kserve"] == k8s_schema.KSERVE_REF
    for obj in k8s.schema_samples(recipes.load("qwen3.5-27b-fp8")):
        assert k8s_schema.problems(obj) == []


def test_committed_schema_is_what_kserve_gives():
    source = next((c for c in CANDIDATES if c and Path(c).exists()), None)
    if source is None:
        pytest.skip("no KServe repository here: set COOKBOOK_KSERVE_FROM to a clone or mirror of kserve/kserve")
    text = k8s_schema.derive(source, k8s_schema.KSERVE_REF, k8s.schema_samples(recipes.load("qwen3.5-27b-fp8")))
    assert text == k8s_schema.SCHEMA.read_text(), "run: scripts/derive-kserve-schema.py " + source
