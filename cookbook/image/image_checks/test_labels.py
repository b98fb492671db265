"""The labels: recipe id and hash, base, commits, fixes, and the OCI keys."""

OCI = ["org.opencontainers.image.title", "org.opencontainers.image.description", "org.opencontainers.image.version",
       "org.opencontainers.image.vendor", "org.opencontainers.image.base.name"]


def test_recipe_labels(labels, expect):
    assert labels.get("cookbook.recipe") == expect["recipe"]
    assert labels.get("cookbook.recipe.hash") == expect["recipe_hash"]
    assert labels.get("cookbook.fixes.profile") == expect["profile"]
    assert labels.get("cookbook.standin") == ("true" if expect["standin"] else "false")


def test_base_and_commit_labels(labels, expect):
    assert labels.get("org.opencontainers.image.base.name") == expect["base_image"]
    assert labels.get("cookbook.vllm-gaudi.commit") == expect["commits"]["vllm_gaudi"]
    assert labels.get("cookbook.vllm.commit") == expect["commits"]["vllm"]


def test_fix_list_label(labels, expect):
    assert labels.get("cookbook.fixes", None) == ",".join(expect["fixes"])
    assert labels.get("cookbook.fixes.not-written", None) == ",".join(expect["not_written"])


def test_oci_keys_present(labels):
    missing = [k for k in OCI if not labels.get(k)]
    assert not missing, f"missing or empty: {missing}"
