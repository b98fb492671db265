"""Images: N solid-colour squares in one prompt, the colours named in order. The suite makes the
images (PNG, standard library). A text-only model is skipped with the reason, never passed."""

from __future__ import annotations

import base64
import struct
import zlib

from ..openai_client import ServerError
from .core import Context, Outcome, content, said

COLOURS = {"red": (220, 30, 30), "green": (30, 170, 60), "blue": (30, 60, 220), "yellow": (240, 220, 30),
           "black": (0, 0, 0), "white": (255, 255, 255), "orange": (250, 140, 20), "purple": (130, 40, 160)}


def solid_png(rgb: tuple[int, int, int], size: int) -> bytes:
    """A size x size PNG of one colour."""
    row = b"\x00" + bytes(rgb) * size
    raw = zlib.compress(row * size, 9)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", raw) + chunk(b"IEND", b"")


def named_in_order(answer: str, names: list[str]) -> int:
    """How many of the colours the answer names in order, from the first."""
    words = [w.strip(" .,;:*-\n").lower() for w in answer.replace("\n", ",").replace(" ", ",").split(",")]
    words = [w for w in words if w in COLOURS]
    return next((i for i, (a, b) in enumerate(zip(words, names, strict=False)) if a != b), min(len(words), len(names)))


def image_colours(ctx: Context, params: dict) -> Outcome:
    count = int(params.get("images", 4))
    if "image" not in ctx.modalities:
        return Outcome("skipped", "the model takes no images (modalities: " + ", ".join(ctx.modalities) + ")")
    size = int(params.get("size", 64))
    names = [list(COLOURS)[i % len(COLOURS)] for i in range(count)]
    parts: list[dict] = [{"type": "image_url", "image_url": {
        "url": "data:image/png;base64," + base64.b64encode(solid_png(COLOURS[n], size)).decode()}} for n in names]
    parts.append({"type": "text", "text": f"Each of the {count} images is one solid colour. Name the colours in "
                                          "order, as a comma-separated list of plain colour words."})
    try:
        response = ctx.server.chat([{"role": "user", "content": parts}], temperature=0, max_tokens=ctx.budget)
    except ServerError as exc:
        return Outcome("failed", str(exc))
    good = named_in_order(content(response), names)
    return Outcome.count(good, count, [] if good == count else [f"expected {names}, got {said(response)!r}"],
                         " colours named in order")
