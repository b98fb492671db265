"""The recipe rules: what the pages learned the hard way, as hard errors that explain why.

Each rule is a pure function of a recipe and its fix profile, returning violations. Rules are
general: they test the facts a recipe states (architecture, accelerator, context, flags), so a new
recipe gets them for free. A recipe's `rules:` section binds its "what not to do" lines to rule names.

The host runs them on the schema's models (`invoke validate`); the image carries this package and runs
the same rules on its final command and environment before it starts vLLM (runtime.py), so they are
never written twice.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import fixplan, settings

# The schema's models on the host (cookbook/recipe/schema.py), runtime.View in the image.
Recipe = BucketRange = Any


GDN_FIX = "gdn-prefix-cache"
DECODE_PAD_FIX = "hybrid-decode-pad"
COMPACT_GDN = "VLLM_COMPACT_GDN"
# Measured on Gaudi 2 (recipe page): at 256K context a cold prefill past ~131K died with
# "PT_DEVMEM OOM: No enough memory for defragment" once chunks reached 3,584 tokens.
GAUDI2_LONG_CONTEXT = 262144
GAUDI2_LONG_CONTEXT_MAX_BATCHED = 3584
# Tensor parallel runs HPU graphs across cards; in lazy mode their collectives need this on (vllm-gaudi's
# docs, configuration/env_variables.md; its platform sets it only when the variable is absent).
LAZY_COLLECTIVES = "PT_HPU_ENABLE_LAZY_COLLECTIVES"
LAZY_COLLECTIVES_ON = {"true", "1"}  # case aside, as the Gaudi software reads a boolean variable


@dataclass(frozen=True)
class Profile:
    """What the rules need of a fix profile: the pack order and which fixes are opt-in."""

    name: str
    order: list[str]
    opt_in: list[str]


@dataclass(frozen=True)
class Violation:
    rule: str
    key: tuple  # key path in the recipe, for the line number
    message: str


Rule = Callable[["Recipe", Profile], list[tuple[tuple, str]]]
RULES: dict[str, Rule] = {}


def rule(name: str):
    def register(fn: Rule) -> Rule:
        RULES[name] = fn
        return fn

    return register


def check(recipe: Recipe, profile: Profile) -> list[Violation]:
    """Every rule against one recipe; each finding as (rule, key path, message)."""
    found = []
    for name, fn in RULES.items():
        for key, message in fn(recipe, profile):
            found.append(Violation(name, key, message))
    return found


def _hybrid(r: Recipe) -> bool:
    return r.model.architecture == "gated-deltanet-hybrid"


@rule("no-lazy-mode-for-gdn-hybrids")
def no_lazy_mode(r: Recipe, p: Profile):
    if not _hybrid(r):
        return []
    value = r.env.get("PT_HPU_LAZY_MODE")
    if value == "0":
        return []
    said = "unset (the Gaudi software then picks its default)" if value is None else f"{value!r}"
    return [(("env", "PT_HPU_LAZY_MODE"),
             f"PT_HPU_LAZY_MODE is {said}, but Gated DeltaNet hybrids must run in compile mode: "
             "in lazy mode the GDN layers lose their state cache at the first decode. Set it to \"0\".")]


@rule("prefix-caching-needs-gdn-fix")
def prefix_caching_needs_gdn_fix(r: Recipe, p: Profile):
    if not (_hybrid(r) and settings.prefix_caching_on(r.serve)):
        return []
    out = []
    said = "on" if r.serve.enable_prefix_caching else ("unset, which the cookbook counts as on (vLLM 0.26.0 "
                                                        "leaves it off for hybrids; a later default may not)")
    if GDN_FIX not in r.fixes.opt_in:
        out.append((("fixes", "opt_in"),
                    f"prefix caching is {said}, but {GDN_FIX} is not among the opt-in fixes: on the stock "
                    "release a prefix-cache hit on a GDN layer resumes from the wrong state. Add "
                    f"{GDN_FIX} to fixes.opt_in, or set serve.enable_prefix_caching: false."))
    if GDN_FIX not in r.fixes.opt_in and r.env.get(COMPACT_GDN) != "1":  # with the fix: gdn-fix-needs-compact-gdn
        out.append((("env", COMPACT_GDN),
                    f"prefix caching is {said} on a GDN hybrid, which needs VLLM_COMPACT_GDN=1 (found "
                    f"{r.env.get(COMPACT_GDN)!r}): {GDN_FIX} keeps GDN state in compact per-request "
                    "slots and refuses to start without it."))
    return out


@rule("gdn-fix-needs-compact-gdn")
def gdn_fix_needs_compact_gdn(r: Recipe, p: Profile):
    if GDN_FIX not in r.fixes.opt_in or r.env.get(COMPACT_GDN) == "1":
        return []
    return [(("env", COMPACT_GDN),
             f"{GDN_FIX} is opted in, which needs VLLM_COMPACT_GDN=1 whether prefix caching is on or off "
             f"(found {r.env.get(COMPACT_GDN)!r}): the fix keeps GDN state in compact per-request slots and "
             "refuses to start without it. Set it to \"1\", or leave the fix out.")]


@rule("gdn-fix-needs-decode-pad")
def gdn_fix_needs_decode_pad(r: Recipe, p: Profile):
    if GDN_FIX not in r.fixes.opt_in:
        return []
    chosen = fixplan.select(p.order, p.opt_in, r.fixes.opt_in)
    if DECODE_PAD_FIX in chosen and chosen.index(DECODE_PAD_FIX) < chosen.index(GDN_FIX):
        return []
    return [(("fixes", "opt_in"),
             f"{GDN_FIX} needs {DECODE_PAD_FIX} applied before it (with the hybrid KV block split into "
             f"kernel blocks, decode padding writes into another request's live block), but profile "
             f"{p.name} does not put it first.")]


def _geometry_block(r: Recipe) -> int | None:
    """The hybrid KV block the geometry gives at the recipe's kernel block (None: no block size, no GDN)."""
    return None if r.serve.block_size is None else settings.hybrid_kv_block(r.model.geometry, r.serve.block_size)


