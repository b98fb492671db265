"""The recipe's serving conditions in miniature, on the release's real engine (cookbook/fixpack/lab/_engine.py), and
the yardstick the pack is held to under them: each request served among many must give exactly what it
gives served alone.

Conditions (`CONDITIONS`): the recipe's bucket variables (up to 8 prompts merged into one prefill batch,
up to 32 decodes, exponential bucketing), 32 sequences at a time, chunked prefill with a budget of two
hybrid blocks, prefix caching with gdn-prefix-cache's compact GDN slots, async scheduling on (vLLM
0.26.0's default) or off, and a KV pool small enough that requests are preempted and resumed.

What differs from the recipe: the model runs in float32, not bf16 (`DTYPE`, `_engine.float32_kept`).
In bf16 two runs of a request (a batch of 40 against a batch of 1) moved logprobs by up to 0.1, and
flipped near-ties, a different few on each CPU (Intel Xeon, AMD EPYC); a yardstick that excuses flips
cannot tell one from a defect. In float32 they move by at most 5e-6 (measured, AMD EPYC), and the
float32 reference's smallest top-2 margin over every plain greedy step of the workload is 1.3e-3 (a
reader's step 13; `MARGIN_FLOOR` is checked): tokens are compared exactly, with no cap and no arbiter.
Kept float32 with the model: the weights (bf16 values, saved so), activations, the KV cache ("auto"
follows the model) and the GDN conv state; the SSM state is float32 in the recipe too. The model is the
lab's tiny hybrid with twice the GDN value heads (`TEXT_CONFIG`), so that its float32 state still needs
two 128-token attention pages and vLLM derives the 256-token hybrid block, chunks of two blocks and
kernel chunks of 128 (a stride of 2 inside a block), as in bf16 with the shared model.

Workload (`wave_one`, `wave_inner`, `wave_between`, `wave_two`): 47 requests. The first 32 are submitted
together: prompts on shared prefixes of 1 to 3 blocks (prefix-cache hits among them) or none, each with
one of the sampling features the page's checks and the OpenAI API reach (`FEATURES`). In that crowd each
prefill chunk is one block. Then 3 together: a writer prefilled in chunks of two blocks and two readers
whose hits restore the checkpoints it wrote inside a chunk, at 1 and 3 blocks (`inner_hits` finds them
from the scheduler's chunks). 4 greedy ones follow together. The 8 of the second wave are submitted
together once those are done, each on the prompt and the generated text of an earlier request that
crossed a block boundary while decoding, so their hits reach into generated text.

Yardstick (`alone`, `ALONE`): the same requests one at a time on a fresh engine with prefix caching
off, async scheduling off and each prompt prefilled in one step. `differences` compares token for
token (greedy, seeded and processed alike), the finish reason and the text, and logprobs and prompt
logprobs within `TOL`.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import _engine

B = _engine.BLOCK
MAX_TOKENS = 16

# The serving model: the lab's tiny hybrid with 8 GDN value heads instead of 4, run in float32. Its GDN
# state in float32 (conv 384 x 3, SSM 8 x 32 x 32: 37,376 B) lies between one and two 128-token float32
# attention pages (32,768 B), so vLLM derives the same 256-token hybrid block as the bf16 lab model
# (the shared model in float32, 19,456 B, would get 128-token blocks: one kernel chunk per block, and
# no boundary inside a kernel stride to get wrong).
TEXT_CONFIG = _engine.TEXT_CONFIG | {"linear_num_value_heads": 8}
DTYPE = "float32"
# Logprobs served among many against alone measured at most 4.8e-6 apart (AMD EPYC), the engine's against
# the float32 reference at most 3.1e-6.
TOL = 1e-4
# The float32 reference's top-2 margin at every plain greedy step (`PLAIN_GREEDY`) is at least this
# (measured: 1.3e-3 at the least): some 200 times the noise between two runs, so exact tokens hold on any
# CPU. A change of workload or model that makes a near-tie fails here, rather than flipping somewhere.
MARGIN_FLOOR = 1e-3
# Decoded without sampling or processors: the logprobs are the choice's own.
PLAIN_GREEDY = ("greedy", "stop-string", "top-logprobs", "prompt-logprobs")


def model_dir():
    return _engine.tiny_qwen35(TEXT_CONFIG)

# The recipe's buckets (recipes/Qwen/Qwen3.5-27B-FP8/recipe.yaml `buckets`), lengths scaled to the
# tiny model: prompt batches of 1 to 8, decode batches of 1 to 32, exponential bucketing.
BUCKET_ENV = {
    "VLLM_EXPONENTIAL_BUCKETING": "True",
    "VLLM_PROMPT_BS_BUCKET_MIN": "1", "VLLM_PROMPT_BS_BUCKET_STEP": "1", "VLLM_PROMPT_BS_BUCKET_MAX": "8",
    "VLLM_DECODE_BS_BUCKET_MIN": "1", "VLLM_DECODE_BS_BUCKET_STEP": "1", "VLLM_DECODE_BS_BUCKET_MAX": "32",
    "VLLM_COMPACT_GDN": "1",
}
# A pool of 40 hybrid blocks: the first wave's 32 requests need about 80 at once, so the scheduler
# preempts and resumes some of them (counted by `Preemptions`).
POOL = 40
CONDITIONS = dict(num_blocks=POOL, max_model_len=2048, max_num_seqs=32, max_num_batched_tokens=2 * B,
                  enable_chunked_prefill=True, env=BUCKET_ENV, dtype=DTYPE)

JSON_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"}},
               "required": ["n", "ok"], "additionalProperties": False}


def _params(feature: str, i: int) -> dict:
    """SamplingParams keyword arguments of one feature (the request's index varies seeds and ids)."""
    greedy = dict(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    return {
        "greedy": greedy | dict(logprobs=2),
        "seeded": dict(temperature=1.0, top_p=0.9, seed=1000 + i, max_tokens=MAX_TOKENS, ignore_eos=True,
                       logprobs=1),
        "seeded-topk": dict(temperature=0.7, top_k=20, seed=2000 + i, max_tokens=MAX_TOKENS, ignore_eos=True),
        "repetition": greedy | dict(repetition_penalty=1.8),
        "frequency": greedy | dict(frequency_penalty=1.5),
        "presence": greedy | dict(presence_penalty=1.5),
        # A wide stop set: greedy decoding meets one within a few steps, and min_tokens holds it off.
        "min-tokens": dict(temperature=0.0, max_tokens=MAX_TOKENS, min_tokens=6,
                           stop_token_ids=list(range(1 + i % 7, 288, 7)), logprobs=2),
        "logit-bias": greedy | dict(logit_bias={40 + i % 50: 4.0, 120: -100.0}),
        "bad-words": greedy | dict(bad_words=["ab", "q", "Z"]),
        "stop-string": dict(temperature=0.0, max_tokens=MAX_TOKENS, stop=["a", "e", "o"], logprobs=2),
        "top-logprobs": greedy | dict(logprobs=5),
        "prompt-logprobs": greedy | dict(prompt_logprobs=2),
        "json": dict(temperature=0.0, max_tokens=40, structured_outputs={"json": JSON_SCHEMA}),
    }[feature]


FEATURES = ("greedy", "seeded", "repetition", "frequency", "presence", "min-tokens", "logit-bias", "bad-words",
            "stop-string", "top-logprobs", "prompt-logprobs", "json", "seeded-topk")


@dataclass
class Request:
    name: str
    prompt: list[int]
    feature: str
    index: int

    def sampling_params(self):
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        kw = _params(self.feature, self.index)
        if "structured_outputs" in kw:
            kw["structured_outputs"] = StructuredOutputsParams(**kw["structured_outputs"])
        return SamplingParams(**kw)


def wave_one() -> list[Request]:
    """32 requests: 16 on prefixes of 1, 2 and 3 shared blocks (the hits), 16 on their own. Every other
    prompt ends 3 to 10 tokens short of a block boundary its decoding crosses."""
    shared = {n: _engine.prompt(500 + n, n * B) for n in (1, 2, 3)}
    out = []
    for i in range(32):
        feature = FEATURES[i % len(FEATURES)]
        tail = B - 3 - i % 8 if i % 2 == 0 else 7 + 23 * i % 200
        if i < 16:
            prompt = shared[1 + i % 3] + _engine.prompt(600 + i, tail)
        else:
            prompt = _engine.prompt(700 + i, (i % 3) * B + tail)
        out.append(Request(f"w1-{i:02d}-{feature}", prompt, feature, i))
    return out


def wave_inner() -> list[Request]:
    """3 requests served together after the first wave. A writer of 4 blocks and a tail comes first and
    takes each step's whole token budget: it is prefilled in chunks [0, 512), [512, 1024) and the rest,
    so its GDN states at 256 and 768 are checkpointed inside a chunk (gdn-prefix-cache 0010-0012; in the
    first wave's crowd every chunk is one block). Two readers share its first 1 and 3 blocks: their hits
    restore those checkpoints."""
    prefix = _engine.prompt(740, 4 * B)
    out = [Request("w1i-writer-greedy", prefix + _engine.prompt(760, 100), "greedy", 45)]
    return out + [Request(f"w1i-reader{n}-{feature}", prefix[:n * B] + _engine.prompt(770 + n, 40 + n), feature, 45 + n)
                  for n, feature in ((1, "seeded"), (3, "greedy"))]


def wave_between() -> list[Request]:
    """4 greedy requests served together after those, each ending a few tokens short of a block
    boundary: few enough that the small pool keeps their blocks for the second wave (the first wave's
    churn evicts most of its own before then)."""
    return [Request(f"w1b-{k}-greedy", _engine.prompt(750 + k, B - 4 - k), "greedy", 50 + k) for k in range(4)]


def wave_two(first: list[Request], outputs: dict) -> list[Request]:
    """8 requests, each on an earlier request's prompt and generated tokens (reaching past a block
    boundary its decoding crossed), then a tail of its own: the in-between wave's first, then the
    first wave's last."""
    out = []
    crossed = [r for r in first if (len(r.prompt) // B) < (len(r.prompt) + len(outputs[r.name]["tokens"])) // B]
    between = [r for r in crossed if r.name.startswith("w1b-")]
    for j, r in enumerate((between + [r for r in crossed if r not in between][::-1])[:8]):
        feature = FEATURES[(j * 5 + 3) % len(FEATURES)]
        prompt = r.prompt + outputs[r.name]["tokens"] + _engine.prompt(800 + j, 31 + 17 * j)
        out.append(Request(f"w2-{j}-{feature}-on-{r.name}", prompt, feature, 100 + j))
    return out


# The yardstick's engine: nothing of the conditions above but the model and the pool's block size.
ALONE = dict(prefix_caching=False, async_scheduling=False, num_blocks=64, max_model_len=2048, max_num_seqs=1,
             max_num_batched_tokens=2048, env={"VLLM_COMPACT_GDN": "1"}, dtype=DTYPE)


def summary(output) -> dict:
    """What the comparison reads of a vLLM RequestOutput."""
    comp = output.outputs[0]
    logprobs = [{t: lp.logprob for t, lp in d.items()} for d in comp.logprobs] if comp.logprobs else None
    prompt_lp = ([None if d is None else {t: lp.logprob for t, lp in d.items()} for d in output.prompt_logprobs]
                 if output.prompt_logprobs else None)
    return {"tokens": list(comp.token_ids), "text": comp.text, "finish": comp.finish_reason,
            "logprobs": logprobs, "prompt_logprobs": prompt_lp, "cached": output.num_cached_tokens or 0}


def non_finite(outputs: dict) -> list[str]:
    """Requests with a logprob or prompt logprob that is NaN or infinite, and where."""
    bad = []
    for name, out in outputs.items():
        for what in ("logprobs", "prompt_logprobs"):
            steps = [i for i, d in enumerate(out[what] or ()) if d and not all(map(math.isfinite, d.values()))]
            if steps:
                bad.append(f"{name}: {what} not finite at steps {steps[:8]}")
    return bad


class Preemptions:
    """Counts the scheduler's preemptions while it is entered (vLLM's Scheduler, in this process)."""

    def __init__(self):
        self.count = 0

    @contextlib.contextmanager
    def counting(self):
        from vllm.v1.core.sched.scheduler import Scheduler

        original = Scheduler._preempt_request

        def counted(sched, request, timestamp):
            self.count += 1
            return original(sched, request, timestamp)

        Scheduler._preempt_request = counted
        try:
            yield self
        finally:
            Scheduler._preempt_request = original


class Chunks:
    """The prefill chunks vLLM's scheduler hands out while entered: prompt -> [(first token, end)] of
    each step's tokens of that request (a resumed request's restart included)."""

    def __init__(self):
        self.of: dict[tuple, list[tuple[int, int]]] = {}

    @contextlib.contextmanager
    def recording(self):
        from vllm.v1.core.sched.scheduler import Scheduler

        original = Scheduler.schedule

        def schedule(sched, *args, **kwargs):
            out = original(sched, *args, **kwargs)
            starts = {r.req_id: r.num_computed_tokens for r in out.scheduled_new_reqs}
            starts |= dict(zip(out.scheduled_cached_reqs.req_ids, out.scheduled_cached_reqs.num_computed_tokens,
                               strict=True))
            for req_id, n in out.num_scheduled_tokens.items():
                key = tuple(sched.requests[req_id].prompt_token_ids)
                self.of.setdefault(key, []).append((starts[req_id], starts[req_id] + n))
            return out

        Scheduler.schedule = schedule
        try:
            yield self
        finally:
            Scheduler.schedule = original


@dataclass
class Served:
    outputs: dict = field(default_factory=dict)
    preemptions: int = 0
    second_wave: list = field(default_factory=list)
    chunks: dict = field(default_factory=dict)


def together(engine: _engine.Engine) -> Served:
    """Both waves, each submitted as one batch of requests, on `engine`."""
    served = Served()
    first = wave_one()
    with engine._cpu(), Preemptions().counting() as pre, Chunks().recording() as chunks:
        _generate(engine, first, served.outputs)
        _generate(engine, wave_inner(), served.outputs)
        _generate(engine, wave_between(), served.outputs)
        served.second_wave = wave_two(first + wave_inner() + wave_between(), served.outputs)
        _generate(engine, served.second_wave, served.outputs)
    served.preemptions = pre.count
    served.chunks = chunks.of
    return served


def alone(engine: _engine.Engine, requests: list[Request]) -> dict:
    """Each request on its own, one after another."""
    outputs: dict = {}
    with engine._cpu():
        for r in requests:
            _generate(engine, [r], outputs)
    return outputs


def _generate(engine, requests, outputs):
    results = engine.llm.generate([{"prompt_token_ids": r.prompt} for r in requests],
                                  [r.sampling_params() for r in requests], use_tqdm=False)
    for r, res in zip(requests, results, strict=True):
        outputs[r.name] = summary(res)


def _near(x: dict, y: dict, tol: float) -> bool:
    """Top-k logprobs alike: shared tokens within `tol`, and a token only one side ranks is within `tol`
    of the other side's last (a near-tie at the cut-off, broken either way)."""
    if any(abs(x[t] - y[t]) > tol for t in x.keys() & y.keys()):
        return False
    return all(a[t] >= min(b.values()) - tol for a, b in ((x, y), (y, x)) for t in a.keys() - b.keys())


def differences(name: str, got: dict, want: dict, tol: float = TOL) -> list[str]:
    """How `got` (served among many) departs from `want` (served alone): any token, the finish reason,
    the text, and logprobs or prompt logprobs further apart than `tol`."""
    bad = []
    mine, theirs = got["tokens"], want["tokens"]
    if mine != theirs:
        step = next((i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b),
                    min(len(mine), len(theirs)))
        lp, here = (side["logprobs"][step] if side["logprobs"] and step < len(side["logprobs"]) else None
                    for side in (want, got))
        bad.append(f"{name}: tokens differ from step {step}: {mine} against {theirs} alone"
                   f" (logprobs there: {here} against {lp} alone)")
    elif got["finish"] != want["finish"]:
        bad.append(f"{name}: finished on {got['finish']!r}, alone on {want['finish']!r}")
    elif got["text"] != want["text"]:
        bad.append(f"{name}: the same tokens, but the text {got['text'][-40:]!r} ends otherwise than "
                   f"{want['text'][-40:]!r} alone")
    for what in ("logprobs", "prompt_logprobs"):
        a, b = got[what], want[what]
        if (a is None) != (b is None):
            bad.append(f"{name}: {what} {'missing' if a is None else 'unexpected'}")
            continue
        for step, (x, y) in enumerate(zip(a or [], b or [], strict=False)):
            if x is not None and y is not None and not _near(x, y, tol):
                bad.append(f"{name}: {what} at step {step}: {x} against {y} alone")
                break
    return bad


def inner_hits(requests: list[Request], served: Served) -> list[tuple[str, int]]:
    """The hits that restored a checkpoint written at a block boundary inside a prefill chunk (gdn-prefix-
    cache 0010-0012): (request, cached tokens), where the cached tokens end an odd block (the chunks of
    two blocks start on even ones) and every request that computed the token before that boundary, on
    the same tokens, did so strictly inside one of its chunks, so whichever of them vLLM cached the
    block from wrote an inner checkpoint."""
    tokens = {r.name: r.prompt + served.outputs[r.name]["tokens"] for r in requests}
    out = []
    for r in requests:
        h = served.outputs[r.name]["cached"]
        if not h or h % B or (h // B) % 2 == 0:
            continue
        crossing = [(s, e) for w in requests if tokens[w.name][:h] == r.prompt[:h]
                    for s, e in served.chunks.get(tuple(w.prompt), ()) if s < h <= e]
        if crossing and all(s < h < e for s, e in crossing):
            out.append((r.name, h))
    return out
