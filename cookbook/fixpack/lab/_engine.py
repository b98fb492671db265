"""The pinned release's real engine on the CPU, running a tiny Qwen3.5 hybrid.

`tiny_qwen35` builds a model of 3 Gated DeltaNet layers and 1 attention layer with transformers' own
`Qwen3_5ForConditionalGeneration` (so vLLM loads real weight names), random weights from a fixed seed,
`mamba_ssm_dtype: float32` as the real Qwen3.5 config has it, and a byte-level tokenizer made
in-process. It is cached under ~/.cache/gaudi-cookbook/lab-models/ by a hash of its recipe.

Its geometry mirrors the 27B's block arithmetic in miniature: one GDN layer's state (bf16 conv
state, 256 channels x 3, and float32 SSM state, 4 heads x 32 x 32) is 17,920 B, more than one
128-token attention page (1 KV head x 32 x bf16, K and V: 16,384 B) and less than two, so vLLM's page
unification lifts the hybrid block to 256 tokens, 2 kernel blocks of 128 (the 27B gets 896, 7 of
them), and the engine's chunks of 512 tokens end on block boundaries. `BLOCK` is that figure;
test_gdn_engine.py checks vLLM derives it.

`Engine` starts `vllm.LLM` on the tree's `HpuPlatform` under upstream's `VLLM_USE_FAKE_HPU=1`:
enforce_eager (with `compiled`, the release's torch.compile regions instead), the engine core
in-process, the tree's plain prompt attention (`VLLM_PROMPT_USE_FUSEDSDPA=0`), a fixed number of KV
blocks, chunks of two blocks; `dtype="float32"` keeps the model in float32 where the platform would run
bf16 (`float32_kept`; the serving test's choice, cookbook/fixpack/lab/_serving.py). `Reference` is transformers'
greedy output on the same weights. `tiny_qwen35(text)` builds a variant of another text config.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import json
import os
import sys
from pathlib import Path

import torch
from lab_hpu_device import HpuOnCpu, hpu_generators

BLOCK = 256  # tokens per hybrid KV block vLLM derives for this geometry (the 27B: 896)
SEED = 1234

TEXT_CONFIG = dict(
    vocab_size=288, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
    layer_types=["linear_attention"] * 3 + ["full_attention"],
    num_attention_heads=2, num_key_value_heads=1, head_dim=32,
    linear_num_key_heads=2, linear_key_head_dim=32, linear_num_value_heads=4, linear_value_head_dim=32,
    linear_conv_kernel_dim=4, max_position_embeddings=8192, rms_norm_eps=1e-6,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                     "mrope_section": [2, 1, 1], "mrope_interleaved": True},
    mamba_ssm_dtype="float32", tie_word_embeddings=False, initializer_range=0.1,
)
VISION_CONFIG = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                     patch_size=16, spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=16)
# A trained GDN layer remembers over thousands of tokens; transformers' random init decays its state
# within a few (A up to 16, dt bias 1), which would hide any wrong state. Slow decays instead: per
# token exp(-A * softplus(dt)) between about 0.9995 and 0.99998.
GDN_MEMORY = {"A": (0.01, 0.2), "dt_bias": -4.0}
DTYPE = "bfloat16"  # what the HPU platform runs (it turns float32 into bf16); the reference upcasts


def cache_root() -> Path:
    base = os.environ.get("COOKBOOK_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "gaudi-cookbook")
    return Path(base) / "lab-models"


def recipe_key(text: dict = TEXT_CONFIG) -> str:
    import transformers

    recipe = {"text": text, "vision": VISION_CONFIG, "dtype": DTYPE, "seed": SEED, "gdn": GDN_MEMORY,
              "transformers": transformers.__version__, "tokenizer": "byte-level v1"}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def tiny_qwen35(text: dict = TEXT_CONFIG) -> Path:
    """The model folder (built once per recipe; a partial build is never taken for a whole one)."""
    dest = cache_root() / f"qwen35-tiny-{recipe_key(text)}"
    if (dest / ".complete").is_file():
        return dest
    from _byte_tokens import byte_tokenizer
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    part = dest.with_name(dest.name + f".partial-{os.getpid()}")
    config = Qwen3_5Config(text_config=dict(text), vision_config=dict(VISION_CONFIG),
                           architectures=["Qwen3_5ForConditionalGeneration"], tie_word_embeddings=False)
    torch.manual_seed(SEED)
    model = Qwen3_5ForConditionalGeneration(config)
    with torch.no_grad():
        for layer in model.model.language_model.layers:
            if hasattr(layer, "linear_attn"):
                gdn = layer.linear_attn
                gdn.A_log.copy_(torch.empty_like(gdn.A_log).uniform_(*GDN_MEMORY["A"]).log())
                gdn.dt_bias.fill_(GDN_MEMORY["dt_bias"])
    model = model.to(getattr(torch, DTYPE))
    model.save_pretrained(part)
    byte_tokenizer().save_pretrained(part)
    (part / ".complete").touch()
    if not dest.exists():
        part.rename(dest)
    return dest


# vllm-gaudi's plugins but its model registration, which imports every model it overrides, Gemma3's
# image processor among them (torchvision: no CPU build beside the lab's torch). `register_qwen35`
# does the part of it Qwen3.5 needs, in this process.
PLUGINS = "hpu,01.hpu_custom_utils,02.hpu_custom_ops,04.hpu_tool_parsers"
TORCHVISION = ("torchvision", "torchvision.transforms", "torchvision.transforms.v2",
               "torchvision.transforms.v2.functional")


@contextlib.contextmanager
def torchvision_names():
    """vLLM's Qwen3-VL module (Qwen3.5's base) and the runner's model patches (Llama 4) import
    transformers' torchvision image processors, which import `torchvision.transforms.v2.functional`
    (naming `InterpolationMode` in annotations only). A text-only engine never calls them: the names
    stand in while the engine lives and are removed after."""
    import enum
    import types

    if any(n in sys.modules for n in TORCHVISION):
        yield
        return
    mods = {n: types.ModuleType(n) for n in TORCHVISION}
    for n, m in mods.items():
        m.__spec__ = importlib.machinery.ModuleSpec(n, None)
    mods["torchvision.transforms.v2.functional"].InterpolationMode = enum.Enum(
        "InterpolationMode", "NEAREST BILINEAR BICUBIC")
    for parent, child in zip(TORCHVISION, TORCHVISION[1:], strict=False):
        setattr(mods[parent], child.rsplit(".", 1)[1], mods[child])
    sys.modules.update(mods)
    try:
        yield
    finally:
        for n in TORCHVISION:
            sys.modules.pop(n, None)


def register_qwen35():
    """What vllm-gaudi's `register_models` does for Qwen3.5: its GDN layer replaces upstream's in the
    model modules. The model class is registered as a class, so vLLM inspects it here rather than in
    a subprocess (which would lack the lab's `torch.hpu` stub)."""
    import vllm_gaudi.models.interfaces  # noqa: F401
    import vllm_gaudi.models.qwen3_5  # noqa: F401
    import vllm_gaudi.models.qwen3_next  # noqa: F401
    import vllm_gaudi.models.utils  # noqa: F401
    from vllm import ModelRegistry
    from vllm.model_executor.models.qwen3_5 import Qwen3_5ForConditionalGeneration

    ModelRegistry.register_model("Qwen3_5ForConditionalGeneration", Qwen3_5ForConditionalGeneration)


@contextlib.contextmanager
def release_compiles():
    """vllm-gaudi compiles the model (torch.compile with backend `hpu_backend`, per layer) only off the
    fake HPU: `_maybe_compile` checks `is_fake_hpu()`. While the engine loads, that check sees a real
    HPU, and the stubs' pass-through `hpu_backend` runs the graphs dynamo captures."""
    import vllm_gaudi.v1.worker.hpu_model_runner as runner

    maybe_compile = runner.HPUModelRunner._maybe_compile

    def on_hpu(self, *args, **kwargs):
        fake, runner.is_fake_hpu = runner.is_fake_hpu, lambda: False
        try:
            return maybe_compile(self, *args, **kwargs)
        finally:
            runner.is_fake_hpu = fake

    runner.HPUModelRunner._maybe_compile = on_hpu
    try:
        yield
    finally:
        runner.HPUModelRunner._maybe_compile = maybe_compile


@contextlib.contextmanager
def float32_kept():
    """vllm-gaudi's platform runs a float32 model in bf16 (check_and_update_config: "The HPU backend
    currently does not support torch.float32"). Kept float32 while entered: the weights, activations and
    the KV cache (its dtype follows the model's), the GDN conv state; the SSM state is float32 either
    way. Everything else the platform decides (block size, page unification) it decides on float32."""
    from vllm.platforms import current_platform

    platform = type(current_platform)  # resolved through the plugins (vllm_gaudi's HpuPlatform)
    original = platform.__dict__["check_and_update_config"]
    check = platform.check_and_update_config

    def keep(vllm_config):
        dtype = vllm_config.model_config.dtype if vllm_config.model_config is not None else None
        check(vllm_config)
        if dtype == torch.float32:
            vllm_config.model_config.dtype = dtype

    # The runner names its KV cache dtype to vLLM's backend selector, which knows no "float32": "auto"
    # is the model's dtype, float32 here.
    import vllm_gaudi.v1.worker.hpu_model_runner as runner

    names = runner.HPU_TORCH_DTYPE_TO_STR_DTYPE
    platform.check_and_update_config = staticmethod(keep)
    runner.HPU_TORCH_DTYPE_TO_STR_DTYPE = names | {torch.float32: "auto"}
    try:
        yield
    finally:
        platform.check_and_update_config = original
        runner.HPU_TORCH_DTYPE_TO_STR_DTYPE = names


ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # the engine core in this process, with the stubs
    "VLLM_PROMPT_USE_FUSEDSDPA": "0",  # the tree's plain prompt attention
    "VLLM_SKIP_WARMUP": "true",  # no graphs to warm up under enforce_eager
    "VLLM_PLUGINS": PLUGINS,
}


