"""The image's claims hold: it ships the manifest this checkout renders for it, `cookbook.manifest.hash`
is that file's sha256, `cookbook.content.hash` is the rendered context's hash (the exact tag's), and
an image that may not be published says so."""

import pytest

from cookbook.host.names import OCI, Label
from inimage import fixplan


@pytest.fixture(scope="module")
def shipped(host, expect) -> bytes:
    return host.file(expect["paths"]["manifest"]).content


def test_manifest_is_the_rendered_one(shipped, expect):
    assert fixplan.sha256_bytes(shipped) == expect["manifest_sha256"], \
        "the image's manifest differs from what this checkout renders for it (rebuild it)"


def test_manifest_hash_label_is_the_shipped_file(shipped, labels):
    assert labels.get(Label.MANIFEST_HASH) == fixplan.sha256_bytes(shipped)


def test_content_hash_label(labels, expect):
    assert labels.get(Label.CONTENT_HASH) == expect["content_hash"]
    assert labels.get(OCI.VERSION, "").split("-")[1] == expect["content_hash"][:8]


def test_never_published_when_it_must_not_be(labels, expect):
    unpublishable = expect["standin"] or bool(expect["not_written"])
    assert labels.get(Label.PUBLISHABLE) == ("false" if unpublishable else "true")
