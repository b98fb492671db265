"""The fix pack in a real image: a docker build on the stand-in applies the test pack at build time,
the record is read back from the image, and the entrypoint refuses to start on an edited tree."""

import json

import pytest

from cookbook.host import engine
from cookbook.recipe import fixes
from inimage import fixplan

from .. import packs
from ..conftest import TEST_REPO

pytestmark = [pytest.mark.docker, pytest.mark.upstream]
SITE = "/usr/local/lib/python3.11/dist-packages"


def cat(image: str, path: str) -> str:
    return engine.docker("run", "--rm", "--entrypoint", "cat", image, path).stdout


def test_record_read_back_from_the_image(testpack_image, testpack):
    record = json.loads(cat(testpack_image.image_id, fixplan.RECORD))
    assert record["profile"] == "v0.26.0"
    assert record["fixes"] == ["selftest-runner", "selftest-request"]
    assert "gdn-prefix-cache" in record["not_in_pack"]
    by_path = {(f["package"], f["path"]): f for f in record["files"]}
    runner = by_path[("vllm_gaudi", packs.RUNNER)]
    assert runner["before"] == fixes.load_fix("selftest-runner", testpack).targets[0].files[packs.RUNNER]
    assert runner["before"] != runner["after"] and runner["fixes"] == ["selftest-runner"]
    assert ("vllm", packs.REQUEST) in by_path


def test_patched_sources_in_the_image(testpack_image):
    text = cat(testpack_image.image_id, f"{SITE}/vllm_gaudi/{packs.RUNNER}")
    assert text.splitlines()[1] + "\n" == packs.MARK
    assert packs.MARK in cat(testpack_image.image_id, f"{SITE}/vllm/{packs.REQUEST}")


def test_labels_list_the_fixes(testpack_image):
    labels = engine.inspect(testpack_image.image_id)["Config"]["Labels"]
    assert labels["cookbook.fixes"] == "selftest-runner,selftest-request"


def test_entrypoint_refuses_an_edited_tree(testpack_image, tmp_path):
    (tmp_path / "Dockerfile").write_text(
        f"FROM {testpack_image.tags[0]}\nRUN echo '# edited' >> {SITE}/vllm_gaudi/{packs.RUNNER}\n")
    tag = f"{TEST_REPO}/edited-tree:latest"
    engine.docker("build", "-q", "-t", tag, str(tmp_path))
    try:
        out = engine.docker("run", "--rm", tag, check=False)
    finally:
        engine.docker("rmi", tag, check=False)
    assert out.returncode == 1
    assert "do not match their record; not starting" in out.stderr
    assert f"vllm_gaudi/{packs.RUNNER}" in out.stdout + out.stderr


def test_start_with_lazy_mode_is_refused_by_the_check(testpack_image):
    # The recipe's rules refuse lazy mode first (test_runtime.py); past them, the fix record does too.
    out = engine.docker("run", "--rm", "-e", "PT_HPU_LAZY_MODE=1", "-e", "COOKBOOK_ALLOW_UNSAFE=1",
                        testpack_image.image_id, check=False)
    assert out.returncode == 1
    assert "lazy" in (out.stdout + out.stderr)
