"""What the release's engine makes the host wait for, per step, counted on the CPU (cookbook/fixpack/lab/_engine.py).

On a Gaudi a step's host synchronisations are where the host stops until the device has caught up:
a read of a device tensor's values (`.item()`, `.tolist()`, `.numpy()`, `bool()`, `int()`, a copy to the
host that is not `non_blocking`), a blocking copy of host data to the device (`torch.tensor(data,
device="hpu")`, `.to("hpu")` or `copy_` without `non_blocking`, host index tensors or lists into a
device tensor), an op whose output shape depends on device values (`nonzero`, boolean masks), and the
explicit `synchronize` calls. The lab runs every tensor on the CPU, so none of this costs anything here:
`HostSyncs` tells device tensors from host ones and counts each of these calls at its call site.

Device tensors: `_engine.HpuOnCpu` sees every torch call with its original device argument and hands
it to `HostSyncs.observe`. A tensor made with device "hpu" (or a bare index, or `HPU`: what
`torch.device("hpu")` and a device tensor's `.device` give while counting, so `with torch.device(...)`
model building and `device=x.device` count too), or by an op on a device tensor, is a device tensor;
one moved with `.cpu()` / `.to("cpu")` is a host one. The label sits on the tensor's storage (views and
parameters share it; it dies with the storage). Moves between host and device are real copies while
counting (on the CPU `.to("cpu")` would return the same tensor, and the host and device copies would
be one). A host tensor beside a device one in an op is reported (`MIXED`), not counted: a Gaudi
refuses it, so in the lab it is an artifact of the CPU standing in.

Steps: `execute_model` then `sample_tokens` of the runner (and, under async scheduling, the `get_output`
of the step's `AsyncHPUModelRunnerOutput`, which the engine core calls a step later). A step is a decode
step when every scheduled request is past its prompt and has one token scheduled. A call site is the
innermost frame in the tree's `vllm_gaudi/` or `vllm/` (file, function, source line), with its caller
there when it is one of the release's helpers.
"""

from __future__ import annotations

import contextlib
import linecache
import os
import sys
import weakref
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch

T = torch.Tensor
# Reads of a device tensor's values.
READS = {T.item: "item()", T.tolist: "tolist()", T.numpy: "numpy()", T.__bool__: "bool()", T.__int__: "int()",
         T.__float__: "float()", T.__index__: "index()"}
# Ops whose output shape depends on the values of a device tensor.
DATA_SHAPED = {T.nonzero: "nonzero()", torch.nonzero: "nonzero()", torch.masked_select: "masked_select()",
               T.masked_select: "masked_select()", torch.unique: "unique()", T.unique: "unique()",
               torch.argwhere: "argwhere()"}
FROM_DATA = {torch.tensor: "torch.tensor", torch.as_tensor: "torch.as_tensor", torch.asarray: "torch.asarray",
             T.new_tensor: "new_tensor"}
# The kinds that make the host wait (what the guard counts); "d2h async" is a non_blocking copy to the
# host, which waits only at the event or synchronize that follows it (counted there).
ASYNC, H2D_ASYNC = "d2h async", "h2d async"
# A host tensor (not a scalar) beside a device one in an op: a Gaudi refuses it (tensors on different
# devices), so it is no sync there but a lab artifact (vLLM's logits processors keep their "device"
# tensor on the host when `torch.device(device).type` is "cpu", as the lab's HPU device is) or a
# latent error. Reported, not counted as a sync.
MIXED = "mixed host/device operands of"
HELPERS = ("vllm_gaudi/utils.py",)  # a call site here is named with its caller


# `HpuOnCpu` maps `torch.device("hpu")` itself to the CPU (so `with torch.device("hpu"):` and the
# runner's `self.device` make CPU tensors); while counting, that device and the `.device` of every
# device tensor are this one object, which stands for the HPU.
HPU = torch.device("cpu")
DEVICE_OF = T.device.__get__


def _is_hpu(device) -> bool:
    if device is HPU or (isinstance(device, int) and not isinstance(device, bool)):
        return True
    if isinstance(device, torch.device):
        return device.type == "hpu"
    return isinstance(device, str) and device.split(":")[0] == "hpu"


def _is_cpu(device) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cpu"
    return isinstance(device, str) and device.split(":")[0] == "cpu"


def _tensors(args, kwargs) -> list[torch.Tensor]:
    out = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out += [x for x in a if isinstance(x, torch.Tensor)]
    return out


