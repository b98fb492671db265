"""The CPU test recipe built into an image by the real pipeline (`invoke build`'s steps.build_recipe) on
the vLLM CPU base (cookbook/cpubase.py), for the `--image` runs of tests/test_bench.py.

The recipe is the reference's with a tiny dense Qwen3 (what the CPU server serves) and a fix profile
of no fixes (the pack patches vllm-gaudi, which a CPU image does not hold); its base is the CPU base's
content-keyed tag, so it is written when the test runs. Kept with the tests: never a published recipe.
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from .conftest import reference_data

MODEL_ID = "cookbook-test/tiny-qwen3"
PROFILE = "cpu-none"
# vLLM listens here inside the container; the model is mounted and served under MODEL_ID.
MODEL_IN_IMAGE = "/models/tiny"


def write_pack(root: Path) -> Path:
    """A fix pack whose one profile selects nothing and pins no package (COOKBOOK_FIXES_DIR)."""
    (root / "profiles").mkdir(parents=True, exist_ok=True)
    (root / "profiles" / f"{PROFILE}.yaml").write_text(yaml.safe_dump(
        {"release": "cpu", "packages": {}, "gaudi_sw": "none", "order": []}))
    return root


def recipe(base_image: str) -> dict:
    data = copy.deepcopy(reference_data())
    data["title"] = "Tiny Qwen3 on the vLLM CPU base (tests only)"
    data["model"] = {
        "id": MODEL_ID, "summary": "A 2-layer Qwen3 the tests train; served by vLLM on the CPU.",
        "architecture": "dense", "modalities": ["text"], "reasoning": True, "precision": "float32 (bf16 on CPU)",
        "native_context": 8192, "geometry": {"layers": 2, "attention_layers": 2, "kv_heads": 2, "head_dim": 32}}
    data["base"]["image"] = base_image
    data["base"]["python"] = "3.11"
    data["base"]["site_packages"] = "/usr/local/lib/python3.11/dist-packages"
    data["env"] = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    serve = data["serve"]
    for key in ("gpu_memory_utilization", "limit_mm_per_prompt", "block_size", "max_num_batched_tokens"):
        serve.pop(key, None)
    serve["max_model_len"] = 4096
    data["buckets"]["prompt_seq"] = {"min": 128, "step": 128, "max": 4096}
    data["buckets"]["decode_block"] = {"min": 128, "step": 128, "max": 1024}
    data["fixes"] = {"profile": PROFILE, "opt_in": []}
    data.pop("launch_notes", None)
    data.pop("sections", None)
    data["rules"] = []
    data["verified"]["kv_pool_tokens"] = None
    return data


def write_recipe(folder: Path, base_image: str) -> Path:
    path = folder / "Test" / "Tiny-Qwen3-CPU-Image" / "recipe.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(recipe(base_image), sort_keys=False))
    return path
