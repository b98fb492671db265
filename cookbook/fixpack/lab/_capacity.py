"""The capacity lab: vLLM 0.26's real scheduler and KV cache manager at a recipe's real geometry, no model.

What it builds, from the recipe (recipes/<Org>/<Model>/recipe.yaml) and nothing set by hand:
- the model's config.json (its `model.geometry`, the text config's KV-relevant fields) and vLLM's own
  `VllmConfig` from it and the recipe's `serve` settings, on the tree's HpuPlatform (which derives the
  hybrid block: 896 tokens for Qwen3.5-27B with prefix caching);
- the KV cache spec as vLLM's model class computes it (`get_mamba_state_shape_from_config`,
  `MambaBase.get_kv_cache_spec`'s fields; FullAttentionSpec as the runner makes it), then
  `gdn_block_checkpoints`, the runner's own decision that turns on the pack's accounting (patched trees
  only: the pristine tree has none, and this is the stock figure);
- the pool: the block count whose capacity vLLM reports as the page's `verified.kv_pool_tokens`, under
  stock accounting (the page was measured on the stock release), then `get_kv_cache_configs`, vLLM's
  sizing and start-up check, with that count;
- the scheduler the HPU platform picks (vllm-gaudi's `HPUAsyncScheduler` with async scheduling, vLLM's
  `Scheduler` without), stepped as the engine core steps it (`step_with_batch_queue`: with async
  scheduling a step is scheduled before the previous one's output is processed).

The worker's side of a step is one sampled token per request whose prefill completes: the scheduler and
the KV manager decide everything the figures show. Run as a script, it prints the figures of every
workload as JSON; `cookbook.fixpack.capacity` runs it on the pristine and the patched tree.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
DEFAULT_RECIPE = REPO / "recipes" / "Qwen" / "Qwen3.5-27B-FP8" / "recipe.yaml"
KERNEL_CHUNK = 128  # the runner's GDN kernel chunk when the model sets none (hpu_model_runner.mamba_chunk_size)
MAX_STEPS = 200_000  # a wedge ends a workload here; no workload below takes more than a few thousand


def load_recipe(path: Path) -> dict:
    return yaml.safe_load(Path(path).read_text())


def _is_attention(geometry: dict, layer: int) -> bool:
    """Qwen3.5's layout: one full-attention layer in every layers / attention_layers, the last of each run."""
    return (layer + 1) % (geometry["layers"] // geometry["attention_layers"]) == 0


def _config_json(recipe: dict, dest: Path) -> Path:
    """A Qwen3.5 config.json with the recipe's geometry: the KV-relevant fields are the model's, the
    rest small (no weights are ever made)."""
    from transformers import Qwen3_5Config

    g = recipe["model"]["geometry"]
    gdn = g["gdn"]
    layer_types = ["full_attention" if _is_attention(g, i) else "linear_attention" for i in range(g["layers"])]
    text = dict(vocab_size=1024, hidden_size=256, intermediate_size=256, num_hidden_layers=g["layers"],
                layer_types=layer_types, num_attention_heads=2 * g["kv_heads"], num_key_value_heads=g["kv_heads"],
                head_dim=g["head_dim"], linear_num_key_heads=gdn["key_heads"], linear_key_head_dim=gdn["key_head_dim"],
                linear_num_value_heads=gdn["value_heads"], linear_value_head_dim=gdn["value_head_dim"],
                linear_conv_kernel_dim=gdn["conv_kernel"], max_position_embeddings=recipe["model"]["native_context"],
                mamba_ssm_dtype="float32" if gdn["ssm_dtype_bytes"] == 4 else "bfloat16",
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                                 "mrope_section": [11, 11, 10], "mrope_interleaved": True})
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=256, patch_size=16,
                  spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=16)
    Qwen3_5Config(text_config=text, vision_config=vision, architectures=["Qwen3_5ForConditionalGeneration"],
                  tie_word_embeddings=False).save_pretrained(dest)
    return dest


@dataclass
class Setup:
    recipe: str
    async_scheduling: bool
    block: int
    pool: int
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    pack_accounting: bool
    reported_tokens: int  # what vLLM's start-up log calls the KV cache size, with this accounting
    reported_concurrency: float  # "Maximum concurrency for max_model_len tokens per request"