def _outputs(result) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (list, tuple)):
        return [x for x in result if isinstance(x, torch.Tensor)]
    return []


def _is_inplace(func) -> bool:
    name = getattr(func, "__name__", "")
    return name.endswith("_") and not name.endswith("__")


@dataclass
class Step:
    index: int
    decode: bool
    num_reqs: int
    compiles: tuple = (0, 0)  # dynamo's frames compiled and graphs made so far, when the step starts
    events: Counter = field(default_factory=Counter)  # (kind, site) -> calls
    shapes: dict = field(default_factory=dict)  # (kind, site) -> shapes of the tensors copied to the device


def _compiles() -> tuple:
    from torch._dynamo.utils import counters

    return counters["frames"]["total"], counters["stats"]["unique_graphs"]


@dataclass(frozen=True)
class Site:
    """A call site: the file under the tree, the function and the source line (line numbers differ
    between the pristine and the patched tree; the three together do not), and where it was seen."""

    file: str
    function: str
    code: str
    line: int = field(compare=False)
    caller: tuple = ()  # (file, function, code, line) of the caller of a helper (HELPERS)

    def __str__(self):
        via = f" via {self.caller[0]}:{self.caller[3]} {self.caller[1]}" if self.caller else ""
        return f"{self.file}:{self.line} {self.function}: {self.code}{via}"

    @property
    def key(self) -> str:
        via = f" <- {self.caller[0]}::{self.caller[1]}::{self.caller[2]}" if self.caller else ""
        return f"{self.file}::{self.function}::{self.code}{via}"


