"""The recipe schema: what a recipe.yaml may say. Unknown keys are refused (see recipes.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class GDNGeometry(Strict):
    key_heads: int
    value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int
    ssm_dtype_bytes: int = Field(description="bytes per SSM state element (float32: 4)")
    conv_dtype_bytes: int = 2


class Geometry(Strict):
    """From the checkpoint's config.json; the hybrid KV block is derived from it."""

    layers: int
    attention_layers: int
    gdn_layers: int = 0
    kv_heads: int
    head_dim: int
    kv_cache_dtype_bytes: int = 2
    gdn: GDNGeometry | None = None


class Model(Strict):
    id: StrictStr = Field(description="Hugging Face repo id served by `vllm serve`")
    summary: StrictStr
    architecture: Literal["dense", "moe", "gated-deltanet-hybrid"]
    modalities: list[Literal["text", "image", "video"]]
    reasoning: bool = False
    precision: StrictStr
    native_context: int
    tokens_per_max_image: int | None = None
    hybrid_kv_block: int | None = Field(None, description="stated on the page; must equal the derived one")
    geometry: Geometry


class Hardware(Strict):
    accelerator: Literal["gaudi2", "gaudi3"]
    cards: int
    tensor_parallel: int


class Pin(Strict):
    version: StrictStr
    commit: StrictStr = Field(pattern=r"^[0-9a-f]{40}$")


class Base(Strict):
    """The stock vllm-gaudi image the recipe was validated on."""

    vllm_gaudi: Pin
    vllm: Pin
    gaudi_sw: StrictStr
    image: StrictStr
    digest: StrictStr | None = Field(None, pattern=r"^sha256:[0-9a-f]{64}$")
    python: StrictStr
    site_packages: StrictStr


class Serve(Strict):
    """`vllm serve` flags, one field each, rendered in this order as --kebab-case."""

    tensor_parallel_size: StrictInt | None = None
    max_model_len: StrictInt | None = None
    max_num_seqs: StrictInt | None = None
    gpu_memory_utilization: float | None = None
    block_size: StrictInt | None = None
    max_num_batched_tokens: StrictInt | None = None
    enable_chunked_prefill: StrictBool | None = None
    enable_prefix_caching: StrictBool | None = None
    enable_prompt_tokens_details: StrictBool | None = None
    reasoning_parser: StrictStr | None = None
    enable_auto_tool_choice: StrictBool | None = None
    tool_call_parser: StrictStr | None = None
    limit_mm_per_prompt: dict[str, StrictInt] | None = None
    dtype: StrictStr | None = None
    kv_cache_dtype: StrictStr | None = None
    quantization: StrictStr | None = None
    trust_remote_code: StrictBool | None = None
    seed: StrictInt | None = None


class BucketRange(Strict):
    min: int
    step: int
    max: int


class Buckets(Strict):
    file: StrictStr | None = None
    exponential: bool
    prompt_bs: BucketRange
    decode_bs: BucketRange
    prompt_seq: BucketRange
    decode_block: BucketRange
    summary: StrictStr | None = None


class Fixes(Strict):
    profile: StrictStr
    opt_in: list[StrictStr] = []
    why: dict[StrictStr, StrictStr] = Field(default_factory=dict, description="why this model needs each fix")
    not_needed: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    note: StrictStr | None = None


class Check(Strict):
    """One row of the page's Verified table; the smoke suite runs it by `check` name."""

    name: StrictStr = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    check: StrictStr
    title: StrictStr
    params: dict[StrictStr, object] = Field(default_factory=dict)
    expect: StrictStr


class Verified(Strict):
    setup: StrictStr = Field(description="what the checks ran on")
    kv_pool_tokens: int | None = None
    checks: list[Check]


class Scenario(Strict):
    """One row of the page's Performance table; expected figures as measured on the page."""

    name: StrictStr = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    title: StrictStr
    streams: int
    prompt: Literal["short", "needle"]
    prompt_tokens: int | None = None
    max_tokens: int | None = None
    expect: dict[StrictStr, float | list[float]]


class Performance(Strict):
    method: StrictStr
    scenarios: list[Scenario]


class Rule(Strict):
    """A "what not to do" line of the page, bound to the rule that enforces it."""

    rule: StrictStr
    text: StrictStr


class Section(Strict):
    """A section of the recipe's page in prose (the page's "Prefix caching", say)."""

    title: StrictStr
    text: StrictStr


class Image(Strict):
    port: int = 8000
    health_path: StrictStr = "/health"


class Recipe(Strict):
    schema_version: Literal[1] = Field(alias="schema")
    extends: StrictStr | None = None
    title: StrictStr
    model: Model
    hardware: Hardware
    base: Base
    env: dict[StrictStr, StrictStr]
    serve: Serve
    buckets: Buckets
    fixes: Fixes
    verified: Verified | None = None
    performance: Performance | None = None
    known_issues: list[StrictStr] = []
    rules: list[Rule] = []
    image: Image = Image()
    launch_notes: list[StrictStr] = []
    sections: list[Section] = []
    adds: StrictStr | None = Field(None, description="what this recipe adds over the one it extends, as a phrase")
