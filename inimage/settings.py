"""Settings derived from a recipe that the image needs as well as the host: the variables its buckets
become, what prefix caching left unset means, a serve field's flag, and the hybrid geometry the rules
check. Pure functions, standard library only; the recipe is the schema's model on the host and the
rendered JSON (read through runtime.View) in the image, so the types below are for reading only."""

from __future__ import annotations

import math
from typing import Any

Recipe = Buckets = Serve = Geometry = Any  # cookbook/recipe/schema.py's models, or runtime.View in the image

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
NEGATABLE_FLAGS = {"enable_prefix_caching", "enable_chunked_prefill", "async_scheduling"}


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
