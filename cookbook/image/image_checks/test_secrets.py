"""No secret in the image: no Hugging Face token or registry credential in the env, the labels,
any layer's history, or the usual credential files."""

import re

import pytest

from cookbook.host.names import HF_CACHE_IN_IMAGE

SECRET_NAMES = re.compile(r"(HF_TOKEN|HUGGING_?FACE(_HUB)?_TOKEN|_PASSWORD|_SECRET|_API_KEY|DOCKER_AUTH_CONFIG"
                          r"|REGISTRY_AUTH|_CREDENTIALS?)$", re.I)
SECRET_VALUES = re.compile(r"hf_[A-Za-z0-9]{20,}|\"auths\"\s*:|ghp_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16}")
CREDENTIAL_FILES = [f"{HF_CACHE_IN_IMAGE}/token", "/root/.huggingface/token", "/root/.docker/config.json",
                    "/root/.git-credentials", "/root/.netrc"]


def test_no_secret_in_env(image_env):
    named = [k for k in image_env if SECRET_NAMES.search(k)]
    valued = [k for k, v in image_env.items() if SECRET_VALUES.search(v)]
    assert not named and not valued, f"secrets in the image env: {sorted(set(named + valued))}"


def test_no_secret_in_labels(labels):
    bad = [k for k, v in labels.items() if SECRET_VALUES.search(v) or SECRET_NAMES.search(k)]
    assert not bad, f"secrets in labels: {bad}"


def test_no_secret_in_history(history):
    bad = [line[:80] for line in history if SECRET_VALUES.search(line)
           or re.search(r"\b(HF_TOKEN|HUGGING_FACE_HUB_TOKEN)=\S", line)]
    assert not bad, f"secrets in the layer history: {bad}"


@pytest.mark.parametrize("path", CREDENTIAL_FILES)
def test_no_credential_file(host, path):
    assert not host.file(path).exists
