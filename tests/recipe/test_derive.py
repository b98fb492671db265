"""Derived settings: table-driven tests of the pure functions."""

import pytest

from cookbook.recipe import derive, recipes
from cookbook.recipe.schema import Buckets, Geometry, Serve

QWEN = recipes.load("qwen3.5-27b-fp8").recipe


@pytest.mark.parametrize("folder,rid", [("Qwen3.5-27B-FP8", "qwen3.5-27b-fp8"), ("Llama-3.1-8B", "llama-3.1-8b")])
def test_recipe_id(folder, rid):
    assert derive.recipe_id(folder) == rid


GEOMETRIES = [
    # (case, geometry, kernel block, hybrid block)
    ("qwen3.5 27B: 3,207,168 B state / 4,096 B per token = 783 tokens -> 7 x 128", QWEN.model.geometry, 128, 896),
    ("same state, 256-token kernel blocks", QWEN.model.geometry, 256, 1024),
    ("bf16 state halves the SSM part",
     QWEN.model.geometry.model_copy(update={"gdn": QWEN.model.geometry.gdn.model_copy(update={"ssm_dtype_bytes": 2})}),
     128, 512),
    ("dense model has no hybrid block", Geometry(layers=32, attention_layers=32, kv_heads=8, head_dim=128), 128, None),
]


@pytest.mark.parametrize("case,geometry,kernel,expected", GEOMETRIES, ids=[g[0] for g in GEOMETRIES])
def test_hybrid_kv_block(case, geometry, kernel, expected):
    assert derive.hybrid_kv_block(geometry, kernel) == expected


def test_gdn_state_bytes_matches_the_study():
    assert derive.gdn_state_bytes(QWEN.model.geometry) == 3_207_168
    assert derive.attention_bytes_per_token(QWEN.model.geometry) == 4_096


SERVE = [
    (Serve(max_num_seqs=4), ["--max-num-seqs", "4"]),
    (Serve(enable_chunked_prefill=True), ["--enable-chunked-prefill"]),
    (Serve(enable_prefix_caching=False), ["--no-enable-prefix-caching"]),
    (Serve(enable_auto_tool_choice=False), []),
    (Serve(limit_mm_per_prompt={"image": 16, "video": 0}), ["--limit-mm-per-prompt", '{"image":16,"video":0}']),
    (Serve(gpu_memory_utilization=0.85, tensor_parallel_size=1),
     ["--tensor-parallel-size", "1", "--gpu-memory-utilization", "0.85"]),
]


@pytest.mark.parametrize("serve,args", SERVE)
def test_serve_args(serve, args):
    assert derive.serve_args(serve) == args


@pytest.mark.parametrize("value,on", [(True, True), (False, False), (None, True)])
def test_prefix_caching_default_is_on(value, on):
    assert derive.prefix_caching_on(Serve(enable_prefix_caching=value)) is on


def test_bucket_env():
    b = Buckets(exponential=True, prompt_bs={"min": 1, "step": 1, "max": 8}, decode_bs={"min": 1, "step": 2, "max": 32},
                prompt_seq={"min": 128, "step": 4096, "max": 262144},
                decode_block={"min": 128, "step": 1024, "max": 16384}, file="/b.txt")
    env = derive.bucket_env(b)
    assert env["VLLM_EXPONENTIAL_BUCKETING"] == "True" and env["VLLM_BUCKETING_FROM_FILE"] == "/b.txt"
    assert env["VLLM_DECODE_BS_BUCKET_STEP"] == "2" and env["VLLM_PROMPT_SEQ_BUCKET_MAX"] == "262144"
    assert set(env) == derive.derived_env_names()


@pytest.mark.parametrize("standin,allow_unwritten,suffix", [(False, False, ""), (True, False, "-standin"),
                                                            (True, True, "-standin"), (False, True, "-unwritten")])
def test_image_tags(standin, allow_unwritten, suffix):
    mark = derive.tag_mark(standin, allow_unwritten)
    tags = derive.image_tags("reg/cb", "qwen3.5-27b-fp8", "v0.26.0", "abcdef0123456789", mark)
    assert tags == [f"reg/cb/qwen3.5-27b-fp8:v0.26.0-abcdef01{suffix}", f"reg/cb/qwen3.5-27b-fp8:v0.26.0{suffix}"]
