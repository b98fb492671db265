"""The recipe schema: what a recipe.yaml may say. Unknown keys are refused (see recipes.py).

Every string that can reach the image (Dockerfile, labels, argv, entrypoint) has the grammar of its
role (cookbook/host/grammar.py), and no string anywhere holds a control character: a value is refused with
its file, key and line, never rewritten. Numbers carry the bounds vLLM and Docker give them.
"""

from __future__ import annotations

import functools
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from ..host import grammar
from . import hardware


def _refused_by(problem):
    """A validator from a grammar check: `problem(value)` says why a value is refused, or None."""

    def check(value: str) -> str:
        said = problem(value)
        if said:
            raise ValueError(said)
        return value

    return AfterValidator(check)


def _role(role: str):
    return _refused_by(functools.partial(grammar.problem, role))


Text = Annotated[StrictStr, _refused_by(grammar.text_problem)]  # one line: labels, env values, titles
# Notes for readers; never reaches the image.
Prose = Annotated[StrictStr, _refused_by(functools.partial(grammar.text_problem, allow="\n"))]
EnvName = Annotated[StrictStr, _role("env_name")]
Slug = Annotated[StrictStr, _role("slug")]  # fix, profile, rule names: they name files and labels
Ident = Annotated[StrictStr, _role("ident")]  # argv words and versions: never start with '-'
ModelId = Annotated[StrictStr, _role("model_id")]
ImageRef = Annotated[StrictStr, _role("image_ref")]
AbsPath = Annotated[StrictStr, _role("abs_path")]
UrlPath = Annotated[StrictStr, _role("url_path")]
Positive = Annotated[StrictInt, Field(gt=0)]
NonNegative = Annotated[StrictInt, Field(ge=0)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class GDNGeometry(Strict):
    key_heads: Positive
    value_heads: Positive
    key_head_dim: Positive
    value_head_dim: Positive
    conv_kernel: Positive
    ssm_dtype_bytes: Positive = Field(description="bytes per SSM state element (float32: 4)")
    conv_dtype_bytes: Positive = 2


class Geometry(Strict):
    """From the checkpoint's config.json; the hybrid KV block is derived from it."""

    layers: Positive
    attention_layers: NonNegative
    gdn_layers: NonNegative = 0
    kv_heads: Positive
    head_dim: Positive
    kv_cache_dtype_bytes: Positive = 2
    gdn: GDNGeometry | None = None


class Model(Strict):
    id: ModelId = Field(description="Hugging Face repo id served by `vllm serve`")
    family: Text | None = Field(None, description="the model family the recipe index groups by (Llama 3.1, Qwen2.5)")
    weights: Literal["hub", "mounted"] = Field(
        "hub", description="hub: fetched from the Hugging Face Hub into the host's cache before the server starts; "
                           "mounted: the run mounts the model into the container, nothing is fetched")
    summary: Prose
    architecture: Literal["dense", "moe", "gated-deltanet-hybrid"]
    modalities: list[Literal["text", "image", "video"]]
    reasoning: bool = False
    precision: Text
    native_context: Positive
    tokens_per_max_image: Positive | None = None
    hybrid_kv_block: Positive | None = Field(None, description="stated on the page; must equal the derived one")
    geometry: Geometry


class Hardware(Strict):
    # cpu: a recipe served on a CPU (the tests' CPU image): its figures are CPU figures, and only such a
    # recipe's pages may show figures measured on a CPU (measured.misplaced).
    accelerator: Literal[tuple(hardware.ACCELERATORS)]  # gaudi2, gaudi3, cpu: their names and memory are there
    cards: Positive
    tensor_parallel: Positive


class Pin(Strict):
    version: Ident
    commit: StrictStr = Field(pattern=r"^[0-9a-f]{40}$")


Digest = Annotated[StrictStr, Field(pattern=r"^sha256:[0-9a-f]{64}$")]


class BaseImage(Strict):
    """The image a release is built FROM, and where its Python is (a release file's `base`)."""

    image: ImageRef
    digest: Digest | None = None
    python: Annotated[StrictStr, _role("python")]
    site_packages: AbsPath


class Base(BaseImage):
    """The stock vllm-gaudi image the recipe was validated on: its release's base and pins (a recipe file
    may say the image fields over its release's, never the pins)."""

    vllm_gaudi: Pin
    vllm: Pin
    gaudi_sw: Ident


class Serve(Strict):
    """`vllm serve` flags, one field each, rendered in this order as --kebab-case."""

    tensor_parallel_size: Positive | None = None
    max_model_len: Positive | None = None
    max_num_seqs: Positive | None = None
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] | None = None
    block_size: Positive | None = None
    max_num_batched_tokens: Positive | None = None
    enable_chunked_prefill: StrictBool | None = None
    enable_prefix_caching: StrictBool | None = None
    enable_prompt_tokens_details: StrictBool | None = None
    reasoning_parser: Ident | None = None
    enable_auto_tool_choice: StrictBool | None = None
    tool_call_parser: Ident | None = None
    limit_mm_per_prompt: dict[Slug, NonNegative] | None = None
    dtype: Ident | None = None
    kv_cache_dtype: Ident | None = None
    quantization: Ident | None = None
    trust_remote_code: StrictBool | None = None
    seed: NonNegative | None = None
    async_scheduling: StrictBool | None = None
    generation_config: Ident | None = Field(None, description="`vllm` ignores the checkpoint's generation_config.json")


