"""The labels: recipe id and hash, base, commits, fixes, and the OCI keys."""

from cookbook.host.names import OCI, Label

OCI_KEYS = [OCI.TITLE, OCI.DESCRIPTION, OCI.VERSION, OCI.VENDOR, OCI.BASE_NAME]


def test_recipe_labels(labels, expect):
    assert labels.get(Label.RECIPE) == expect["recipe"]
    assert labels.get(Label.RECIPE_HASH) == expect["recipe_hash"]
    assert labels.get(Label.PROFILE) == expect["profile"]
    assert labels.get(Label.STANDIN) == ("true" if expect["standin"] else "false")


def test_base_and_commit_labels(labels, expect):
    assert labels.get(OCI.BASE_NAME) == expect["base_image"]
    assert labels.get(Label.VLLM_GAUDI_COMMIT) == expect["commits"]["vllm_gaudi"]
    assert labels.get(Label.VLLM_COMMIT) == expect["commits"]["vllm"]


def test_fix_list_label(labels, expect):
    assert labels.get(Label.FIXES, None) == ",".join(expect["fixes"])
    assert labels.get(Label.FIXES_NOT_WRITTEN, None) == ",".join(expect["not_written"])


def test_oci_keys_present(labels):
    missing = [k for k in OCI_KEYS if not labels.get(k)]
    assert not missing, f"missing or empty: {missing}"
