"""The settings the host and the image both derive from a recipe (inimage/settings.py), on the schema's
models as the host reads them: table-driven tests of the pure functions."""

import pytest

from cookbook.recipe import recipes
from cookbook.recipe.schema import Buckets, Geometry, Serve
from inimage import settings

QWEN = recipes.load("qwen3.5-27b-fp8").recipe


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
    assert settings.hybrid_kv_block(geometry, kernel) == expected


def test_gdn_state_bytes_matches_the_study():
    assert settings.gdn_state_bytes(QWEN.model.geometry) == 3_207_168
    assert settings.attention_bytes_per_token(QWEN.model.geometry) == 4_096


@pytest.mark.parametrize("value,on", [(True, True), (False, False), (None, True)])
def test_prefix_caching_default_is_on(value, on):
    assert settings.prefix_caching_on(Serve(enable_prefix_caching=value)) is on


def test_bucket_env():
    b = Buckets(exponential=True, prompt_bs={"min": 1, "step": 1, "max": 8}, decode_bs={"min": 1, "step": 2, "max": 32},
                prompt_seq={"min": 128, "step": 4096, "max": 262144},
                decode_block={"min": 128, "step": 1024, "max": 16384}, file="/b.txt")
    env = settings.bucket_env(b)
    assert env["VLLM_EXPONENTIAL_BUCKETING"] == "True" and env["VLLM_BUCKETING_FROM_FILE"] == "/b.txt"
    assert env["VLLM_DECODE_BS_BUCKET_STEP"] == "2" and env["VLLM_PROMPT_SEQ_BUCKET_MAX"] == "262144"
    assert set(env) == settings.derived_env_names()
