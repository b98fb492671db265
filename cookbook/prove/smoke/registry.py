"""The smoke checks by name: a recipe's `verified.checks[].check` -> "module:function", the module
relative to this package when it starts with a dot. Adding a check is its module and one entry here;
a module is imported when a run first asks for one of its checks (as pytest-testinfra's modules map),
so nothing registers by side effect and `invoke validate` knows every name without importing a check."""

from __future__ import annotations

import importlib

from ...host.errors import RecipeError, printable
from .core import Check

CHECKS: dict[str, str] = {
    "health": ".health:health",
    "known-answers": ".answers:known_answers",
    "logit-bias": ".bias:logit_bias",
    "top-logprobs": ".logprobs:top_logprobs",
    "prompt-logprobs": ".logprobs:prompt_logprobs",
    "response-format": ".structured:response_format",
    "tool-call": ".tools:tool_call",
    "tool-call-streamed": ".tools:tool_call_streamed",
    "tool-result": ".tools:tool_result",
    "needle": ".needle:needle",
    "prefix-cache-identity": ".prefix:prefix_cache_identity",
    "image-colours": ".images:image_colours",
}


def find(name: str) -> Check:
    """The function of the check `name` (a key of CHECKS), its module imported on first use."""
    module, _, function = CHECKS[name].partition(":")
    return getattr(importlib.import_module(module, __package__), function)


def known() -> str:
    return "known checks: " + ", ".join(sorted(CHECKS))


def unknown(checks: list) -> list[tuple[int, str]]:
    """The rows (index, check name) whose check the suite does not have."""
    return [(i, c.check) for i, c in enumerate(checks) if c.check not in CHECKS]


def check_names(loaded) -> None:
    """`invoke validate`: every Verified row names a check the suite has. Otherwise a mistyped name
    would pass validation and fail only when smoke runs, on a Gaudi host."""
    bad = unknown(loaded.recipe.verified.checks if loaded.recipe.verified else [])
    if bad:
        i, name = bad[0]
        raise RecipeError(f"verified.checks[{i}] asks for the smoke check {printable(repr(name))}, which the suite "
                          "does not have", where=loaded.line_of(("verified", "checks", i, "check")), hint=known())
