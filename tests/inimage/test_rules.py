"""Every rule, with good and bad inputs and its message, on variants of the reference recipe."""

import pytest

from cookbook.host.errors import RecipeError
from cookbook.recipe import recipes
from inimage import rules

from .. import multicard
from ..conftest import DELETE, variant

TP4 = multicard.CHANGES  # a dense model in lazy mode at tensor parallel 4 on four cards

# (case, changes to the reference recipe, rule expected to fire or None, words the message must have)
CASES = [
    ("reference passes", {}, None, None),
    ("lazy mode on a hybrid", {"env.PT_HPU_LAZY_MODE": "1"}, "no-lazy-mode-for-gdn-hybrids", "lose their state"),
    ("lazy mode unset on a hybrid", {"env.PT_HPU_LAZY_MODE": DELETE}, "no-lazy-mode-for-gdn-hybrids", "unset"),
    ("lazy mode fine on a dense model",
     {"env.PT_HPU_LAZY_MODE": "1", "model.architecture": "dense", "serve.enable_prefix_caching": False,
      "model.hybrid_kv_block": None, "fixes.opt_in": []}, None, None),
    ("prefix caching without gdn fix", {"fixes.opt_in": []}, "prefix-caching-needs-gdn-fix",
     "gdn-prefix-cache is not among the opt-in fixes"),
    ("prefix caching unset without gdn fix", {"fixes.opt_in": [], "serve.enable_prefix_caching": DELETE},
     "prefix-caching-needs-gdn-fix", "unset, which the cookbook counts as on"),
    ("prefix caching without gdn fix and COMPACT_GDN=0", {"fixes.opt_in": [], "env.VLLM_COMPACT_GDN": "0"},
     "prefix-caching-needs-gdn-fix", "needs VLLM_COMPACT_GDN=1"),
    ("gdn fix with COMPACT_GDN=0", {"env.VLLM_COMPACT_GDN": "0"}, "gdn-fix-needs-compact-gdn",
     "whether prefix caching is on or off"),
    ("gdn fix, prefix caching off, COMPACT_GDN=0",
     {"serve.enable_prefix_caching": False, "env.VLLM_COMPACT_GDN": "0"}, "gdn-fix-needs-compact-gdn",
     "needs VLLM_COMPACT_GDN=1"),
    ("gdn fix, prefix caching off, COMPACT_GDN unset",
     {"serve.enable_prefix_caching": False, "env.VLLM_COMPACT_GDN": DELETE}, "gdn-fix-needs-compact-gdn",
     "found None"),
    ("prefix caching off needs no gdn fix",
     {"fixes.opt_in": [], "serve.enable_prefix_caching": False, "env.VLLM_COMPACT_GDN": "0"}, None, None),
    ("batched tokens not whole blocks", {"serve.max_num_batched_tokens": 2048}, "batched-tokens-whole-hybrid-blocks",
     "whole multiple of 896"),
    ("batched tokens at 3584 on 256K", {"serve.max_num_batched_tokens": 3584}, "batched-tokens-at-256k-on-gaudi2",
     "PT_DEVMEM OOM"),
    ("3584 is fine at 128K",
     {"serve.max_num_batched_tokens": 3584, "serve.max_model_len": 131072, "buckets.prompt_seq.max": 131072,
      "serve.limit_mm_per_prompt": {"image": 8, "video": 0}}, None, None),
    ("3584 is fine on gaudi3", {"serve.max_num_batched_tokens": 3584, "hardware.accelerator": "gaudi3"}, None, None),
    ("images overflow the context", {"serve.limit_mm_per_prompt": {"image": 17, "video": 0}},
     "image-limit-fits-context", "17 images x 16,384 tokens"),
    ("images without tokens per image", {"model.tokens_per_max_image": DELETE}, "image-limit-fits-context",
     "tokens_per_max_image"),
    ("bucket min above max", {"buckets.prompt_bs.min": 9}, "bucket-ranges-consistent", "min 9 is above max 8"),
    ("bucket step zero", {"buckets.decode_block.step": 0}, "bucket-ranges-consistent", "must be above 0"),
    ("decode buckets below max-num-seqs", {"buckets.decode_bs.max": 16}, "buckets-cover-serve",
     "below --max-num-seqs 32"),
    ("prompt buckets below the largest chunk", {"buckets.prompt_seq.max": 1024}, "buckets-cover-serve",
     "below the largest prefill chunk (min of --max-model-len 262,144 and --max-num-batched-tokens 1,792)"),
    ("unchunked prompt buckets below max-model-len", {"serve.enable_chunked_prefill": False,
                                                      "buckets.prompt_seq.max": 131072}, "buckets-cover-serve",
     "below --max-model-len 262,144"),
    ("decode blocks below one sequence", {"buckets.decode_block.max": 1024}, "buckets-cover-serve",
     "2,048 blocks"),
    ("bucket var in env", {"env.VLLM_DECODE_BS_BUCKET_MAX": "32"}, "bucket-env-from-buckets", "derived from"),
    ("tp differs from hardware", {"serve.tensor_parallel_size": 2}, "tensor-parallel-matches-hardware",
     "differs from hardware.tensor_parallel"),
    ("tp above cards", {"serve.tensor_parallel_size": 2, "hardware.tensor_parallel": 2},
     "tensor-parallel-matches-hardware", "more than the 1 card"),
    ("tp 4 on 4 cards, lazy collectives on", TP4, None, None),
    ("tp 4 in lazy mode, lazy collectives off", {**TP4, "env.PT_HPU_ENABLE_LAZY_COLLECTIVES": "false"},
     "lazy-collectives-for-tensor-parallel", "'false', but tensor parallel 4 in lazy mode"),
    ("tp 4 in lazy mode, lazy collectives unset", {**TP4, "env.PT_HPU_ENABLE_LAZY_COLLECTIVES": DELETE},
     "lazy-collectives-for-tensor-parallel", "is unset"),
    ("tp 4 in lazy mode, lazy collectives 1", {**TP4, "env.PT_HPU_ENABLE_LAZY_COLLECTIVES": "1"}, None, None),
    ("tp 4 in lazy mode, lazy collectives True", {**TP4, "env.PT_HPU_ENABLE_LAZY_COLLECTIVES": "True"}, None, None),
    ("tp 4 in compile mode needs no lazy collectives",
     {**TP4, "env.PT_HPU_LAZY_MODE": "0", "env.PT_HPU_ENABLE_LAZY_COLLECTIVES": "false"}, None, None),
    ("tp 1 in lazy mode needs no lazy collectives",
     {**TP4, "hardware.tensor_parallel": 1, "serve.tensor_parallel_size": 1,
      "env.PT_HPU_ENABLE_LAZY_COLLECTIVES": DELETE}, None, None),
    ("tp 4 on 2 cards", {**TP4, "hardware.cards": 2}, "tensor-parallel-matches-hardware", "more than the 2 card"),
    ("context past native", {"serve.max_model_len": 524288, "buckets.prompt_seq.max": 524288,
                             "buckets.decode_block.max": 16384}, "context-within-native", "native context"),
    ("auto tool choice without parser", {"serve.tool_call_parser": DELETE}, "auto-tool-choice-needs-parser",
     "needs --tool-call-parser"),
    ("unknown opt-in fix", {"fixes.opt_in": ["gdn-prefix-cache", "no-such-fix"]}, "fixes-in-profile",
     "not an opt-in fix"),
    ("generic fix as opt-in", {"fixes.opt_in": ["gdn-prefix-cache", "prompt-order"]}, "fixes-in-profile",
     "not an opt-in fix"),
    ("stated hybrid block disagrees", {"model.hybrid_kv_block": 1024}, "hybrid-kv-block-matches-geometry",
     "geometry gives 896"),
    ("unknown page rule", {"rules": [{"rule": "no-such-rule", "text": "x"}]}, "page-rules-exist", "not a known rule"),
]


