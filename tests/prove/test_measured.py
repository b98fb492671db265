"""cookbook/prove/measured.py: a recipe's published rows joined with the latest run of their kind: measured
value, date and image where the run was of the image the recipe builds now; "not measured on this
image" (the last figure kept beside it) where it was not; CPU figures always labelled."""

import pytest

from cookbook.prove import measured
from cookbook.prove.measured import NOT_RUN, NOT_YET, OTHER_IMAGE, Item, Row
from cookbook.prove.results import Measured

HERE, ELSEWHERE = "c" * 64, "d" * 64
ITEMS = [Item("a", "Check A", "8/8"), Item("b", "Check B", "valid")]
DATE, ID = "2026-12-04T10:00:00Z", "sha256:" + "ab" * 32


def run(content_hash=HERE, hardware="gaudi", names=("a",), image_id=ID):
    return Measured("smoke", "r", "0" * 64, DATE, "img:tag", image_id, content_hash, hardware,
                    entries={n: {"name": n, "result": f"{n} ok"} for n in names})


@pytest.mark.parametrize("name,the_run,rows", [
    ("no run yet", None,
     [Row("Check A", "8/8", NOT_YET, "-", "-", False), Row("Check B", "valid", NOT_YET, "-", "-", False)]),
    ("measured on this image; a row the run lacks", run(),
     [Row("Check A", "8/8", "a ok", DATE, "sha256:abababababab", True),
      Row("Check B", "valid", NOT_RUN, DATE, "sha256:abababababab", True)]),
    ("another image: not measured on this image, the last figure beside", run(ELSEWHERE, names=("a", "b")),
     [Row("Check A", "8/8", f"{OTHER_IMAGE} (last run: a ok)", DATE, "sha256:abababababab", False),
      Row("Check B", "valid", f"{OTHER_IMAGE} (last run: b ok)", DATE, "sha256:abababababab", False)]),
    ("a --url run names no image: never this image", run(None, None, image_id=None),
     [Row("Check A", "8/8", f"{OTHER_IMAGE} (last run: a ok)", DATE, "not recorded", False),
      Row("Check B", "valid", OTHER_IMAGE, DATE, "not recorded", False)]),
    ("a CPU run of this image is labelled", run(hardware="cpu", names=("a", "b")),
     [Row("Check A", "8/8", "a ok (on CPU)", DATE, "sha256:abababababab", True),
      Row("Check B", "valid", "b ok (on CPU)", DATE, "sha256:abababababab", True)]),
    ("a CPU run of another image: labelled and not this image's", run(ELSEWHERE, "cpu"),
     [Row("Check A", "8/8", f"{OTHER_IMAGE} (last run: a ok (on CPU))", DATE, "sha256:abababababab", False),
      Row("Check B", "valid", OTHER_IMAGE, DATE, "sha256:abababababab", False)]),
])
def test_join(name, the_run, rows):
    assert measured.join(ITEMS, the_run, HERE, lambda e: e["result"]) == rows


@pytest.mark.parametrize("entry,words", [
    ({"status": "passed", "passed": True, "result": "8/8"}, "8/8"),
    ({"status": "failed", "passed": False, "result": "7/8"}, "7/8 (failed)"),
    ({"status": "failed", "passed": False, "result": ""}, "failed"),
    ({"status": "skipped", "passed": None, "result": "text-only"}, "text-only"),
    ({"passed": True}, "passed"),
])
def test_smoke_value(entry, words):
    assert measured.smoke_value(entry) == words


@pytest.mark.parametrize("image_id,short", [
    ("sha256:" + "0123456789ab" * 5 + "cdef", "sha256:0123456789ab"), (None, "not recorded")])
def test_short_id(image_id, short):
    assert measured.short_id(image_id) == short


@pytest.mark.parametrize("accelerator, the_run, refused", [
    ("gaudi2", run(hardware="cpu"), True),  # CPU figures never stand as a Gaudi recipe's
    ("gaudi3", run(hardware="cpu"), True),
    ("gaudi2", run(), False),
    ("gaudi2", None, False),
    ("gaudi2", run(None, None, image_id=None), False),  # a --url run: hardware not recorded, the page says so
    ("cpu", run(hardware="cpu"), False),  # a CPU recipe's own CPU figures, labelled "on CPU"
])
def test_misplaced(accelerator, the_run, refused):
    said = measured.misplaced(accelerator, the_run)
    assert bool(said) is refused and (not said or "measured on a CPU" in said)