class Engine:
    """`vllm.LLM` on the tree's HpuPlatform, engine core in this process. The CPU set-up (environment,
    device mapping, torchvision names) is in force only while it starts and while it generates, so
    the lab's other tests in the same process never run under it."""

    def __init__(self, model_dir: Path, *, num_blocks: int = 64, max_model_len: int = 4096,
                 prefix_caching: bool = True, env: dict | None = None, counter=None, compiled: bool = False,
                 dtype: str = DTYPE, **kwargs):
        self.env = ENV | (env or {})
        self.dtype = dtype
        self.counter = counter  # _hostsync.HostSyncs: labels device tensors from the engine's start
        with self._cpu():
            register_qwen35()
            from vllm import LLM

            args = dict(max_num_seqs=2, max_num_batched_tokens=2 * BLOCK) | kwargs
            with release_compiles() if compiled else contextlib.nullcontext():
                self.llm = LLM(model=str(model_dir), tokenizer=str(model_dir), dtype=dtype, enforce_eager=not compiled,
                               max_model_len=max_model_len, num_gpu_blocks_override=num_blocks,
                               enable_prefix_caching=prefix_caching, language_model_only=True, seed=SEED, **args)

    @contextlib.contextmanager
    def _cpu(self):
        saved = dict(os.environ)
        os.environ.update(self.env)
        try:
            with torchvision_names(), hpu_generators(), HpuOnCpu(self.counter), \
                    float32_kept() if self.dtype == "float32" else contextlib.nullcontext():
                yield
        finally:
            os.environ.clear()
            os.environ.update(saved)
            # The engine core caches vLLM's environment reads once it starts; later tests must
            # read their own environment.
            import vllm.envs

            vllm.envs.disable_envs_cache()

    def generate(self, prompt_ids: list[int], salt: str, max_tokens: int = 6):
        """One greedy request (top-2 logprobs); `salt` keys its blocks: a new salt is a cold run."""
        return self.generate_many([prompt_ids], salt, max_tokens)[0]

    def generate_many(self, prompts: list[list[int]], salt: str, max_tokens: int = 6):
        """Greedy requests (top-2 logprobs) submitted together; `salt` keys their blocks."""
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=max_tokens, temperature=0, logprobs=2, ignore_eos=True)
        with self._cpu():
            return self.llm.generate([{"prompt_token_ids": ids, "cache_salt": salt} for ids in prompts], params,
                                     use_tqdm=False)

    def run(self, requests: list[tuple[str, list[int], str]], max_steps: int, max_tokens: int = 6) -> dict:
        """`requests` ((id, prompt ids, salt), queued in order, greedy like generate_many's) driven one
        engine step at a time, at most `max_steps`: LLM.generate steps until every request is done, so
        a request the scheduler never admits hangs it, while here it fails an assertion that names the
        requests not done and the pool's free blocks (they are aborted first, so the engine stays
        usable). Returns the outputs by id and the steps taken."""
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=max_tokens, temperature=0, logprobs=2, ignore_eos=True)
        engine = self.llm.llm_engine
        done, steps = {}, 0
        with self._cpu():
            for rid, ids, salt in requests:
                engine.add_request(rid, {"prompt_token_ids": ids, "cache_salt": salt}, params)
            while engine.has_unfinished_requests() and steps < max_steps:
                steps += 1
                done.update((o.request_id, o) for o in engine.step() if o.finished)
            if engine.has_unfinished_requests():
                state = self.pool_state()
                engine.abort_request([rid for rid, _, _ in requests if rid not in done])
                raise AssertionError(f"not done after {steps} steps: {state}")
        return done, steps

    def pool_state(self) -> str:
        """The scheduler's queues (prompt tokens computed of total) and the KV pool's free blocks."""
        sched = self.llm.llm_engine.engine_core.engine_core.scheduler
        pool = sched.kv_cache_manager.block_pool

        def reqs(queue):
            return ", ".join(f"{r.request_id} ({r.num_computed_tokens}/{r.num_prompt_tokens})"
                             for r in queue) or "none"

        waiting = list(sched.waiting) + list(getattr(sched, "skipped_waiting", []))
        state = (f"waiting: {reqs(waiting)}; running: {reqs(sched.running)}; "
                 f"free blocks {pool.get_num_free_blocks()} of {pool.num_gpu_blocks}")
        if waiting:  # what the first in line must find free to be admitted (vLLM's full-sequence check)
            req, mgr = waiting[0], sched.kv_cache_manager
            blocks, hit = mgr.get_computed_blocks(req)[:2]
            need = mgr.coordinator.get_num_blocks_to_allocate(
                request_id=req.request_id, num_tokens=req.num_tokens, new_computed_blocks=blocks.blocks,
                num_encoder_tokens=0, total_computed_tokens=hit, num_local_computed_tokens=hit,
                num_tokens_main_model=req.num_tokens, apply_admission_cap=True)
            state += f"; {req.request_id} needs {need} free to be admitted ({hit} tokens cached)"
        return state

    @property
    def vllm_config(self):
        return self.llm.llm_engine.vllm_config

    def close(self):
        with self._cpu():
            self.llm.llm_engine.engine_core.shutdown()
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

            cleanup_dist_env_and_memory()


