"""Settings derived from a recipe. Pure functions: no files, no processes.

Standard library only at import time: the image's entrypoint runs the rules (rules.py) with this
module to check its final command (see runtime.py); the schema is imported for typing only."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .schema import Buckets, Geometry, Recipe, Serve

# Prefix caching left unset counts as on. vLLM 0.26.0's default is on for most models but off for
# hybrids (EngineArgs: supported and not is_hybrid); a recipe that relies on that default would change
# meaning with the next release's default, so the rules read "not said" as the riskier "on".
PREFIX_CACHING_DEFAULT = True

# Bucket ranges and the vllm-gaudi variables they become, in the order the page lists them.
BUCKET_ENV = {
    "prompt_bs": "VLLM_PROMPT_BS_BUCKET",
    "decode_bs": "VLLM_DECODE_BS_BUCKET",
    "prompt_seq": "VLLM_PROMPT_SEQ_BUCKET",
    "decode_block": "VLLM_DECODE_BLOCK_BUCKET",
}
BUCKET_FILE_ENV = "VLLM_BUCKETING_FROM_FILE"
EXPONENTIAL_ENV = "VLLM_EXPONENTIAL_BUCKETING"

# Flags that vLLM declares with BooleanOptionalAction: `false` must be said as --no-<flag>,
# because leaving them out means vLLM's default (prefix caching is on by default).
NEGATABLE_FLAGS = {"enable_prefix_caching", "enable_chunked_prefill"}


def recipe_id(folder_name: str) -> str:
    """A recipe's id is its model folder's name, lower-cased: Qwen3.5-27B-FP8 -> qwen3.5-27b-fp8."""
    return folder_name.lower()


def bucket_env(buckets: Buckets) -> dict[str, str]:
    env = {EXPONENTIAL_ENV: "True" if buckets.exponential else "False"}
    if buckets.file:
        env[BUCKET_FILE_ENV] = buckets.file
    for field, prefix in BUCKET_ENV.items():
        rng = getattr(buckets, field)
        env[f"{prefix}_MIN"] = str(rng.min)
        env[f"{prefix}_STEP"] = str(rng.step)
        env[f"{prefix}_MAX"] = str(rng.max)
    return env


def derived_env_names() -> set[str]:
    names = {EXPONENTIAL_ENV, BUCKET_FILE_ENV}
    for prefix in BUCKET_ENV.values():
        names |= {f"{prefix}_MIN", f"{prefix}_STEP", f"{prefix}_MAX"}
    return names


def runtime_env(recipe: Recipe) -> dict[str, str]:
    """Every variable the image sets: the recipe's env, then the ones derived from its buckets."""
    return {**recipe.env, **bucket_env(recipe.buckets)}


def prefix_caching_on(serve: Serve) -> bool:
    if serve.enable_prefix_caching is None:
        return PREFIX_CACHING_DEFAULT
    return serve.enable_prefix_caching


def flag(field: str) -> str:
    return "--" + field.replace("_", "-")


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


def gdn_state_bytes(geometry: Geometry) -> int:
    """One Gated DeltaNet layer's per-request state: the SSM state plus the conv state."""
    g = geometry.gdn
    if g is None:
        return 0
    ssm = g.value_heads * g.key_head_dim * g.value_head_dim * g.ssm_dtype_bytes
    conv_channels = 2 * g.key_heads * g.key_head_dim + g.value_heads * g.value_head_dim
    conv = conv_channels * (g.conv_kernel - 1) * g.conv_dtype_bytes
    return ssm + conv


def attention_bytes_per_token(geometry: Geometry) -> int:
    """One attention layer's K and V for one token."""
    return 2 * geometry.kv_heads * geometry.head_dim * geometry.kv_cache_dtype_bytes


def hybrid_kv_block(geometry: Geometry, kernel_block: int) -> int | None:
    """Tokens in one hybrid KV block: the smallest whole number of kernel blocks whose attention
    page can hold one GDN layer's state (so a GDN checkpoint fits in its block's own page)."""
    state = gdn_state_bytes(geometry)
    if state == 0:
        return None
    tokens = math.ceil(state / attention_bytes_per_token(geometry))
    return math.ceil(tokens / kernel_block) * kernel_block


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
