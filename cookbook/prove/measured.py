"""The results loop on a recipe page: each Verified check and performance scenario joined with the
latest run of its kind (cookbook/prove/results.py), as published value, measured value, date and image.

A run counts for the page only when it ran the image the recipe builds now: its content hash (the
image's `cookbook.content.hash` label, recorded by the smoke and bench writers) equals the hash of the
build context this checkout gives for the recipe on the same base (docs.current_image), which the docs
step computes from the checkout and the run's file alone. Otherwise the row says "not measured on this
image", keeping the last figure beside it for the reader. A run of this image stands as measured only
when it was a full one (`standing`): the recipe's own base, the hardware the server reported, scale 1,
FULL_REPEATS repeats or more, and the recipe's vLLM flags alone; otherwise the row says what the run
was beside its figure. Figures measured on a CPU are always labelled so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .results import Measured

NOT_YET = "not measured yet"
OTHER_IMAGE = "not measured on this image"
NOT_RUN = "not run"
NOT_FULL = "not a full run of this image"
NONE_PUBLISHED = "none published"
FULL_REPEATS = 3  # bench's default: a median of fewer is a quick look, not the recipe's figure


@dataclass(frozen=True)
class Item:
    """A row the recipe publishes: a check or a scenario, by name."""

    name: str
    title: str
    published: str


@dataclass(frozen=True)
class Row:
    title: str
    published: str
    measured: str
    date: str
    image: str
    current: bool  # measured on the image the recipe builds now


def short_id(image_id: str | None) -> str:
    """`sha256:` and the first 12 hex digits, as `docker images` shows an id."""
    if not image_id:
        return "not recorded"
    algo, _, hexa = image_id.partition(":")
    return f"{algo}:{hexa[:12]}" if hexa else image_id[:19]


def on_hardware(text: str, run: Measured) -> str:
    return f"{text} (on CPU)" if run.hardware == "cpu" else text


def misplaced(accelerator: str, run: Measured | None) -> str | None:
    """Why a run may not stand as a recipe's figures (None: it may): one measured on a CPU, for a recipe
    that runs on a Gaudi. A CPU recipe's own CPU runs stay (labelled "on CPU" by on_hardware)."""
    if run is not None and run.hardware == "cpu" and accelerator != "cpu":
        return "measured on a CPU (target.hardware: cpu)"
    return None


def standing(run: Measured, current_image: str, base) -> str | None:
    """None when `run` stands as measured on the image the recipe builds now; else what the run was, in
    the page's words. `base` is the recipe's (`image`, `digest`): a run counts on the base the recipe
    names, by its pinned digest, else by a registry digest of that name (a local image given the name,
    which has none, does not)."""
    if run.content_hash is None or run.content_hash != current_image:
        return OTHER_IMAGE
    said = []
    if run.base_name != base.image:
        said.append(f"on base {run.base_name or 'not recorded'}, not the recipe's {base.image}")
    elif base.digest and run.base_digest != base.digest:
        said.append(f"on base digest {run.base_digest or 'not recorded'}, not the recipe's pinned {base.digest}")
    elif not run.base_digest:
        said.append("on a local base image of that name, no registry digest (the recipe pins none)")
    if run.hardware is None:
        said.append("hardware not recorded")
    if run.scale != 1:
        said.append(f"at scale {run.scale:g}" if run.scale is not None else "scale not recorded")
    if run.kind == "bench" and (run.repeats or 0) < FULL_REPEATS:
        said.append(f"median of {run.repeats} run{'s' if run.repeats != 1 else ''}" if run.repeats
                    else "repeats not recorded")
    if run.args is None:
        said.append("vLLM flags not recorded")
    elif run.args:
        said.append("with vLLM flags added: " + " ".join(run.args))
    return "; ".join(said) or None


def items(published: list[Item], run: Measured | None) -> list[Item]:
    """The rows a table shows: the recipe's own, else (a recipe that publishes none, such as one imported
    from upstream's defaults) the rows its latest run recorded, each with no published figure, so that a
    run of this cookbook fills an empty table as it fills a published one."""
    if published or run is None:
        return published
    return [Item(name, str(entry.get("title") or name), NONE_PUBLISHED) for name, entry in run.entries.items()]


def join(items: list[Item], run: Measured | None, current_image: str,
         value: Callable[[dict], str], *, base) -> list[Row]:
    """The page's rows: `value` turns a run's entry into the page's words; `base` as for standing."""
    if run is None:
        return [Row(i.title, i.published, NOT_YET, "-", "-", False) for i in items]
    said = standing(run, current_image, base)
    rows = []
    for i in items:
        entry = run.entry(i.name)
        measured = on_hardware(value(entry), run) if entry is not None else NOT_RUN
        if said == OTHER_IMAGE:
            measured = OTHER_IMAGE + (f" (last run: {measured})" if entry is not None else "")
        elif said and entry is not None:  # a row the run left out stays "not run"
            measured = f"{NOT_FULL} ({said}; last run: {measured})"
        rows.append(Row(i.title, i.published, measured, run.date, short_id(run.image_id), said is None))
    return rows


def smoke_value(entry: dict) -> str:
    """A smoke row as the page says it: its result, else passed/failed/skipped."""
    status = entry.get("status") or {True: "passed", False: "failed"}.get(entry.get("passed"), "skipped")
    return str(entry.get("result") or status) + (" (failed)" if status == "failed" and entry.get("result") else "")