@contextlib.contextmanager
def engine(model_dir: Path, **kwargs):
    e = Engine(model_dir, **kwargs)
    try:
        yield e
    finally:
        e.close()


def prompt(seed: int, length: int) -> list[int]:
    """Token ids of the byte alphabet (the tokenizer's first 256), reproducible from a seed."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, 256, (length,), generator=g).tolist()


class Reference:
    """transformers' own model on the same weights, in float32: per generated token, its logprob,
    the reference's greedy choice and the top-2 margin, teacher-forced along the engine's tokens (one
    forward pass; a near-tie the engine broke the other way does not derail the steps after it)."""

    def __init__(self, model_dir: Path):
        from transformers import Qwen3_5ForConditionalGeneration

        self.model = Qwen3_5ForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32).eval()

    @torch.no_grad()
    def logprobs(self, prompt_ids: list[int], tokens: list[int]) -> torch.Tensor:
        """[len(tokens), vocab]: the log-softmax of the raw logits that chose each of `tokens`."""
        ids = torch.tensor([prompt_ids + tokens[:-1]])
        return torch.log_softmax(self.model(input_ids=ids).logits[0, len(prompt_ids) - 1:].float(), dim=-1)

    def steps(self, prompt_ids: list[int], tokens: list[int]) -> list[dict]:
        logp = self.logprobs(prompt_ids, tokens)
        top = logp.topk(2, dim=-1)
        return [{"token": t, "logprob": logp[i, t].item(), "top1": top.indices[i, 0].item(),
                 "margin": (top.values[i, 0] - top.values[i, 1]).item()} for i, t in enumerate(tokens)]


def generated(output) -> list[dict]:
    """Per generated token of a vLLM RequestOutput: token, logprob, the engine's top-2 margin."""
    comp = output.outputs[0]
    out = []
    for t, lp in zip(comp.token_ids, comp.logprobs, strict=True):
        ranked = sorted(lp.values(), key=lambda x: x.rank)
        out.append({"token": t, "logprob": lp[t].logprob, "margin": ranked[0].logprob - ranked[1].logprob})
    return out


# A bf16 engine against the float32 reference: logprobs measured up to 0.08 apart on both trees; a
# wrong GDN state moves them by 0.3 to 3 and flips tokens whose margin is larger.
TOL = 0.1


def disagreements(engine_steps: list[dict], ref_steps: list[dict], tol: float) -> list[str]:
    """Where the engine's greedy tokens are not the reference's: a token that is not the reference's
    choice unless the reference's top two are within `tol`, or a logprob further than `tol` away."""
    bad = []
    for i, (e, r) in enumerate(zip(engine_steps, ref_steps, strict=True)):
        if e["token"] != r["top1"] and r["margin"] > tol:
            bad.append(f"step {i}: token {e['token']}, reference {r['top1']} by a margin of {r['margin']:.3f}")
        if abs(e["logprob"] - r["logprob"]) > tol:
            bad.append(f"step {i}: logprob {e['logprob']:.4f}, reference {r['logprob']:.4f}")
    return bad