@pytest.mark.parametrize("case,changes,rule,words", CASES, ids=[c[0] for c in CASES])
def test_rule(recipe_tree, case, changes, rule, words):
    root, write = recipe_tree
    path = write(variant(changes))
    if rule is None:
        recipes.load(path, root)
        return
    with pytest.raises(RecipeError) as err:
        recipes.load(path, root)
    text = str(err.value)
    assert f"[{rule}]" in text
    assert words in text
    assert "recipe.yaml:" in text  # file and line


def test_every_rule_has_a_failing_case():
    fired = {c[2] for c in CASES if c[2]} | {"gdn-fix-needs-decode-pad"}  # its own test below
    assert set(rules.RULES) == fired


def test_gdn_fix_needs_decode_pad_before_it():
    profile = rules.Profile("p", order=["gdn-prefix-cache", "hybrid-decode-pad"], opt_in=["gdn-prefix-cache"])
    loaded = recipes.load("qwen3.5-27b-fp8")
    found = rules.gdn_fix_needs_decode_pad(loaded.recipe, profile)
    assert found and "hybrid-decode-pad" in found[0][1]
    no_pad = rules.Profile("p", order=["gdn-prefix-cache"], opt_in=["gdn-prefix-cache"])
    assert rules.gdn_fix_needs_decode_pad(loaded.recipe, no_pad)
    good = rules.Profile("p", order=["hybrid-decode-pad", "gdn-prefix-cache"], opt_in=["gdn-prefix-cache"])
    assert rules.gdn_fix_needs_decode_pad(loaded.recipe, good) == []


def test_all_problems_reported_together(recipe_tree):
    root, write = recipe_tree
    path = write(variant({"env.PT_HPU_LAZY_MODE": "1", "serve.max_num_batched_tokens": 3584}))
    with pytest.raises(RecipeError) as err:
        recipes.load(path, root)
    text = str(err.value)
    assert "2 problems" in text  # 3,584 is four hybrid blocks, so only two rules fire
    assert "no-lazy-mode-for-gdn-hybrids" in text and "batched-tokens-at-256k-on-gaudi2" in text