class Lab:
    """One recipe's scheduler and KV manager, made anew per workload."""

    def __init__(self, recipe_path: Path, async_scheduling: bool, pool: int | None = None, stock: bool = False):
        import _engine
        from vllm.utils.hashing import sha256
        from vllm.v1.core.kv_cache_utils import init_none_hash

        init_none_hash(sha256)  # once: without PYTHONHASHSEED each call draws a new root hash
        self.recipe_path = Path(recipe_path)
        self.recipe = load_recipe(self.recipe_path)
        self.async_scheduling = async_scheduling
        self._tmp = tempfile.TemporaryDirectory(prefix="cookbook-capacity.")
        self.model_dir = _config_json(self.recipe, Path(self._tmp.name))
        with _engine.torchvision_names():
            _engine.register_qwen35()
            self.config = self._vllm_config()
            self.specs = self._kv_cache_spec()
            # stock: vLLM's own align-mode accounting (the runner's decision not taken), on the same tree
            self.pack = self._stock_accounting() if stock else self._pack_accounting()
            self.pool = pool or self._page_pool()
            self.kv_cache_config = self._kv_cache_config(self.pool)
            self.config.cache_config.num_gpu_blocks = self.kv_cache_config.num_blocks  # as the engine core sets it
            # As EngineCore resolves them; requests are hashed at hash_block_size (Request.block_hasher).
            from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes

            self.block_size, self.hash_block_size = resolve_kv_cache_block_sizes(self.kv_cache_config, self.config)

    # ---- the configuration, as the engine makes it ------------------------------------------------
    def _vllm_config(self):
        from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig

        serve = self.recipe["serve"]
        model = ModelConfig(model=str(self.model_dir), skip_tokenizer_init=True, dtype="bfloat16",
                            language_model_only=True, max_model_len=serve["max_model_len"])
        sched = SchedulerConfig(max_num_seqs=serve["max_num_seqs"], max_model_len=serve["max_model_len"],
                                max_num_batched_tokens=serve["max_num_batched_tokens"],
                                enable_chunked_prefill=serve["enable_chunked_prefill"],
                                async_scheduling=self.async_scheduling, is_encoder_decoder=False)
        cache = CacheConfig(block_size=serve["block_size"], enable_prefix_caching=serve["enable_prefix_caching"])
        config = VllmConfig(model_config=model, scheduler_config=sched, cache_config=cache,
                            device_config=DeviceConfig("cpu"))
        # What the executor does once the model is loaded: the platform settles the block size (for a
        # hybrid, the block whose attention page holds a GDN state) and the Mamba page padding.
        # With no layers to ask, the attention backend comes from vLLM's selector, as the attention
        # layer asks it.
        import torch
        from vllm.config.vllm import set_current_vllm_config
        from vllm.platforms import current_platform
        from vllm.v1.attention.selector import get_attn_backend

        g = self.recipe["model"]["geometry"]
        with set_current_vllm_config(config):
            backend = get_attn_backend(g["head_dim"], torch.bfloat16, config.cache_config.cache_dtype,
                                       num_heads=2 * g["kv_heads"])
        platform = type(current_platform)
        find, platform._find_non_ssm_backend = platform._find_non_ssm_backend, classmethod(lambda cls, c: backend)
        try:
            current_platform.update_block_size_for_backend(config)
        finally:
            platform._find_non_ssm_backend = find
        return config

    def _kv_cache_spec(self) -> dict:
        import torch
        from vllm.model_executor.models.qwen3_5 import Qwen3_5ForConditionalGeneration as Model
        from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec

        g, cache = self.recipe["model"]["geometry"], self.config.cache_config
        shapes = Model.get_mamba_state_shape_from_config(self.config)
        dtypes = Model.get_mamba_state_dtype_from_config(self.config)
        specs = {}
        for i in range(g["layers"]):
            name = f"language_model.model.layers.{i}"
            if _is_attention(g, i):
                specs[name + ".self_attn.attn"] = FullAttentionSpec(
                    block_size=cache.block_size, num_kv_heads=g["kv_heads"], head_size=g["head_dim"],
                    dtype=torch.bfloat16 if g["kv_cache_dtype_bytes"] == 2 else torch.float8_e4m3fn)
            else:
                specs[name + ".linear_attn"] = MambaSpec(
                    shapes=tuple(shapes), dtypes=dtypes, block_size=cache.mamba_block_size,
                    page_size_padded=cache.mamba_page_size_padded, mamba_type="gdn_attention",
                    mamba_cache_mode=cache.mamba_cache_mode)
        return specs

    def _pack_accounting(self) -> bool:
        """The runner's own decision (gdn-prefix-cache 0011), which sets MambaSpec's accounting; the
        pristine tree has neither, and counts as stock."""
        try:
            from vllm_gaudi.v1.worker.hpu_model_runner import gdn_block_checkpoints
        except ImportError:
            from vllm.v1.core.single_type_kv_cache_manager import MambaManager

            if not hasattr(MambaManager, "checkpoint_every_block"):
                return False  # the stock release
            # The previous round's pack (0010-0012 without 0013): its runner set this in
            # initialize_kv_cache whenever it made scratch slots, as it does for the recipe.
            MambaManager.checkpoint_every_block = bool(self.config.cache_config.enable_prefix_caching)
            return MambaManager.checkpoint_every_block
        env = os.environ.get("VLLM_COMPACT_GDN")
        os.environ["VLLM_COMPACT_GDN"] = self.recipe.get("env", {}).get("VLLM_COMPACT_GDN", "1")
        try:
            return gdn_block_checkpoints(self.config, self.specs.values(), KERNEL_CHUNK)
        finally:
            os.environ.pop("VLLM_COMPACT_GDN") if env is None else os.environ.__setitem__("VLLM_COMPACT_GDN", env)

    @staticmethod
    def _stock_accounting() -> bool:
        """Undo an earlier Lab's decision in this process (the class attribute outlives it)."""
        from vllm.v1.kv_cache_interface import MambaSpec

        if hasattr(MambaSpec, "checkpoint_every_block"):
            MambaSpec.checkpoint_every_block = False
        return False

    def _reported(self, kv_cache_config) -> tuple[int, float]:
        from vllm.v1.core.kv_cache_utils import get_max_concurrency_for_kv_cache_config

        concurrency = get_max_concurrency_for_kv_cache_config(self.config, kv_cache_config)
        return int(concurrency * self.config.model_config.max_model_len), concurrency

    def _page_pool(self) -> int:
        """The block count behind the page's `verified.kv_pool_tokens`: what vLLM reported on the stock
        release (stock accounting), so the smallest pool whose report reaches it."""
        from vllm.v1.kv_cache_interface import MambaSpec

        want = (self.recipe.get("verified") or {}).get("kv_pool_tokens")
        if not want:
            raise SystemExit("verified.kv_pool_tokens is not set: the capacity lab sizes the pool from the KV "
                             "pool the page measured")
        saved = getattr(MambaSpec, "checkpoint_every_block", None)
        if saved is not None:
            MambaSpec.checkpoint_every_block = False
        try:
            lo, hi = 1, 1 << 20
            while lo < hi:
                mid = (lo + hi) // 2
                tokens, _ = self._reported(self._kv_cache_config(mid, check=False))
                lo, hi = (mid + 1, hi) if tokens < want else (lo, mid)
            return lo
        finally:
            if saved is not None:
                MambaSpec.checkpoint_every_block = saved

    def _kv_cache_config(self, num_blocks: int, check: bool = True):
        from vllm.v1.core.kv_cache_utils import get_kv_cache_configs

        self.config.cache_config.num_gpu_blocks_override = num_blocks
        # Memory for exactly num_blocks blocks (vLLM's sizing, then the override); the start-up check
        # runs on it, with the accounting in force.
        page = max(s.page_size_bytes for s in self.specs.values())
        layers_per_block = self.recipe["model"]["geometry"]["attention_layers"]
        memory = page * layers_per_block * num_blocks if check else 1 << 60
        return get_kv_cache_configs(self.config, [self.specs], [memory])[0]

    def setup(self) -> Setup:
        tokens, concurrency = self._reported(self.kv_cache_config)
        s = self.config.scheduler_config
        return Setup(self.recipe["id"] if "id" in self.recipe else self.recipe_path.parent.name, self.async_scheduling,
                     self.config.cache_config.block_size, self.pool, self.config.model_config.max_model_len,
                     s.max_num_batched_tokens, s.max_num_seqs, self.pack, tokens, round(concurrency, 3))

    # ---- the scheduler, stepped as the engine core steps it ---------------------------------------
    def scheduler(self):
        from vllm.v1.structured_output import StructuredOutputManager

        if self.async_scheduling:
            from vllm_gaudi.v1.core.sched.hpu_async_scheduler import HPUAsyncScheduler as cls
        else:
            from vllm.v1.core.sched.scheduler import Scheduler as cls
        return cls(vllm_config=self.config, kv_cache_config=self.kv_cache_config,
                   structured_output_manager=StructuredOutputManager(self.config),
                   block_size=self.block_size, hash_block_size=self.hash_block_size)


