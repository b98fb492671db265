"""`invoke bench`: the recipe's `performance.scenarios` against a running server, measured as vLLM's own
`vllm bench serve` measures, so the two agree (tests/prove/test_bench.py holds them within 5%).

How a request is measured (the same as vLLM's benchmark client, vllm/benchmarks/lib/endpoint_request_func.py):
- streamed /v1/completions, `stream_options.include_usage`, the clock started just before the request is
  sent, on HTTP/1.1 keep-alive connections reused from request to request as vLLM's aiohttp client reuses
  them (a new connection per request put the connect and the server's accept inside every TTFT);
- time to first token: the first streamed chunk that carries a choice, whatever its text (a special token
  or half a UTF-8 character streams as an empty text, and is still the first token);
- end to end: to the last chunk that carries a choice (not the usage chunk or `[DONE]`);
- output tokens: the usage's completion_tokens, counted by the server.
Prompts are built as token ids, so their length is exact in the served model's tokenizer, and sent as the
text they decode to when it tokenizes back to the same ids (the server then tokenizes them as it does
`vllm bench serve`'s text prompts: sending ids skipped that and made TTFT about 8% shorter); every request
gets a prompt and a `cache_salt` of its own (no prefix-cache hit between streams, repeats or runs), and
`ignore_eos` makes every stream produce its full budget. A warm-up request goes right before each measured
run, on the same connections, as `vllm bench serve` sends its test prompt: an engine that has idled
answers its first step late. The streams run on one asyncio event loop, as vLLM's client does: with a
thread per stream, a thread waiting for the GIL read its first token late (the median TTFT came out about
19% longer than vLLM's on the same server).

Scenarios: `short` (streams x max_tokens after a short prompt) gives tokens/s (one stream), aggregate
tokens/s over the wall time from the first send to the last token and the mean per-stream tokens/s
(32 streams); `needle` is a cold chat prompt of prompt_tokens with the smoke suite's needle in the middle
(smoke/haystack.py), timed to the end of the answer (seconds_to_answer). Sizes: the recipe's, times
--scale, within the server's context; streams no more than the recipe's max_num_seqs.
"""

from __future__ import annotations

import asyncio
import json
import math
import statistics
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..host.errors import CheckFailure, UsageError, printable
from ..host.progress import say
from ..recipe.recipes import LoadedRecipe
from ..recipe.schema import Scenario
from . import defaults
from .openai_client import BadAnswer, Connections, Server, ServerError, check_url
from .smoke import haystack

SCHEMA = "cookbook.bench/v1"
SHORT_PROMPT_TOKENS = 128  # "short prompt": when the scenario does not say prompt_tokens
NEEDLE_ANSWER_TOKENS = 1024  # a reasoning model thinks before it answers: a real budget
MIN_TOKENS = 8
FILLER = ("The quiet harbour town kept its lighthouse burning through every winter storm, and the keepers "
          "wrote the weather in a ledger each evening before supper. ")
REQUEST_TIMEOUT_S = 3600


@dataclass(frozen=True)
class Workload:
    """One scenario sized for this server."""

    name: str
    title: str
    kind: str  # short | needle
    streams: int
    prompt_tokens: int
    max_tokens: int
    expect: dict