class BucketRange(Strict):
    min: int  # signs and order are the rule bucket-ranges-consistent's, which explains them
    step: int
    max: int


class Buckets(Strict):
    file: AbsPath | None = None
    exponential: bool
    prompt_bs: BucketRange
    decode_bs: BucketRange
    prompt_seq: BucketRange
    decode_block: BucketRange
    summary: Prose | None = None


class Fixes(Strict):
    profile: Slug = Field(description="a file name under fixes/profiles/, so a slug: it cannot climb out")
    opt_in: list[Slug] = []
    why: dict[Slug, Prose] = Field(default_factory=dict, description="why this model needs each fix")
    not_needed: dict[Slug, Prose] = Field(default_factory=dict)
    note: Prose | None = None


class Check(Strict):
    """One row of the page's Verified table; the smoke suite runs it by `check` name."""

    name: StrictStr = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    check: Slug
    title: Prose
    params: dict[StrictStr, object] = Field(default_factory=dict)
    expect: Prose


class Verified(Strict):
    setup: Prose = Field(description="what the checks ran on")
    kv_pool_tokens: Positive | None = None
    checks: list[Check]


class Scenario(Strict):
    """One row of the page's Performance table; expected figures as measured on the page."""

    name: StrictStr = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    title: Prose
    streams: Positive
    prompt: Literal["short", "needle"]
    prompt_tokens: Positive | None = None
    max_tokens: Positive | None = None
    expect: dict[Slug, float | list[float]]


class Performance(Strict):
    method: Prose
    scenarios: list[Scenario]


class Rule(Strict):
    """A "what not to do" line of the page, bound to the rule that enforces it."""

    rule: Slug
    text: Prose


class Section(Strict):
    """A section of the recipe's page in prose (the page's "Prefix caching", say)."""

    title: Text
    text: Prose


KeyPath = Annotated[StrictStr, Field(pattern=r"^[a-z_][a-z0-9_]*(\.[A-Za-z0-9_]+)+$")]


class Provenance(Strict):
    """Where an imported recipe's values come from: written by `invoke recipes.import` from vllm-gaudi's
    own defaults at the release's commit, and kept true by `recipes.import --check`."""

    importer: Literal["vllm-gaudi-defaults"]
    commit: StrictStr = Field(pattern=r"^[0-9a-f]{40}$", description="the vllm-gaudi commit read")
    sources: dict[KeyPath, Prose] = Field(description="a dotted key of this recipe -> the file, row and column, "
                                                     "or the autocalc rule, it was taken from")
    overrides: dict[KeyPath, Prose] = Field(default_factory=dict,
                                            description="a dotted key the cookbook sets otherwise -> why")


class Image(Strict):
    port: Annotated[StrictInt, Field(ge=1, le=65535)] = 8000
    health_path: UrlPath = "/health"


class Recipe(Strict):
    schema_version: Literal[1] = Field(alias="schema")
    extends: Text | None = None
    release: Slug = Field(description="a file name under releases/: its base and fix profile are the recipe's")
    title: Text
    model: Model
    hardware: Hardware
    base: Base
    env: dict[EnvName, Text]
    serve: Serve
    buckets: Buckets
    fixes: Fixes
    verified: Verified | None = None
    performance: Performance | None = None
    known_issues: list[Prose] = []
    rules: list[Rule] = []
    image: Image = Image()
    launch_notes: list[Prose] = []
    provenance: Provenance | None = None
    sections: list[Section] = []
    adds: Prose | None = Field(None, description="what this recipe adds over the one it extends, as a phrase")
