"""The recipe's serving conditions in miniature, on the release's real engine (tests/lab/_engine.py), and
the yardstick the pack is held to under them: each request served among many must give what it gives
served alone.

Conditions (`CONDITIONS`): the recipe's bucket variables (up to 8 prompts merged into one prefill batch,
up to 32 decodes, exponential bucketing), 32 sequences at a time, chunked prefill with a budget of two
hybrid blocks, prefix caching with gdn-prefix-cache's compact GDN slots, async scheduling on (vLLM
0.26.0's default) or off, and a KV pool small enough that requests are preempted and resumed.

Workload (`wave_one`, `wave_between`, `wave_two`): 44 requests. The first 32 are submitted together:
prompts on shared prefixes of 1 to 3 blocks (prefix-cache hits among them) or none, each with one of the
sampling features the page's checks and the OpenAI API reach (`FEATURES`). 4 greedy ones follow
together. The 8 of the second wave are submitted together once those are done, each on the prompt and
the generated text of an earlier request that crossed a block boundary while decoding, so their hits
reach into generated text.

Yardstick (`alone`, `ALONE`): the same requests one at a time on a fresh engine with prefix caching
off, async scheduling off and each prompt prefilled in one step. `differences` compares token for
token (greedy and seeded alike), the finish reason and the text, and logprobs and prompt logprobs
within `_engine.TOL`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import _engine

B = _engine.BLOCK
MAX_TOKENS = 16

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
                  enable_chunked_prefill=True, env=BUCKET_ENV)

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


def wave_between() -> list[Request]:
    """4 greedy requests served together after the first wave, each ending a few tokens short of a block
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
             max_num_batched_tokens=2048, env={"VLLM_COMPACT_GDN": "1"})


def summary(output) -> dict:
    """What the comparison reads of a vLLM RequestOutput."""
    comp = output.outputs[0]
    logprobs = [{t: lp.logprob for t, lp in d.items()} for d in comp.logprobs] if comp.logprobs else None
    prompt_lp = ([None if d is None else {t: lp.logprob for t, lp in d.items()} for d in output.prompt_logprobs]
                 if output.prompt_logprobs else None)
    return {"tokens": list(comp.token_ids), "text": comp.text, "finish": comp.finish_reason,
            "logprobs": logprobs, "prompt_logprobs": prompt_lp, "cached": output.num_cached_tokens or 0}


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


@dataclass
class Served:
    outputs: dict = field(default_factory=dict)
    preemptions: int = 0
    second_wave: list = field(default_factory=list)


def together(engine: _engine.Engine) -> Served:
    """Both waves, each submitted as one batch of requests, on `engine`."""
    served = Served()
    first = wave_one()
    with engine._cpu(), Preemptions().counting() as pre:
        _generate(engine, first, served.outputs)
        _generate(engine, wave_between(), served.outputs)
        served.second_wave = wave_two(first + wave_between(), served.outputs)
        _generate(engine, served.second_wave, served.outputs)
    served.preemptions = pre.count
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


# Seeded sampling races the tokens' probabilities against the seed's noise, so a bf16 logit that differs
# in its last bit between a batch of 40 and a batch of 1 can flip a later token (measured: one seeded
# request in 40, at step 9). Its first tokens must match exactly: a draw taken or skipped wrongly shows
# there (the partial-prefill bug moved the first token; the padding bug the second).
SEEDED_EXACT = 4
# Features whose token is not the raw logits' argmax (penalties, a bias, banned words): their logprobs
# are raw (vllm-gaudi's runner builds its Sampler without the model's logprobs_mode), so a near-tie
# after the processors cannot be seen. As for seeded requests, their first SEEDED_EXACT tokens must
# match exactly: penalties that miss generated tokens, or a wrong bias row, show there (measured on an
# AMD EPYC: a repetition-penalty request flipped at step 13, on a tie the raw logprobs do not show).
MARGIN_UNSEEN = ("repetition", "frequency", "presence", "logit-bias", "bad-words")


def _near(x: dict, y: dict, tol: float) -> bool:
    """Top-k logprobs alike: shared tokens within `tol`, and a token only one side ranks is within `tol`
    of the other side's last (a near-tie at the cut-off, broken either way)."""
    if any(abs(x[t] - y[t]) > tol for t in x.keys() & y.keys()):
        return False
    return all(a[t] >= min(b.values()) - tol for a, b in ((x, y), (y, x)) for t in a.keys() - b.keys())