@dataclass
class Req:
    name: str
    prompt_tokens: int
    max_tokens: int
    prefix: str = ""  # requests with the same prefix key share their first `shared` tokens
    shared: int = 0
    after: str = ""  # submitted once this request has finished (a hit on its blocks)


@dataclass
class Figures:
    workload: str
    admitted: int = 0  # requests the scheduler ever admitted
    finished: int = 0
    longest_admitted: int = 0  # prompt tokens of the longest request admitted
    peak_running: int = 0
    steps: int = 0
    preemptions: int = 0
    hit_tokens: int = 0
    blocks_leaked: int = 0  # blocks not back in the pool (free or evictable) at the end
    wedged: bool = False  # the step limit ended it with requests unfinished
    waiting_at_end: list = field(default_factory=list)


def _token_ids(req: Req) -> list[int]:
    """Deterministic ids: a shared prefix keyed by `prefix`, then the request's own tokens."""
    import random

    head = []
    if req.prefix:
        rng = random.Random(req.prefix)
        head = [rng.randrange(1, 1000) for _ in range(req.shared)]
    rng = random.Random(req.name)
    return head + [rng.randrange(1, 1000) for _ in range(req.prompt_tokens - len(head))]


def _request(req: Req, hash_block_size: int):
    from vllm import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher
    from vllm.v1.request import Request

    return Request(req.name, _token_ids(req), SamplingParams(max_tokens=req.max_tokens, ignore_eos=True), None,
                   block_hasher=get_request_block_hasher(hash_block_size, sha256))