class HostSyncs:
    """The counter. `observe` is called by `_engine.HpuOnCpu` for every torch call (original arguments,
    result); `steps()` wraps the runner while the engine serves."""

    def __init__(self, tree: Path | None = None):
        self.tree = str(tree or os.environ.get("COOKBOOK_LAB_TREE", "")).rstrip("/") + "/"
        self._device = weakref.WeakSet()  # storages of device tensors
        self.steps_seen: list[Step] = []
        self.current: Step | None = None
        self.outside: Counter = Counter()  # events outside any step (engine start, scheduler)
        self.sites: dict[str, Site] = {}
        self.final_compiles = (0, 0)

    # --- device labels ---
    def on_device(self, t: torch.Tensor) -> bool:
        try:
            return t.untyped_storage() in self._device
        except (RuntimeError, NotImplementedError, TypeError):
            return False

    def _label(self, tensors, device: bool):
        for t in tensors:
            try:
                s = t.untyped_storage()
            except (RuntimeError, NotImplementedError, TypeError):
                continue
            if device:
                self._device.add(s)
            else:
                self._device.discard(s)

    # --- what a call costs ---
    def observe(self, func, args, kwargs, call):
        """Run `call()` (the mapped torch call) and count what `func` on the original `args`/`kwargs`
        would make the host wait for on a Gaudi; label the outputs."""
        if func is torch.device:
            result = call()
            return HPU if args and _is_hpu(args[0]) else result
        if func == DEVICE_OF:
            return HPU if self.on_device(args[0]) else call()
        inputs = _tensors(args, kwargs)
        dev_in = [t for t in inputs if self.on_device(t)]
        self_t = args[0] if args and isinstance(args[0], torch.Tensor) else None
        self_dev = self_t is not None and any(t is self_t for t in dev_in)
        nb = bool(kwargs.get("non_blocking", False))
        transfer = None  # the label outputs get: True device, False host, None as the inputs say

        if func in READS and self_dev:
            self.event(READS[func])
        elif func in DATA_SHAPED and dev_in:
            self.event("d2h " + DATA_SHAPED[func])
        elif func is T.cpu:
            transfer = False
            if self_dev:
                self.event("d2h cpu()")
        elif func is T.to:
            target = kwargs.get("device")
            for a in args[1:]:
                if isinstance(a, (str, torch.device)) or (isinstance(a, int) and not isinstance(a, bool)):
                    target = a
                elif isinstance(a, torch.Tensor):
                    target = "hpu" if self.on_device(a) else "cpu"
                elif isinstance(a, bool):  # to(device, dtype, non_blocking)
                    nb = nb or a
            if _is_hpu(target):
                transfer = True
                if not self_dev:
                    self.event(H2D_ASYNC if nb else "h2d to(hpu)", tuple(self_t.shape))
            elif _is_cpu(target):
                transfer = False
                if self_dev:
                    self.event(ASYNC if nb else "d2h to(cpu)")
        elif func is T.copy_ and len(args) > 1 and isinstance(args[1], torch.Tensor):
            nb = nb or (len(args) > 2 and bool(args[2]))
            src_dev = self.on_device(args[1])
            if src_dev and not self_dev:
                self.event(ASYNC if nb else "d2h copy_")
            elif self_dev and not src_dev:
                self.event(H2D_ASYNC if nb else "h2d copy_", tuple(args[1].shape))
        elif func in FROM_DATA and (_is_hpu(kwargs.get("device")) or (func is T.new_tensor and self_dev
                                                                       and "device" not in kwargs)):
            data = args[0] if func is not T.new_tensor else (args[1] if len(args) > 1 else None)
            if not (isinstance(data, torch.Tensor) and self.on_device(data)):
                self.event(f"h2d {FROM_DATA[func]}(device=hpu)", _shape(data))
        elif func in (T.__getitem__, T.__setitem__) and self_t is not None:
            self._indexing(func, args, self_dev)
        elif dev_in and any(t.dim() > 0 and not any(t is d for d in dev_in) for t in inputs):
            self.event(f"{MIXED} {getattr(func, '__name__', func)}")

        result = call()
        if transfer is not None:
            outs = _outputs(result)
            # A real copy, as between host and device (on the CPU `.to`/`.cpu` may return the tensor).
            if isinstance(result, torch.Tensor) and self_t is not None and _shares(result, self_t):
                result = result.clone()
                outs = [result]
            self._label(outs, transfer)
        elif "device" in kwargs:
            outs = _outputs(result)
            if func in FROM_DATA and isinstance(result, torch.Tensor) and inputs and _shares(result, inputs[0]):
                result = result.clone()  # as_tensor(host tensor, device="hpu") is a copy on a Gaudi
                outs = [result]
            self._label(outs, _is_hpu(kwargs["device"]))
        elif not (_is_inplace(func) or func is T.__setitem__ or "out" in kwargs):
            self._label(_outputs(result), bool(dev_in))
        return result

    def _indexing(self, func, args, self_dev):
        index = args[1] if len(args) > 1 else None
        parts = index if isinstance(index, tuple) else (index,)
        for p in parts:
            if isinstance(p, torch.Tensor):
                p_dev = self.on_device(p)
                if self_dev and not p_dev and p.dim() > 0:
                    self.event("h2d host index", tuple(p.shape))
                elif p_dev and p.dtype == torch.bool:
                    self.event("d2h boolean mask")
            elif isinstance(p, list) and p and self_dev:
                self.event("h2d list index", (len(p),))
        if func is T.__setitem__ and len(args) > 2 and isinstance(args[2], torch.Tensor):
            v_dev = self.on_device(args[2])
            if self_dev and not v_dev and args[2].dim() > 0:
                self.event("h2d host tensor assigned")
            elif v_dev and not self_dev:
                self.event("d2h device tensor assigned")

    def event(self, kind: str, shape: tuple | None = None):
        site = self._site()
        self.sites.setdefault(site.key, site)
        (self.current.events if self.current else self.outside)[(kind, site.key)] += 1
        if shape is not None and self.current:
            self.current.shapes.setdefault((kind, site.key), set()).add(shape)

    def _site(self) -> Site:
        frame = sys._getframe(1)
        found = None
        while frame is not None:
            name = frame.f_code.co_filename
            if name.startswith(self.tree) and name[len(self.tree):].split("/", 1)[0] in ("vllm", "vllm_gaudi"):
                rel = name[len(self.tree):]
                if found is None:
                    found = (rel, frame.f_code.co_name, frame.f_lineno,
                             linecache.getline(name, frame.f_lineno).strip())
                    if rel not in HELPERS:
                        break
                else:
                    code = linecache.getline(name, frame.f_lineno).strip()
                    caller = (rel, frame.f_code.co_name, code, frame.f_lineno)
                    return Site(*found[:2], found[3], found[2], caller)
            frame = frame.f_back
        if found is None:
            return Site("(outside the tree)", "", "", 0)
        return Site(found[0], found[1], found[3], found[2])

    # --- steps ---
    @contextlib.contextmanager
    def steps(self):
        """Wrap the tree's runner and the HPU synchronize calls while serving."""
        import habana_frameworks.torch.hpu as hthpu
        from vllm_gaudi.v1.worker import hpu_model_runner as m

        counter = self
        runner, output = m.HPUModelRunner, m.AsyncHPUModelRunnerOutput
        execute, sample, get = runner.execute_model, runner.sample_tokens, output.get_output

        def execute_model(self, scheduler_output, *a, **k):
            counter.current = counter._new_step(self, scheduler_output)
            return execute(self, scheduler_output, *a, **k)

        def sample_tokens(self, *a, **k):
            step = counter.current
            try:
                out = sample(self, *a, **k)
            finally:
                counter.current = None
            if isinstance(out, output):
                out._lab_step = step
            return out

        def get_output(self):
            before, counter.current = counter.current, getattr(self, "_lab_step", None)
            try:
                return get(self)
            finally:
                counter.current = before

        def counted(name, f):
            def synchronize(*a, **k):
                counter.event(name)
                return f(*a, **k)
            return synchronize

        wrapped = {(runner, "execute_model"): execute_model, (runner, "sample_tokens"): sample_tokens,
                   (output, "get_output"): get_output}
        for owner, what in ((torch.hpu, "torch.hpu"), (hthpu, "htorch.hpu"), (torch.hpu.Event, "event"),
                            (torch.hpu.Stream, "stream")):
            wrapped[(owner, "synchronize")] = counted(f"{what}.synchronize()", owner.synchronize)
        saved = [(o, n, getattr(o, n)) for o, n in wrapped]
        for (o, n), f in wrapped.items():
            setattr(o, n, f)
        try:
            yield self
        finally:
            for o, n, f in saved:
                setattr(o, n, f)
            self.final_compiles = _compiles()

    def _new_step(self, runner, so) -> Step:
        cached = so.scheduled_cached_reqs
        resumed = set(getattr(cached, "resumed_req_ids", ()) or ())
        computed = dict(zip(cached.req_ids, cached.num_computed_tokens, strict=False))
        decode = bool(so.num_scheduled_tokens) and not so.scheduled_new_reqs and not resumed and all(
            n == 1 and rid in computed and rid in runner.requests
            and computed[rid] >= runner.requests[rid].num_prompt_tokens
            for rid, n in so.num_scheduled_tokens.items())
        step = Step(len(self.steps_seen), decode, len(so.num_scheduled_tokens), _compiles())
        self.steps_seen.append(step)
        return step

    # --- figures ---
    def steady(self, skip: int = 1) -> list[Step]:
        """Decode steps after the first `skip` of them (whose interval still holds the prefill's
        output and the first decode batch's set-up)."""
        return [s for s in self.steps_seen if s.decode][skip:]

    def figures(self, skip: int = 1, every_step: bool = False) -> dict:
        """Per steady decode step (`every_step`: per step of any kind): host syncs (all kinds but the
        asynchronous copies), by site and kind (mean calls per step, and the shapes copied to the device
        there), and what dynamo compiled."""
        steps = self.steps_seen if every_step else self.steady(skip)
        n = max(len(steps), 1)
        by_site: Counter = Counter()
        shapes: dict = {}
        for s in steps:
            by_site.update(s.events)
            for k, v in s.shapes.items():
                shapes.setdefault(k, set()).update(v)
        sites: dict = {}
        for (kind, key), count in sorted(by_site.items(), key=lambda kv: (-kv[1], kv[0])):
            site = self.sites[key]
            where = site.caller[:2] if site.caller else (site.file, site.function)
            entry = sites.setdefault(key, {"site": str(site), "function": "::".join(where), "kinds": {}, "shapes": {}})
            entry["kinds"][kind] = count / n
            if (kind, key) in shapes:
                entry["shapes"][kind] = sorted(shapes[(kind, key)])
        starts = [s.compiles for s in self.steps_seen] + [self.final_compiles]
        after = {s.index: starts[s.index + 1] for s in steps}
        return {"steps": len(steps), "batch": sorted({s.num_reqs for s in steps}),
                "syncs_per_step": sum(c for (k, _), c in by_site.items() if is_sync(k)) / n,
                "per_step": [sum(c for (k, _), c in s.events.items() if is_sync(k)) for s in steps],
                "frames_compiled_per_step": [after[s.index][0] - s.compiles[0] for s in steps],
                "graphs_made_per_step": [after[s.index][1] - s.compiles[1] for s in steps],
                "graphs_total": self.final_compiles[1], "sites": sites}