def size(s: Scenario, scale: float, context: int, max_seqs: int | None = None) -> Workload:
    """The scenario's needle prompt times `scale`, the prompt cut so that prompt and answer fit the context,
    and its streams no more than the server runs at once (`max_seqs`, its --max-num-seqs): past that they
    wait in vLLM's queue, and the figures would time the queue, not streams served together."""
    if not 0 < scale <= 1e6:
        raise UsageError(f"--scale must be above 0, got {scale}")
    prompt = s.prompt_tokens or SHORT_PROMPT_TOKENS
    answer = s.max_tokens or NEEDLE_ANSWER_TOKENS
    # The prompts scale; the answers do not (256 tokens is small already, and a reasoning model needs
    # its budget to reach the needle's answer).
    prompt = max(MIN_TOKENS, round(prompt * scale)) if s.prompt == "needle" else prompt
    answer = min(answer, context // 2)
    prompt = min(prompt, context - answer - 8)  # 8: the chat template's own tokens round the prompt
    if prompt < MIN_TOKENS:
        raise UsageError(f"scenario {s.name}: a context of {context} tokens is too small for it")
    streams = min(s.streams, max_seqs) if max_seqs else s.streams
    return Workload(s.name, s.title, s.prompt, streams, prompt, answer, dict(s.expect))


@dataclass
class Timing:
    """One streamed request, as vLLM's benchmark client times it."""

    start: float  # perf_counter
    ttft: float = 0.0
    latency: float = 0.0  # to the last chunk with a choice
    output_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens the server took from its prefix cache (when it says)
    text: str = ""
    error: str | None = None

    @property
    def end(self) -> float:
        return self.start + self.latency


def chunk_text(choice: dict) -> str:
    if "text" in choice:
        return choice.get("text") or ""
    delta = choice.get("delta") or {}
    return (delta.get("content") or "") + (delta.get("reasoning") or delta.get("reasoning_content") or "")


def take(timing: Timing, event: dict, now: float) -> None:
    """One streamed event, arrived at `now`: a chunk with a choice is a token (the first one is the
    first token, whatever its text); the usage chunk counts them."""
    if event.get("choices"):
        if not timing.latency:
            timing.ttft = now - timing.start
        timing.latency = now - timing.start
        timing.text += chunk_text(event["choices"][0])
    usage = event.get("usage")
    if usage:
        timing.output_tokens = usage.get("completion_tokens") or 0
        timing.prompt_tokens = usage.get("prompt_tokens") or 0
        timing.cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0


def finish(timing: Timing) -> Timing:
    """A request whose stream ended: without a chunk that carried a token it failed."""
    if not timing.latency:
        timing.error = timing.error or "no chunk with a token came back"
    return timing


async def timed(conns: Connections, path: str, body: dict) -> Timing:
    """One streamed POST, each event timed on arrival; the clock starts before the request is sent (a
    kept-alive connection's, as vLLM's client reuses them)."""
    timing = Timing(start=time.perf_counter())
    try:
        async for now, event in conns.events(path, body):
            try:
                take(timing, event, now)
            except (KeyError, IndexError, TypeError, AttributeError) as exc:
                raise BadAnswer(f"{path}: {conns.url} sent an event not shaped as the OpenAI API says "
                                f"({type(exc).__name__}: {printable(str(exc))[:80]})") from None
    except BadAnswer:
        raise  # not a slow or failed request but a server that does not speak the API: exit 3
    except ServerError as exc:
        timing.error = str(exc)
    return finish(timing)


def filler_ids(server: Server) -> list[int]:
    ids = server.token_ids(FILLER * 4)
    if len(ids) < 16:
        raise CheckFailure("the server's tokenizer gave too few tokens for the filler text")
    return ids


def token_prompt(filler: list[int], n: int, seed: int, width: int = 4) -> list[int]:
    """`n` token ids of ordinary text that begin with `seed` written in `width` digits of the filler's own
    tokens: no two seeds share a first KV block, so no prompt hits the prefix cache of another (a hit
    would shorten its time to first token)."""
    digits = sorted(set(filler))
    if seed >= len(digits) ** width:
        raise ValueError(f"seed {seed} needs more than {width} digits")
    head = []
    for _ in range(width):
        seed, d = divmod(seed, len(digits))
        head.append(digits[d])
    body = (filler * (n // len(filler) + 1))[:max(0, n - width)]
    return (head + body)[:n]


def as_text(server: Server, ids: list[int]) -> str | list[int]:
    """The prompt as text when it tokenizes back to exactly these ids, else the ids: a server tokenizes a
    text prompt before scheduling it, as it does for `vllm bench serve`'s prompts and real clients'."""
    text = server.post("/detokenize", {"model": server.model, "tokens": ids})["prompt"]
    return text if server.token_ids(text) == ids else ids


def completion_body(model: str, prompt: str | list[int], max_tokens: int, ignore_eos: bool = True) -> dict:
    """vLLM's benchmark payload for the completions API (temperature 0 besides), with a cache salt of its
    own: no request reuses another's prefix cache, in this run or an earlier one on the same server
    (without it a second `invoke bench` sent the first one's prompts, and any prompt longer than a KV
    block came back a cache hit)."""
    return {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
            "repetition_penalty": 1.0, "ignore_eos": ignore_eos, "stream": True,
            "stream_options": {"include_usage": True}, "cache_salt": uuid.uuid4().hex}


def concurrently(server: Server, path: str, bodies: list[dict], warm: dict | None = None,
                 streams: int | None = None) -> tuple[list[Timing], float, float]:
    """The requests from one event loop, `streams` in flight at a time (all at once by default), as
    `vllm bench serve` sends them with an infinite request rate and --max-concurrency: (timings, start,
    end of the benchmark). One event loop, not a thread per stream: a thread that waits for the GIL reads
    its first token late, and 32 of them made the time to first token longer than vLLM's client measured
    on the same server. `warm`: a completions request sent first, unmeasured, on the same connections
    (vLLM's client sends its test prompt so: an engine that has idled answers its first step late, and
    that step is every stream's first token)."""

    async def all_of():
        async with Connections(server.url, server.timeout) as conns:
            if warm is not None:
                t = await timed(conns, "/v1/completions", warm)
                if t.error:
                    raise CheckFailure(f"the warm-up request failed: {t.error}")
            slots = asyncio.Semaphore(streams or len(bodies) or 1)

            async def one(body):
                async with slots:
                    return await timed(conns, path, body)

            begin = time.perf_counter()
            timings = await asyncio.gather(*(one(b) for b in bodies))
            return timings, begin, time.perf_counter()

    return asyncio.run(all_of())


def short_metrics(timings: list[Timing], begin: float, end: float) -> dict:
    tokens = sum(t.output_tokens for t in timings)
    per_stream = [t.output_tokens / t.latency for t in timings if t.latency > 0]
    out = {"output_tokens": tokens, "duration_s": end - begin,
           "aggregate_tokens_per_s": tokens / (end - begin),
           "per_stream_tokens_per_s": statistics.fmean(per_stream) if per_stream else 0.0,
           "median_ttft_s": statistics.median(t.ttft for t in timings),
           "median_e2e_s": statistics.median(t.latency for t in timings),
           "prompt_tokens": sorted({t.prompt_tokens for t in timings}),
           # Prompt tokens served from the prefix cache: a hit shortens TTFT, so a run that measures a
           # cold prompt says it had none.
           "cached_tokens": sum(t.cached_tokens for t in timings)}
    if len(timings) == 1:
        out["tokens_per_s"] = out["per_stream_tokens_per_s"]
    return out


def run_scenario(server: Server, w: Workload, repeats: int, filler: list[int], seeds: Iterator[int]) -> dict:
    runs = []
    warm = completion_body(server.model, token_prompt(filler, 32, 0), 16)
    for rep in range(repeats):
        say(f"{w.name}: run {rep + 1} of {repeats} ({w.streams} x {w.max_tokens} tokens after "
            f"{w.prompt_tokens} prompt tokens)")
        if w.kind == "short":
            bodies = [completion_body(server.model, as_text(server, token_prompt(filler, w.prompt_tokens, next(seeds))),
                                      w.max_tokens) for _ in range(w.streams)]
            timings, begin, end = concurrently(server, "/v1/completions", bodies, warm)
            failed = [t.error for t in timings if t.error]
            if failed:
                raise CheckFailure(f"{w.name}: {len(failed)} of {len(timings)} requests failed: {failed[0]}")
            runs.append(short_metrics(timings, begin, end))
        else:
            messages, counted = haystack.build(server, w.prompt_tokens, 0.5)  # the smoke suite's needle prompt
            body = {"model": server.model, "messages": messages, "max_tokens": w.max_tokens, "temperature": 0.0,
                    "stream": True, "stream_options": {"include_usage": True}, "cache_salt": uuid.uuid4().hex}
            (t,), _, _ = concurrently(server, "/v1/chat/completions", [body], warm)
            if t.error:
                raise CheckFailure(f"{w.name}: {t.error}")
            runs.append({"seconds_to_answer": t.latency, "median_ttft_s": t.ttft, "median_e2e_s": t.latency,
                         "prompt_tokens": [t.prompt_tokens or counted], "output_tokens": t.output_tokens,
                         "needle_found": haystack.found(t.text)})
    return {"name": w.name, "title": w.title, "workload": asdict(w), "runs": runs, **summarise(runs, w.expect)}


SPREAD_KEYS = ("tokens_per_s", "aggregate_tokens_per_s", "per_stream_tokens_per_s", "seconds_to_answer",
               "median_ttft_s", "median_e2e_s")


def summarise(runs: list[dict], expect: dict) -> dict:
    """Medians over the repeats (`values`, keyed as the recipe's `expect` plus TTFT and end to end) and
    their spread: [min, max] and the relative standard deviation."""
    values, spread = {}, {}
    for key in SPREAD_KEYS:
        xs = [r[key] for r in runs if key in r]
        if not xs:
            continue
        values[key] = statistics.median(xs)
        rsd = statistics.stdev(xs) / statistics.fmean(xs) if len(xs) > 1 and statistics.fmean(xs) else 0.0
        spread[key] = {"min": min(xs), "max": max(xs), "rsd": rsd}
    return {"values": values, "spread": spread, "expect": expect}


def check_request(loaded: LoadedRecipe, repeats: int, only) -> object:
    """The recipe's performance section, once a run's repeats and `only` are ones it can do."""
    perf = defaults.performance(loaded)  # a recipe that publishes no scenarios runs the defaults
    if repeats < 1:
        raise UsageError(f"--repeats must be at least 1, got {repeats}")
    names = [s.name for s in perf.scenarios]
    unknown = sorted(set(only or []) - set(names))
    if unknown:
        raise UsageError(f"no scenario {', '.join(unknown)} in {loaded.id}", hint="one of: " + ", ".join(names))
    return perf


def run(loaded: LoadedRecipe, url: str, *, scale: float = 1.0, repeats: int = 3, only: list[str] | None = None,
        image: str | None = None, image_id: str | None = None, facts: dict | None = None) -> dict:
    """`facts`: what results.image_target says of a container run (content hash, hardware), for the page."""
    perf = check_request(loaded, repeats, only)
    server = Server.connect(url, REQUEST_TIMEOUT_S)
    filler = filler_ids(server)
    seeds = iter(range(1, 10**6))
    seqs = loaded.recipe.serve.max_num_seqs
    scenarios = [run_scenario(server, size(s, scale, server.max_model_len, seqs), repeats, filler, seeds)
                 for s in perf.scenarios if not only or s.name in only]
    return {"schema": SCHEMA, "recipe": loaded.id, "recipe_hash": loaded.hash,
            "target": {"url": url, "image": image, "image_id": image_id, **(facts or {})},
            "server": {"model": server.model, "max_model_len": server.max_model_len},
            "scale": scale, "repeats": repeats, "only": sorted(only) if only else None,
            "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "scenarios": scenarios}


def validate(doc: dict) -> dict:
    """The result file's shape (SCHEMA), checked before it is written or read back."""
    need = {"schema", "recipe", "recipe_hash", "target", "server", "scale", "repeats", "date", "scenarios"}
    missing = need - set(doc)
    if doc.get("schema") != SCHEMA or missing:
        raise CheckFailure(f"not a {SCHEMA} result: missing {sorted(missing)}" if missing else
                           f"schema is {doc.get('schema')!r}, not {SCHEMA}")
    target = doc["target"]
    if not (target.get("url") or target.get("image_id")):
        raise CheckFailure("a bench result names the server URL or the image id it measured")
    for s in doc["scenarios"]:
        for key, value in s["values"].items():
            if not isinstance(value, int | float) or math.isnan(value):
                raise CheckFailure(f"scenario {s['name']}: {key} is not a number")
    return doc


def fmt_values(values: dict, spread: dict) -> str:
    from .docs import figure

    shown = {k: v for k, v in values.items() if k in ("tokens_per_s", "aggregate_tokens_per_s",
                                                      "per_stream_tokens_per_s", "seconds_to_answer")}
    text = figure(shown)
    ttft = values.get("median_ttft_s")
    return text + (f" (TTFT {ttft:.3g} s)" if ttft is not None and "seconds_to_answer" not in shown else "")


def markdown(doc: dict) -> str:
    """The page's Performance rows with the published figure beside the measured one."""
    from .docs import figure

    scale = f" at scale {doc['scale']:g}" if doc["scale"] != 1 else ""
    where = doc["target"].get("image_id") or doc["target"]["url"]
    lines = [f"Measured {doc['date']} on `{where}`{scale}, median of {doc['repeats']} runs.", "",
             "| Test | Result | Published |", "|---|---|---|"]
    for s in doc["scenarios"]:
        lines.append(f"| {s['title']} | {fmt_values(s['values'], s['spread'])} | {figure(s['expect'])} |")
    return "\n".join(lines) + "\n"


def plot(doc: dict, path: Path) -> None:
    """Measured (median, with the min-max spread) beside published, one panel per unit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("tokens/s", ("tokens_per_s", "aggregate_tokens_per_s", "per_stream_tokens_per_s")),
              ("seconds to the answer", ("seconds_to_answer",))]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, (unit, keys) in zip(axes, panels, strict=True):
        labels, measured, low, high, published = [], [], [], [], []
        for s in doc["scenarios"]:
            for key in keys:
                if key not in s["values"]:
                    continue
                v, sp = s["values"][key], s["spread"][key]
                pub = s["expect"].get(key)
                labels.append(s["name"] + ("" if key in ("tokens_per_s", "seconds_to_answer") else
                                           "\n" + key.split("_tokens")[0]))
                measured.append(v)
                low.append(v - sp["min"])
                high.append(sp["max"] - v)
                published.append(max(pub) if isinstance(pub, list) else (pub if pub is not None else 0))
        xs = range(len(labels))
        ax.bar([x - 0.2 for x in xs], measured, 0.4, yerr=[low, high], label="measured", capsize=3)
        ax.bar([x + 0.2 for x in xs], published, 0.4, label="published")
        ax.set_xticks(list(xs), labels, fontsize=7)
        ax.set_ylabel(unit)
        ax.legend()
    fig.suptitle(f"{doc['recipe']}: measured (scale {doc['scale']:g}) and published")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write(doc: dict, out: Path) -> dict[str, Path]:
    validate(doc)
    out.mkdir(parents=True, exist_ok=True)
    files = {"json": out / "bench.json", "markdown": out / "bench.md", "plot": out / "bench.png"}
    files["json"].write_text(json.dumps(doc, indent=2) + "\n")
    files["markdown"].write_text(markdown(doc))
    plot(doc, files["plot"])
    return files



def dry_run(loaded: LoadedRecipe, scale: float, repeats: int, only: list[str] | None) -> None:
    """What would run, sized for the recipe's own context (a live run sizes for the server's)."""
    context = loaded.recipe.serve.max_model_len
    for s in defaults.performance(loaded).scenarios:
        if only and s.name not in only:
            continue
        w = size(s, scale, context, loaded.recipe.serve.max_num_seqs)
        capped = f" (of {s.streams}: --max-num-seqs {w.streams})" if w.streams < s.streams else ""
        print(f"{w.name}: {repeats} x {w.streams} stream(s){capped}, {w.prompt_tokens} prompt tokens, {w.max_tokens} "
              f"output tokens ({'cold chat, needle' if w.kind == 'needle' else 'completions, ignore_eos'})")


def task(recipe: str, url: str | None, image: str | None, scale: float, repeats: int, only: tuple[str, ...],
         out: Path | None, port: int | None, runtime: str | None, name: str | None, hf_cache: str | None, env: dict,
         option: tuple[str, ...], timeout: float, args: tuple[str, ...], dry_run: bool = False) -> dict | None:
    """`invoke bench` with the task's options: against --url, or a container of --image (serve.run_spec)."""
    from ..recipe import recipes
    from . import serve

    loaded = recipes.load(recipe)
    spec = serve.run_spec(loaded, "bench", image, port, runtime, name, hf_cache, env, option, args)
    return bench(loaded, url, spec, out or Path(f"build/bench/{loaded.id}"), scale=scale, repeats=repeats,
                 only=list(only) or None, timeout_s=timeout, dry=dry_run)


def bench(loaded: LoadedRecipe, url: str | None, run_spec, out: Path, *, scale: float, repeats: int,
          only: list[str] | None, timeout_s: float, dry: bool) -> dict | None:
    """`invoke bench`: against --url, or a container of --image that is always removed afterwards."""
    from . import results, serve

    if bool(url) == bool(run_spec):
        raise UsageError("give exactly one of --url and --image")
    url = url and check_url(url)
    check_request(loaded, repeats, only)  # a dry run refuses what the run would
    if dry:
        if run_spec:
            serve.check_spec(run_spec)
            print(serve.shown(serve.run_argv(run_spec)))
        dry_run(loaded, scale, repeats, only)
        return None
    with serve.target(url, run_spec, out / "server.log", timeout_s) as t:
        facts = t.image_id and results.image_target(t.image, t.image_id, results.log_hardware(t.log_path),
                                                    results.image_labels(t.image_id), run_spec.args)
        doc = run(loaded, t.url, scale=scale, repeats=repeats, only=only, image=t.image, image_id=t.image_id,
                  facts=facts or None)
    files = write(doc, out)
    print(markdown(doc), end="")
    for kind, path in files.items():
        print(f"{kind:9}{path}")
    return doc