def run(lab: Lab, workload: str, reqs: list[Req], max_steps: int = MAX_STEPS) -> Figures:
    """Serve `reqs` (those with `after` once that one finished) and count."""
    from vllm.v1.outputs import ModelRunnerOutput

    sched = lab.scheduler()
    hash_size = lab.hash_block_size
    fig = Figures(workload)
    pending = [r for r in reqs if r.after]
    for r in reqs:
        if not r.after:
            sched.add_request(_request(r, hash_size))
    done: set[str] = set()
    sizes = {r.name: r.prompt_tokens for r in reqs}
    seen: set[str] = set()
    queue: collections.deque = collections.deque()
    depth = 2 if lab.async_scheduling else 1

    def settle(out):
        ids = list(out.num_scheduled_tokens)
        sampled = []
        for r in ids:
            req = sched.requests.get(r)
            # a request still prefilling after this step samples nothing (the runner discards its row)
            partial = req is not None and req.num_computed_tokens < req.num_prompt_tokens
            sampled.append([] if partial else [7])
        outputs = sched.update_from_output(out, ModelRunnerOutput(
            req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled))
        for eco in outputs.values():
            for o in eco.outputs:
                if o.finish_reason is not None:
                    done.add(o.request_id)
        for r in [p for p in pending if p.after in done]:
            pending.remove(r)
            sched.add_request(_request(r, hash_size))

    while (sched.has_requests() or queue or pending) and fig.steps < max_steps:
        if sched.has_requests() and len(queue) < depth:
            out = sched.schedule()
            fig.steps += 1
            for new in out.scheduled_new_reqs:
                if new.req_id not in seen:
                    seen.add(new.req_id)
                    fig.longest_admitted = max(fig.longest_admitted, sizes[new.req_id])
                fig.hit_tokens += new.num_computed_tokens
            fig.peak_running = max(fig.peak_running, len(sched.running))
            fig.preemptions += len(out.preempted_req_ids or ())
            queue.append(out)
            if len(queue) < depth and out.total_num_scheduled_tokens > 0:
                continue
        if queue:
            settle(queue.popleft())
        elif pending and not sched.has_requests():
            break  # a request waits on one that never finished
    fig.admitted, fig.finished = len(seen), len(done)
    if sched.has_requests() or pending:
        fig.wedged = True
        fig.waiting_at_end = sorted(r.request_id for r in sched.waiting) + [p.name for p in pending]
    pool = sched.kv_cache_manager.block_pool
    fig.blocks_leaked = (pool.num_gpu_blocks - 1) - pool.get_num_free_blocks() if not fig.wedged else 0
    return fig


# ---- workloads ----------------------------------------------------------------------------------------

K = 1024
CONTEXTS = (8 * K, 32 * K, 64 * K, 128 * K, 244_000)  # the page's rows: 8K, 32K, 65K, 131K and 244K
OUTPUT = 2000  # tokens generated per long request (the figure; the recipe's checks answer in fewer)