def is_sync(kind: str) -> bool:
    return kind not in (ASYNC, H2D_ASYNC) and not kind.startswith(MIXED)


def _shape(data) -> tuple:
    if isinstance(data, torch.Tensor):
        return tuple(data.shape)
    if isinstance(data, (list, tuple)):
        return (len(data),) + (_shape(data[0])[0:] if data and isinstance(data[0], (list, tuple)) else ())
    return ()


def _shares(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError, TypeError):
        return False


# The workload: 8 greedy requests submitted together, each prompt a few tokens short of a block
# boundary its decoding crosses (so steady decode meets new blocks and, with gdn-prefix-cache, block
# ends), under the recipe's buckets with one prompt per prefill batch (the pristine release asserts on
# merged GDN prefill batches with prefix caching on), async scheduling on unless asked.
NUM_REQUESTS = 8
MAX_TOKENS = 24


def workload_env() -> dict:
    import _serving

    return _serving.BUCKET_ENV | {"VLLM_PROMPT_BS_BUCKET_MAX": "1"}


def prompts() -> list[list[int]]:
    import _engine

    return [_engine.prompt(900 + i, _engine.BLOCK - 4 - 2 * i) for i in range(NUM_REQUESTS)]


# The sampling workload: the same prompts, each request with its own sampling features (none stops
# a request early, so the batch stays whole). No seeds: the pristine release makes a seeded
# request's generator on the device, which the CPU refuses (seeded-sampling's own lab shows it).
SAMPLING = [dict(), dict(logprobs=2), dict(temperature=1.0, top_p=0.9), dict(temperature=0.7, top_k=20),
            dict(repetition_penalty=1.3), dict(frequency_penalty=0.5, presence_penalty=0.5),
            dict(logit_bias={40: 3.0, 120: -100.0}), dict(temperature=0.8, min_p=0.05)]


