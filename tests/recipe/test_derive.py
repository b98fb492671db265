"""The host's derived settings (id, `vllm serve` arguments, tags): table-driven tests of the pure functions."""

import pytest

from cookbook.recipe import derive
from cookbook.recipe.schema import Serve


@pytest.mark.parametrize("folder,rid", [("Qwen3.5-27B-FP8", "qwen3.5-27b-fp8"), ("Llama-3.1-8B", "llama-3.1-8b")])
def test_recipe_id(folder, rid):
    assert derive.recipe_id(folder) == rid


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


@pytest.mark.parametrize("standin,allow_unwritten,suffix", [(False, False, ""), (True, False, "-standin"),
                                                            (True, True, "-standin"), (False, True, "-unwritten")])
def test_image_tags(standin, allow_unwritten, suffix):
    mark = derive.tag_mark(standin, allow_unwritten)
    tags = derive.image_tags("reg/cb", "qwen3.5-27b-fp8", "v0.26.0", "abcdef0123456789", mark)
    assert tags == [f"reg/cb/qwen3.5-27b-fp8:v0.26.0-abcdef01{suffix}", f"reg/cb/qwen3.5-27b-fp8:v0.26.0{suffix}"]
