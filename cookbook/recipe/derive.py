"""Settings derived from a recipe on the host: its id, its `vllm serve` command and its image tags. Pure
functions: no files, no processes. What the image needs too (the bucket variables, prefix caching's
default, the hybrid geometry) is inimage/settings.py, shared by both."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from inimage.settings import NEGATABLE_FLAGS, flag

if TYPE_CHECKING:
    from .schema import Recipe, Serve


def recipe_id(folder_name: str) -> str:
    """A recipe's id is its model folder's name, lower-cased: Qwen3.5-27B-FP8 -> qwen3.5-27b-fp8."""
    return folder_name.lower()


def serve_args(serve: Serve) -> list[str]:
    """The `vllm serve` flags of a recipe, in the schema's order, as argv words (unquoted)."""
    from .schema import Serve

    args: list[str] = []
    for field in Serve.model_fields:
        value = getattr(serve, field)
        if value is None:
            continue
        if isinstance(value, bool):
            if value:
                args.append(flag(field))
            elif field in NEGATABLE_FLAGS:
                args.append("--no-" + field.replace("_", "-"))
            continue
        if isinstance(value, dict):
            value = json.dumps(value, separators=(",", ":"))
        args += [flag(field), str(value)]
    return args


# vLLM's own default; a recipe's other port is said to `vllm serve`, so the port the image exposes
# and probes is the one vLLM listens on (and the page's command stays the page's).
VLLM_DEFAULT_PORT = 8000


def serve_command(recipe: Recipe) -> list[str]:
    port = [] if recipe.image.port == VLLM_DEFAULT_PORT else ["--port", str(recipe.image.port)]
    return ["vllm", "serve", recipe.model.id, *serve_args(recipe.serve), *port]


def tag_mark(standin: bool, allow_unwritten: bool) -> str:
    """What every tag of an image that must never be published says: `standin` for the offline
    stand-in base, `unwritten` for a real-base build with --allow-unwritten-fixes; else nothing."""
    return "standin" if standin else "unwritten" if allow_unwritten else ""


def image_tags(repo: str, rid: str, vllm_gaudi_version: str, content_hash: str, mark: str = "") -> list[str]:
    """The exact tag (the content hash's prefix) first, then the moving one; the mark on both."""
    suffix = f"-{mark}" if mark else ""
    return [
        f"{repo}/{rid}:{vllm_gaudi_version}-{content_hash[:8]}{suffix}",
        f"{repo}/{rid}:{vllm_gaudi_version}{suffix}",
    ]