def longest_admitted(lab: Lab) -> int:
    """The longest cold prompt one step admits on an idle pool, to the block (a binary search)."""
    block, top = lab.config.cache_config.block_size, lab.config.model_config.max_model_len - 1
    sizes = [min(k * block, top) for k in range(1, -(-top // block) + 1)]

    def admitted(tokens: int) -> bool:
        sched = lab.scheduler()
        sched.add_request(_request(Req(f"probe-{tokens}", tokens, 1), lab.hash_block_size))
        return bool(sched.schedule().scheduled_new_reqs)

    lo, hi = -1, len(sizes) - 1  # the last size admitted
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if admitted(sizes[mid]) else (lo, mid - 1)
    return sizes[lo] if lo >= 0 else 0


def at_once(lab: Lab, context: int, n: int = 12, output: int = OUTPUT) -> Figures:
    """`n` prompts of `context` tokens with `output` tokens each, submitted together."""
    return run(lab, f"{n} x {context} tokens, {output} out", [Req(f"c{context}-{i}", context - output, output)
                                                             for i in range(n)])


HIT_PROMPTS = (6000, 16000, 32000, 48000, 64000, 80000, 100000, 126000)  # the page's hits: 6K to 126K
HIT_TAIL = 1000


def workloads(lab: Lab) -> dict[str, Figures]:
    """The page's workloads and the edges the recipe reaches."""
    out = {}
    out["32 short streams"] = run(lab, "32 short streams", [Req(f"s{i}", 200, 256) for i in range(32)])
    for ctx in (65536, 131072, 244000):
        out[f"cold needle {ctx}"] = run(lab, f"cold needle {ctx}", [Req(f"needle-{ctx}", ctx, 256)])
    # Each prompt cold, then another that shares all but its last HIT_TAIL tokens, one after the other:
    # the shared prefix ends inside the writer's prompt, on an odd block as often as on an even one.
    hits = []
    for i, ctx in enumerate(HIT_PROMPTS):
        hits.append(Req(f"cold-{i}", ctx, 64, prefix=f"p{i}", shared=ctx - HIT_TAIL, after=f"hit-{i - 1}" if i else ""))
        hits.append(Req(f"hit-{i}", ctx, 64, prefix=f"p{i}", shared=ctx - HIT_TAIL, after=f"cold-{i}"))
    out["prefix hits 6K-126K"] = run(lab, "prefix hits 6K-126K", hits)
    for ctx in (65536, 100000, 131072):
        out[f"12 x {ctx}"] = at_once(lab, ctx)
    out["long ahead of short"] = run(lab, "long ahead of short", [Req("long", 240_000, 256)]
                                     + [Req(f"short-{i}", 500, 64) for i in range(8)])
    return out


def figures(recipe: Path, async_scheduling: bool, stock: bool = False) -> dict:
    lab = Lab(recipe, async_scheduling, stock=stock)
    result = {"setup": asdict(lab.setup()), "longest_admitted": longest_admitted(lab),
              "workloads": {k: asdict(v) for k, v in workloads(lab).items()},
              "at_once": {str(ctx): asdict(at_once(lab, ctx, n=32)) for ctx in CONTEXTS}}
    return result


PAGE_FIELDS = ("peak_running", "preemptions", "steps")


def _page_row(f: Figures) -> dict:
    return {k: getattr(f, k) for k in PAGE_FIELDS}


def page_figures(recipe: Path, async_scheduling: bool = True) -> dict:
    """What the recipe page's Capacity table shows, stock and with the pack (`capacity.json`)."""
    out: dict = {"note": "Generated by invoke fixes.capacity (cookbook/fixpack/lab/_capacity.py --page); do not edit.",
                 "async_scheduling": async_scheduling, "output_tokens": OUTPUT}
    for name, stock in (("stock", True), ("pack", False)):
        lab = Lab(recipe, async_scheduling, stock=stock)
        setup = lab.setup()
        out[name] = {"pool_blocks": setup.pool, "block_tokens": setup.block, "reported_tokens": setup.reported_tokens,
                     "reported_concurrency": setup.reported_concurrency, "longest_admitted": longest_admitted(lab),
                     "at_once": {str(ctx): _page_row(at_once(lab, ctx, n=32)) for ctx in CONTEXTS}}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", type=Path, default=DEFAULT_RECIPE)
    p.add_argument("--sync", action="store_true", help="async scheduling off")
    p.add_argument("--stock", action="store_true", help="vLLM's own accounting, without the pack's decision")
    p.add_argument("--page", action="store_true", help="the page's figures (capacity.json), stock and pack")
    p.add_argument("--out", type=Path, required=True, help="the JSON figures (vLLM logs to stdout)")
    args = p.parse_args(argv)
    import lab_stubs  # noqa: F401  (torch.hpu and habana_frameworks, as pytest -p lab_stubs loads them)

    result = page_figures(args.recipe, not args.sync) if args.page else figures(args.recipe, not args.sync, args.stock)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