@rule("hybrid-kv-block-matches-geometry")
def hybrid_block_matches(r: Recipe, p: Profile):
    if r.model.hybrid_kv_block is None or r.serve.block_size is None:
        return []
    derived = _geometry_block(r)
    if derived == r.model.hybrid_kv_block:
        return []
    return [(("model", "hybrid_kv_block"),
             f"model.hybrid_kv_block says {r.model.hybrid_kv_block}, but the geometry gives {derived} "
             f"(one GDN layer's state, {settings.gdn_state_bytes(r.model.geometry):,} B, in whole "
             f"{r.serve.block_size}-token kernel blocks of attention KV)."),]


@rule("batched-tokens-whole-hybrid-blocks")
def batched_tokens_whole_blocks(r: Recipe, p: Profile):
    if not (_hybrid(r) and settings.prefix_caching_on(r.serve)):
        return []
    block, mnbt = _geometry_block(r), r.serve.max_num_batched_tokens
    if block is None or (mnbt is not None and mnbt % block == 0):
        return []
    return [(("serve", "max_num_batched_tokens"),
             f"with prefix caching, prefill chunks end on {block}-token hybrid KV blocks, so "
             f"--max-num-batched-tokens must be a whole multiple of {block}; it is {mnbt}. "
             f"Use {max(block, (mnbt or block) // block * block)}.")]


@rule("batched-tokens-at-256k-on-gaudi2")
def batched_tokens_long_context(r: Recipe, p: Profile):
    mnbt, mml = r.serve.max_num_batched_tokens, r.serve.max_model_len
    if r.hardware.accelerator != "gaudi2" or mml is None or mml < GAUDI2_LONG_CONTEXT or mnbt is None:
        return []
    if mnbt < GAUDI2_LONG_CONTEXT_MAX_BATCHED:
        return []
    return [(("serve", "max_num_batched_tokens"),
             f"--max-num-batched-tokens {mnbt} at {mml:,} context on Gaudi 2: at 3,584 or more a cold "
             "prefill past about 131K context died with \"PT_DEVMEM OOM: No enough memory for "
             "defragment\". Keep it below 3,584.")]


@rule("image-limit-fits-context")
def image_limit_fits(r: Recipe, p: Profile):
    images = (r.serve.limit_mm_per_prompt or {}).get("image", 0)
    if not images:
        return []
    per = r.model.tokens_per_max_image
    if per is None:
        return [(("model", "tokens_per_max_image"),
                 "limit_mm_per_prompt allows images, so model.tokens_per_max_image must say how many "
                 "tokens one maximum-size image takes (to check that the limit fits the context).")]
    mml = r.serve.max_model_len or r.model.native_context
    if images * per <= mml:
        return []
    return [(("serve", "limit_mm_per_prompt"),
             f"{images} images x {per:,} tokens = {images * per:,} tokens does not fit the "
             f"{mml:,}-token context; lower the image limit to {mml // per}.")]


@rule("bucket-ranges-consistent")
def bucket_ranges(r: Recipe, p: Profile):
    out = []
    for field in settings.BUCKET_ENV:
        rng: BucketRange = getattr(r.buckets, field)
        key = ("buckets", field)
        if rng.step <= 0:
            out.append((key + ("step",), f"buckets.{field}.step is {rng.step}; it must be above 0."))
        if rng.min <= 0:
            out.append((key + ("min",), f"buckets.{field}.min is {rng.min}; it must be above 0."))
        if rng.min > rng.max:
            out.append((key + ("min",), f"buckets.{field}: min {rng.min} is above max {rng.max}."))
    return out


