"""A smoke run as the recipe page's Verified table (Check | Result | Status), in Markdown."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...host.errors import printable
from . import sizing

if TYPE_CHECKING:
    from .files import Result


def markdown(result: Result) -> str:
    """The page's Verified table (Check | Result), with each row's status."""
    mark = {"passed": "pass", "failed": "**FAIL**", "skipped": "skipped"}
    def cell(text) -> str:  # a server's words, shown: no control characters, no table-breaking bar
        return printable(str(text).replace("\n", " ")).replace("|", "\\|")

    model = cell(result.model).replace("`", "'")  # inside a code span
    lines = [f"Smoke run of `{result.recipe}` against {result.target.get('image') or result.target['url']} "
             f"(`{model}`, context {result.max_model_len} tokens, sizes x{result.factor:.4g}; "
             f"K = {sizing.K} tokens).", "", "| Check | Result | Status |", "|---|---|---|"]
    for row in result.rows:
        lines.append(f"| {cell(row['title'])} | {cell(row['result'])} | {mark[row['status']]} |")
    return "\n".join(lines) + "\n"
