"""cookbook/release/supply.py: the referrers fallback tag, and provenance made only from what the image's
labels and evidence say. SBOM and attachments run against a real registry in test_publish.py."""

from cookbook.release import supply

LABELS = {
    "cookbook.recipe": "qwen3.5-27b-fp8", "cookbook.recipe.hash": "a" * 64, "cookbook.fixes.profile": "v0.26.0",
    "cookbook.fixes": "prompt-order,gdn-prefix-cache", "cookbook.fixes.not-written": "",
    "cookbook.standin": "false", "org.opencontainers.image.revision": "c" * 40,
    "org.opencontainers.image.base.name": "vault.example/vllm:latest",
    "org.opencontainers.image.base.digest": "sha256:" + "b" * 64,
    "cookbook.vllm-gaudi.commit": "d" * 40, "cookbook.vllm.commit": "e" * 40,
}


def test_attachment_tag_is_the_referrers_fallback_tag():
    assert supply.attachment_tag("sha256:" + "ab" * 32, "sbom") == "sha256-" + "ab" * 32 + ".sbom"


def test_provenance_says_what_made_the_image():
    p = supply.provenance(repository="reg/ns/q", manifest_digest="sha256:" + "f" * 64, image_id="sha256:" + "1" * 64,
                          labels=LABELS, evidence={"passed": True, "started": "t", "suite_sha256": "5" * 64,
                                                   "revision": "c" * 40, "standin": False, "recipe_hash": "a" * 64,
                                                   "image_id": "sha256:" + "1" * 64,
                                                   "checks": [{"check": "a", "outcome": "passed"},
                                                              {"check": "b", "outcome": "passed"}]},
                          evidence_sha256="9" * 64)
    assert p["subject"] == [{"name": "reg/ns/q", "digest": {"sha256": "f" * 64}}]
    build = p["predicate"]["buildDefinition"]
    assert build["externalParameters"] == {"recipe": "qwen3.5-27b-fp8", "recipe_sha256": "a" * 64}
    assert build["internalParameters"]["fixes"] == ["prompt-order", "gdn-prefix-cache"]
    assert build["internalParameters"]["fixes_not_written"] == [] and build["internalParameters"]["standin"] is False
    deps = {d["name"]: d for d in build["resolvedDependencies"]}
    assert deps["vault.example/vllm:latest"]["digest"] == {"sha256": "b" * 64}
    assert deps["cookbook"]["annotations"]["revision"] == "c" * 40
    assert deps["vllm-gaudi"]["annotations"]["commit"] == "d" * 40
    (evidence,) = p["predicate"]["runDetails"]["byproducts"]
    assert evidence["digest"] == {"sha256": "9" * 64}
    assert evidence["annotations"] == {"passed": True, "started": "t", "image_id": "sha256:" + "1" * 64,
                                       "recipe_sha256": "a" * 64, "standin": False, "suite_sha256": "5" * 64,
                                       "revision": "c" * 40, "checks": {"a": "passed", "b": "passed"}}