def sampling_params(workload: str):
    from vllm import SamplingParams

    base = dict(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
    extra = SAMPLING if workload == "sampling" else [{}] * NUM_REQUESTS
    return [SamplingParams(**(base | e)) for e in extra]


def measure(prefix_caching: bool = True, async_scheduling: bool = True, compiled: bool = False,
            workload: str = "greedy", **engine_kwargs) -> dict:
    """The workload on the tree on the path: figures per steady decode step. Eager, the host syncs;
    `compiled`, what dynamo compiles (the release's torch.compile regions through the stubs'
    pass-through hpu_backend); the counter stays out of the traced code then, and counts nothing
    but the synchronize calls."""
    import _engine

    counter = HostSyncs()
    kwargs = dict(num_blocks=64, max_model_len=2048, max_num_seqs=32, max_num_batched_tokens=8 * _engine.BLOCK,
                  enable_chunked_prefill=True, env=workload_env(), prefix_caching=prefix_caching,
                  async_scheduling=async_scheduling) | engine_kwargs
    if workload == "serving":  # the pack's serving conditions (lab/_serving.py): the pristine tree dies
        import _serving

        # the serving conditions in the recipe's bf16 (the serving test runs float32 for exactness)
        kwargs = _serving.CONDITIONS | dict(dtype=_engine.DTYPE, prefix_caching=prefix_caching,
                                            async_scheduling=async_scheduling)
    with _engine.engine(_engine.tiny_qwen35(), counter=None if compiled else counter, compiled=compiled,
                        **kwargs) as engine:
        with counter.steps():
            if workload == "serving":
                outs = list(_serving.together(engine).outputs.values())
                tokens = [o["tokens"] for o in outs]
            else:
                with engine._cpu():
                    outs = engine.llm.generate([{"prompt_token_ids": p} for p in prompts()],
                                               sampling_params(workload), use_tqdm=False)
                tokens = [list(o.outputs[0].token_ids) for o in outs]
    return counter.figures() | {
        "workload": workload, "prefix_caching": prefix_caching, "async_scheduling": async_scheduling,
        "compiled": compiled, "tokens": tokens, "every_step": counter.figures(every_step=True)}


def main(argv=None) -> int:
    import argparse
    import json

    import lab_stubs  # noqa: F401  (torch.hpu)

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the figures here as JSON")
    ap.add_argument("--no-prefix-caching", action="store_true")
    ap.add_argument("--sync-scheduling", action="store_true")
    ap.add_argument("--compiled", action="store_true", help="count dynamo's compilations instead")
    ap.add_argument("--workload", choices=("greedy", "sampling", "serving"), default="greedy")
    ns = ap.parse_args(argv)
    fig = measure(prefix_caching=not ns.no_prefix_caching, async_scheduling=not ns.sync_scheduling,
                  compiled=ns.compiled, workload=ns.workload)
    text = json.dumps(fig, indent=1)
    if ns.out:
        ns.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