@rule("buckets-cover-serve")
def buckets_cover(r: Recipe, p: Profile):
    b, s = r.buckets, r.serve
    out = []
    if s.max_num_seqs is not None and b.decode_bs.max < s.max_num_seqs:
        out.append((("buckets", "decode_bs", "max"),
                    f"decode batch buckets stop at {b.decode_bs.max}, below --max-num-seqs "
                    f"{s.max_num_seqs}: larger batches would run unwarmed shapes."))
    # A prompt reaches the model in chunks of at most --max-num-batched-tokens (vllm-gaudi's prompt query
    # buckets, which prompt_seq's variables feed, default to that bound); unchunked, as one whole prompt.
    chunked = s.enable_chunked_prefill is not False and s.max_num_batched_tokens is not None
    if s.max_model_len is not None:
        need, said = ((min(s.max_model_len, s.max_num_batched_tokens), "the largest prefill chunk (min of "
                       f"--max-model-len {s.max_model_len:,} and --max-num-batched-tokens "
                       f"{s.max_num_batched_tokens:,})") if chunked else
                      (s.max_model_len, f"--max-model-len {s.max_model_len:,}"))
        if b.prompt_seq.max < need:
            out.append((("buckets", "prompt_seq", "max"),
                        f"prompt length buckets stop at {b.prompt_seq.max:,}, below {said}."))
    if s.max_model_len is not None and s.block_size:
        need = math.ceil(s.max_model_len / s.block_size)
        if b.decode_block.max < need:
            out.append((("buckets", "decode_block", "max"),
                        f"decode block buckets stop at {b.decode_block.max:,}, below the {need:,} "
                        f"blocks one {s.max_model_len:,}-token sequence needs."))
    return out


@rule("bucket-env-from-buckets")
def bucket_env_derived(r: Recipe, p: Profile):
    return [(("env", name),
             f"{name} is derived from `buckets`; say it there, not in env, so it is said once.")
            for name in r.env if name in settings.derived_env_names()]


@rule("tensor-parallel-matches-hardware")
def tp_matches(r: Recipe, p: Profile):
    tp = r.serve.tensor_parallel_size
    out = []
    if tp is not None and tp != r.hardware.tensor_parallel:
        out.append((("serve", "tensor_parallel_size"),
                    f"--tensor-parallel-size {tp} differs from hardware.tensor_parallel "
                    f"{r.hardware.tensor_parallel}."))
    if r.hardware.tensor_parallel > r.hardware.cards:
        out.append((("hardware", "tensor_parallel"),
                    f"tensor parallel {r.hardware.tensor_parallel} needs more than the "
                    f"{r.hardware.cards} card(s) the recipe names."))
    return out


@rule("lazy-collectives-for-tensor-parallel")
def lazy_collectives(r: Recipe, p: Profile):
    tp = r.serve.tensor_parallel_size or r.hardware.tensor_parallel
    if tp <= 1 or fixplan.hpu_mode(r.env) != "lazy":
        return []
    value = r.env.get(LAZY_COLLECTIVES)
    if value is not None and value.strip().lower() in LAZY_COLLECTIVES_ON:
        return []
    # Unset is refused too: vllm-gaudi 0.26.0 turns it on when absent, but the recipe says what its run relies
    # on rather than a release's default.
    said = "unset" if value is None else f"{value!r}"
    return [(("env", LAZY_COLLECTIVES),
             f"{LAZY_COLLECTIVES} is {said}, but tensor parallel {tp} in lazy mode (PT_HPU_LAZY_MODE=1) runs "
             "HPU graphs whose collectives across cards need it on. Set it to \"true\", or run in compile mode.")]


@rule("context-within-native")
def context_within_native(r: Recipe, p: Profile):
    mml = r.serve.max_model_len
    if mml is None or mml <= r.model.native_context:
        return []
    return [(("serve", "max_model_len"),
             f"--max-model-len {mml:,} is past the model's native context {r.model.native_context:,}.")]


@rule("auto-tool-choice-needs-parser")
def auto_tool_choice(r: Recipe, p: Profile):
    if r.serve.enable_auto_tool_choice and not r.serve.tool_call_parser:
        return [(("serve", "tool_call_parser"),
                 "--enable-auto-tool-choice needs --tool-call-parser; vLLM refuses to start without it.")]
    return []


@rule("fixes-in-profile")
def fixes_in_profile(r: Recipe, p: Profile):
    out = []
    for i, name in enumerate(r.fixes.opt_in):
        if name not in p.opt_in:
            known = ", ".join(p.opt_in)
            out.append((("fixes", "opt_in", i),
                        f"{name!r} is not an opt-in fix of profile {p.name} (opt-in fixes: {known})."))
    for section in ("why", "not_needed"):
        for name in getattr(r.fixes, section):
            if name not in p.order:
                out.append((("fixes", section, name), f"{name!r} is not a fix of profile {p.name}."))
    return out


@rule("page-rules-exist")
def page_rules_exist(r: Recipe, p: Profile):
    return [(("rules", i, "rule"), f"{item.rule!r} is not a known rule; known: {', '.join(sorted(RULES))}.")
            for i, item in enumerate(r.rules) if item.rule not in RULES]
