"""cookbook/prove/measured.py: a recipe's published rows joined with the latest run of their kind: measured
value, date and image where the run was of the image the recipe builds now; "not measured on this
image" (the last figure kept beside it) where it was not; "not a full run of this image" with what the
run was where it was this image but not the recipe's base, flags, scale or repeats, or its hardware is not
recorded; CPU figures always labelled."""

from types import SimpleNamespace

import pytest

from cookbook.prove import measured
from cookbook.prove.measured import NOT_FULL, NOT_RUN, NOT_YET, OTHER_IMAGE, Item, Row
from cookbook.prove.results import Measured

HERE, ELSEWHERE = "c" * 64, "d" * 64
ITEMS = [Item("a", "Check A", "8/8"), Item("b", "Check B", "valid")]
DATE, ID = "2026-12-04T10:00:00Z", "sha256:" + "ab" * 32


BASE = SimpleNamespace(image="vault.example/gaudi:1.23", digest=None)  # the recipe's base, as recipe.base
PINNED = SimpleNamespace(image=BASE.image, digest="sha256:" + "e1" * 32)
PULLED = "sha256:" + "d1" * 32  # a registry digest the build recorded for the recipe's base name


def run(content_hash=HERE, hardware="gaudi", names=("a",), image_id=ID, kind="smoke", **what):
    """A full run on the recipe's base unless `what` says otherwise (scale, repeats, args, base_name...)."""
    facts = {"base_name": BASE.image, "base_digest": PULLED, "scale": 1.0, "repeats": 3 if kind == "bench" else None,
             "args": (), **what}
    return Measured(kind, "r", "0" * 64, DATE, "img:tag", image_id, content_hash, hardware,
                    entries={n: {"name": n, "result": f"{n} ok"} for n in names}, **facts)


@pytest.mark.parametrize("name, the_run, base, said", [
    ("a full run on the recipe's base", run(), BASE, None),
    ("on the recipe's pinned digest", run(base_digest=PINNED.digest), PINNED, None),
    ("another image", run(ELSEWHERE), BASE, OTHER_IMAGE),
    ("a --url run", run(None, None, image_id=None, args=None), BASE, OTHER_IMAGE),
    ("a local image named as the base (no registry digest)", run(base_digest=None), BASE,
     "on a local base image of that name, no registry digest (the recipe pins none)"),
    ("a base other than the pinned one", run(), PINNED,
     f"on base digest {PULLED}, not the recipe's pinned {PINNED.digest}"),
    ("another base name", run(base_name="other/base:1"), BASE,
     "on base other/base:1, not the recipe's vault.example/gaudi:1.23"),
    ("hardware not recorded", run(hardware=None), BASE, "hardware not recorded"),
    ("the quick run", run(kind="bench", scale=0.01, repeats=1, args=("--max-model-len", "8192")), BASE,
     "at scale 0.01; median of 1 run; with vLLM flags added: --max-model-len 8192"),
    ("two repeats", run(kind="bench", repeats=2), BASE, "median of 2 runs"),
    ("a file written before these were recorded", run(kind="bench", scale=None, repeats=None, args=None), BASE,
     "scale not recorded; repeats not recorded; vLLM flags not recorded"),
    ("smoke has no repeats", run(scale=1), BASE, None),
])
def test_standing(name, the_run, base, said):
    assert measured.standing(the_run, HERE, base) == said


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
    assert measured.join(ITEMS, the_run, HERE, lambda e: e["result"], base=BASE) == rows


@pytest.mark.parametrize("name, published, the_run, items", [
    ("the recipe's own rows, whatever the run holds", ITEMS, run(names=("a", "z")), ITEMS),
    ("none published, no run: an empty table", [], None, []),
    ("none published (an imported recipe): the run's rows, titled by the run, no published figure", [],
     Measured("smoke", "r", "0", DATE, entries={"k": {"name": "k", "title": "Known answers"}, "x": {"name": "x"}}),
     [Item("k", "Known answers", measured.NONE_PUBLISHED), Item("x", "x", measured.NONE_PUBLISHED)]),
])
def test_items(name, published, the_run, items):
    assert measured.items(published, the_run) == items


def test_a_run_that_is_not_a_full_one_says_what_it_was():
    rows = measured.join(ITEMS, run(hardware=None, scale=0.01), HERE, lambda e: e["result"], base=BASE)
    assert rows == [
        Row("Check A", "8/8", f"{NOT_FULL} (hardware not recorded; at scale 0.01; last run: a ok)", DATE,
            "sha256:abababababab", False),
        Row("Check B", "valid", NOT_RUN, DATE, "sha256:abababababab", False)]


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