def treated_alike(request: Request, history: list[int], a: int, b: int) -> bool:
    """Whether a request decoded without sampling moves tokens `a` and `b` alike after generating
    `history` (penalties, bias, min_tokens' masked stops, vLLM 0.26.0's rules): then its choice between
    them is a choice between their raw logits. Never for a sampled request, nor for bad words (what a
    bad word bans depends on the text so far)."""
    kw = _params(request.feature, request.index)
    if kw.get("temperature", 1.0) > 0 or "bad_words" in kw:
        return False
    if "repetition_penalty" in kw:  # applied to the tokens of the prompt and the output
        seen = set(request.prompt) | set(history)
        return (a in seen) == (b in seen)
    if "frequency_penalty" in kw or "presence_penalty" in kw:  # the output's counts
        return history.count(a) == history.count(b)
    if "logit_bias" in kw:
        return kw["logit_bias"].get(a, 0.0) == kw["logit_bias"].get(b, 0.0)
    if "min_tokens" in kw and len(history) < kw["min_tokens"]:
        stops = set(kw["stop_token_ids"])
        return (a in stops) == (b in stops)
    return True


def differences(name: str, got: dict, want: dict, seeded: bool = False, tol: float = _engine.TOL,
                flips: list | None = None, raw=None, alike=None) -> list[str]:
    """How `got` (served among many) departs from `want` (served alone). A token may differ only where
    that is no defect: a near-tie between the two tokens taken (within `tol`), or, with `seeded` (a seeded
    request, or one whose margins are unseen: MARGIN_UNSEEN), past its first SEEDED_EXACT tokens; the
    comparison ends there and `flips` notes it.

    `raw(tokens)`, where given, is the float32 reference's logprobs along the generated `tokens`
    ([step, vocab]; vllm-gaudi's logprobs are raw too), and `alike(history, a, b)` whether the
    request's processors move two tokens alike (treated_alike). Two bf16 runs may each be within `tol`
    of the reference and on either side of it, so what the reference explains is no defect: a flip
    between two tokens it holds within `tol` that the request treats alike (a near-tie a request
    without logprobs cannot show), and logprobs further apart than `tol` that are each within `tol` of
    it."""
    bad = []
    mine, theirs = got["tokens"], want["tokens"]
    diverged = next((i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b),
                    None if len(mine) == len(theirs) else min(len(mine), len(theirs)))
    upto = len(theirs) if diverged is None else diverged
    if diverged is not None:
        lp = want["logprobs"][diverged] if want["logprobs"] and diverged < len(want["logprobs"]) else None
        here = got["logprobs"][diverged] if got["logprobs"] and diverged < len(got["logprobs"]) else None
        # A near-tie between the two tokens taken: their logprobs within `tol`, read alone where it ranks
        # them, else here (a three-way tie can leave either one out of a run's top-k; the two runs'
        # logprobs are held within `tol` of each other below).
        known = [next((side[t] for side in (lp, here) if side and t in side), None)
                 for t in (mine[diverged], theirs[diverged])] if diverged < min(len(mine), len(theirs)) else []
        tie = len(known) == 2 and None not in known and abs(known[0] - known[1]) <= tol
        if not tie and raw is not None and alike is not None and diverged < min(len(mine), len(theirs)):
            a, b = mine[diverged], theirs[diverged]
            ref = raw(mine[:diverged + 1])[diverged]
            tie = alike(mine[:diverged], a, b) and abs(ref[a] - ref[b]).item() <= tol
        if tie or (seeded and diverged >= SEEDED_EXACT):
            if flips is not None:
                flips.append(f"{name}: step {diverged} ({'near-tie' if tie else 'past the exact steps'})")
        else:
            bad.append(f"{name}: tokens differ from step {diverged}: {got['tokens']} against {want['tokens']} alone"
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
        # Generated tokens' logprobs up to a divergence; after it the two runs condition on other tokens.
        end = None if what == "prompt_logprobs" else upto
        for step, (x, y) in enumerate(zip((a or [])[:end], (b or [])[:end], strict=False)):
            if x is not None and y is not None and not _near(x, y, tol):
                if what == "logprobs" and raw is not None:
                    ref = raw(mine[:step + 1])[step]
                    if all(abs(v - ref[t].item()) <= tol for side in (x, y) for t, v in side.items()):
                        continue
                bad.append(f"{name}: {what} at step {step}: {x} against {y} alone")
                break
    return bad
