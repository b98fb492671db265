"""`invoke chain`: one command on a Gaudi host, from a bare host to the recipe page's measured figures.

doctor -> fixes.verify --base -> build -> test -> weights -> serve -> smoke -> bench -> result files -> docs -> stop.
Each step calls the function its own task calls; this module only orders them, keeps their output
under build/verify/<id>/, remembers what passed for which image (state.json), and sums up.

Resumable: the build always runs (Docker's cache makes a second build quick, and it names the image);
a step that passed before is not run again only when it passed for the same image id and for the same
request (`asked`: the runtime, the vLLM flags and docker options, the environment, the checks and
scenarios selected, the scale and repeats), and its evidence, read again now, still says so (`Chain.evidence`:
the image-check file, smoke.json, bench.json, the copies under results/, the page). Steps before the
build are cheap and always run. The weights step keeps its own record (weights.json): a cache that still
holds the verified files is not fetched again, without the network.

The folder (--out) is the chain's own: a new or empty folder, or one carrying MARKER; it is refused
when it holds a symlink, so no step writes through one to a file outside.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .host import outdir, signals
from .host.errors import ChainStopped, CookbookError, UsageError
from .host.names import HF_CACHE_HOST, IMAGE_REPO
from .host.paths import ROOT, fixes_dir
from .host.progress import say
from .recipe.recipes import LoadedRecipe

STEPS = ("doctor", "base", "build", "test", "weights", "serve", "smoke", "bench", "results", "docs", "stop")
# Steps whose work belongs to one image: skipped when they passed for that image id before.
PER_IMAGE = ("test", "smoke", "bench", "results", "docs")
WHAT = {
    "doctor": "invoke doctor: can this host serve the recipe (its image check waits for build and test)",
    "base": "invoke fixes.verify --base BASE: the pack against the base's own files (skipped when the base is "
            "not on this engine)",
    "build": "invoke build: the recipe's image (Docker's cache makes a rebuild quick)",
    "test": "invoke test: the image checks",
    "weights": "the recipe's model into the host's Hugging Face cache, verified against the Hub's hashes "
               "(skipped for a model the run mounts, or when the cache still holds what was verified)",
    "serve": "invoke serve: the image, healthy (kept up for smoke and bench only)",
    "smoke": "invoke smoke: the recipe's Verified checks",
    "bench": "invoke bench: the recipe's performance scenarios",
    "results": "copy smoke.json and bench.json to results/ID/ (the files the pages read)",
    "docs": "invoke docs: the recipe page with the measured figures (docs/ only when results/ was written; "
            "the page always in the chain's folder too)",
    "stop": "remove the container serve started (on a failure, Ctrl-C and SIGTERM too)",
}
# Checks a run may leave out (--skip), said in the summary: e.g. the image suite on a CPU image, which
# holds no vllm_gaudi to check; and the weights step on a host that manages its weights itself. The
# steps that make the figures are never skipped.
SKIPPABLE = ("doctor", "base", "test", "weights")
PASSED, FAILED, SKIPPED, DONE, NOT_RUN = "passed", "failed", "skipped", "done before", "not run"
MARKER = ".cookbook-verify"
MARKER_TEXT = ("Written by the Gaudi cookbook (`invoke chain`): its steps' output and state; it may rewrite any "
               "file here.\n")


@dataclass
class Outcome:
    step: str
    status: str
    detail: str = ""


@dataclass(frozen=True)
class Options:
    runtime: str | None = "habana"  # None: Docker's default runtime (the CPU proof)
    repo: str = IMAGE_REPO
    hf_cache: str | None = HF_CACHE_HOST
    env: dict = field(default_factory=dict)
    option: tuple[str, ...] = ()  # extra `docker run` options
    timeout: float = 1800.0
    scale: float = 1.0
    repeats: int = 3
    out: Path | None = None  # default build/verify/<id>
    results: Path | None = None  # default results/
    args: tuple[str, ...] = ()  # after the image: appended to the recipe's vLLM flags
    skip: tuple[str, ...] = ()  # of SKIPPABLE
    port: int | None = None  # host port (default the recipe's image.port)
    name: str | None = None  # container name (default cookbook-verify-<id>)
    smoke_only: tuple[str, ...] = ()  # only these smoke checks (default all)
    bench_only: tuple[str, ...] = ()  # only these bench scenarios (default all)


# --- the state: which step passed for which image ------------------------------------------------

def load_state(path: Path) -> dict:
    """The saved state, or none: a state that does not read is redone, never trusted."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and all(isinstance(v, dict) for v in data.values()) else {}


def save_state(path: Path, state: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def asked(opts: Options, step: str) -> dict:
    """What a per-image step's result means besides the image id: a step done for another request is
    redone. The environment is kept as a hash (its values are the user's, not for a state file)."""
    from .recipe import fixes

    env = fixes.fixplan.sha256_bytes(json.dumps(sorted(opts.env.items())).encode())[:16] if opts.env else None
    server = {"runtime": opts.runtime, "args": list(opts.args), "options": list(opts.option), "env": env}
    smoke = {**server, "smoke_only": sorted(opts.smoke_only)}
    bench = {**server, "bench_only": sorted(opts.bench_only), "scale": opts.scale, "repeats": opts.repeats}
    pages = {**smoke, **bench, "results": str(opts.results.absolute()) if opts.results else "results/"}
    return {"smoke": smoke, "bench": bench, "results": pages, "docs": pages}.get(step, {})


def done_before(state: dict, step: str, image_id: str | None, now: dict | None = None) -> bool:
    """A per-image step that passed for exactly this image id and this request (`asked`)."""
    entry = state.get(step) or {}
    return (step in PER_IMAGE and bool(image_id) and entry.get("image_id") == image_id
            and entry.get("status") == PASSED and entry.get("asked", {}) == (now or {}))


def recorded(state: dict, step: str, image_id: str | None, status: str, now: dict | None = None) -> dict:
    """The state after `step` ended with `status` on `image_id` for the request `now` (a new dict)."""
    return {**state, step: {"image_id": image_id, "status": status, "asked": now or {}}}


def expected_hardware(runtime: str | None) -> str:
    """What the server must have reported for a run under this runtime to stand for it."""
    return "cpu" if not runtime else "gaudi"


def run_matches(run, kind: str, recipe_id: str, image_id: str, opts: Options) -> str | None:
    """Why a smoke or bench file in the chain's folder is not the run asked for now (None: it is)."""
    if run.recipe != recipe_id:
        return f"{kind}.json is of recipe {run.recipe}"
    only = sorted(opts.smoke_only if kind == "smoke" else opts.bench_only) or None
    want = {"image": image_id, "hardware": expected_hardware(opts.runtime), "vLLM flags": tuple(opts.args),
            "selection": tuple(only) if only else None,
            "scale": opts.scale if kind == "bench" else 1.0, "repeats": opts.repeats if kind == "bench" else None}
    have = {"image": run.image_id, "hardware": run.hardware, "vLLM flags": run.args,
            "selection": run.only, "scale": run.scale, "repeats": run.repeats}
    differ = [k for k in want if want[k] != have[k]]
    if differ:
        return f"{kind}.json is of another run ({', '.join(differ)})"
    if kind == "smoke" and any(e.get("status") == "failed" for e in run.entries.values()):
        return "smoke.json says a check failed"
    return None


# --- the summary ---------------------------------------------------------------------------------

def summary(outcomes: list[Outcome], checks: list, scenarios: list) -> list[str]:
    """One table of steps (every step named, those never reached 'not run'), then the page's rows:
    published figure against measured (measured.Row)."""
    seen = {o.step: o for o in outcomes}
    lines = ["step      result       detail"]
    for step in STEPS:
        o = seen.get(step, Outcome(step, NOT_RUN))
        lines.append(f"{step:9} {o.status:12} {o.detail}".rstrip())
    for title, rows in (("Verified", checks), ("Performance", scenarios)):
        if rows:
            lines.append(f"{title}: published | measured")
            lines += [f"  {r.title}: {r.published} | {r.measured}" for r in rows]
    failed = [o.step for o in outcomes if o.status == FAILED]
    lines.append(f"FAILED at {failed[0]}" if failed else "all steps passed")
    return lines


def ok(outcomes: list[Outcome]) -> bool:
    return not any(o.status == FAILED for o in outcomes)


# --- running it -----------------------------------------------------------------------------------

class _Tee:
    """A step's stdout on the terminal and in its log file."""

    def __init__(self, *streams):
        self.streams = streams

    def write(self, text):
        for s in self.streams:
            s.write(text)
        return len(text)

    def flush(self):
        for s in self.streams:
            s.flush()


@contextlib.contextmanager
def _logged(out: Path, step: str) -> Iterator[None]:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{step}.log", "w") as log, contextlib.redirect_stdout(_Tee(sys.stdout, log)):
        yield


# The doctor's checks the chain does not wait on: it builds and checks the image next.
BUILT_NEXT = ("image",)


def check_skip(skip: list[str] | None) -> tuple[str, ...]:
    bad = sorted(set(skip or ()) - set(SKIPPABLE))
    if bad:
        raise UsageError(f"--skip {', '.join(bad)}: only {', '.join(SKIPPABLE)} may be skipped",
                         hint="the other steps make the figures the page shows")
    return tuple(skip or ())


def default_out(loaded: LoadedRecipe) -> Path:
    return ROOT / "build" / "verify" / loaded.id


def check_out(out: Path, loaded: LoadedRecipe) -> None:
    """The chain writes only into a folder of its own (outdir's marker rule: new, empty, or MARKER; the
    default build/verify/ID of earlier runs too), and never through a symlink inside it."""
    outdir.check(out, MARKER, "--out", ours=lambda p: p.absolute() == default_out(loaded).absolute(),
                 verb="write")
    links = outdir.links(out)
    if links:
        raise UsageError(f"{links[0]} is a symlink; the chain never writes through one",
                         hint=f"remove it, or give another --out than {out}")


def plan(loaded: LoadedRecipe, opts: Options) -> None:
    """The steps, with the base the pack is checked against, the container smoke and bench run against,
    and what an earlier run left (state.json)."""
    from .image import render, steps
    from .prove import serve, weights

    c = Chain(loaded, opts)  # the folder is checked, in a dry run too
    spec = dataclasses.replace(c.spec(), image=steps.moving_tag(loaded, opts.repo, False))
    print(f"would run for {loaded.id}, writing under {c.out}:")
    for i, step in enumerate(STEPS, 1):
        print(f"{i:2}. {step:8} {WHAT[step]}")
    print(f"base     {render.vault_base(loaded).from_ref}")
    fetch = "skipped: --skip" if "weights" in opts.skip else weights.plan(loaded, spec.hf_cache, c.weights_record)
    print(f"weights  {fetch}")
    print(f"serve    {serve.shown(serve.run_argv(spec))}")
    for step in opts.skip:
        print(f"skip     {step}")
    for step, entry in sorted(c.state.items()):
        print(f"earlier  {step}: {entry.get('status')} for {entry.get('image_id') or 'no image yet'}")


class Chain:
    """The steps in order; `step` runs one, records it, and stops the chain at the first failure."""

    def __init__(self, loaded: LoadedRecipe, opts: Options):
        self.loaded, self.opts = loaded, opts
        self.out = (opts.out or default_out(loaded)).absolute()
        check_out(self.out, loaded)
        self.state_path = self.out / "state.json"
        self.weights_record = self.out / "weights.json"
        self.state = load_state(self.state_path)
        self.outcomes: list[Outcome] = []
        self.image_id: str | None = None
        self.check_serving()

    def check_serving(self) -> None:
        """What serve, smoke and bench would refuse (an --hf-cache of /, an --option, an --env, a --name, a
        check or scenario the recipe has not), refused before any step: the weights step writes into the
        Hub cache, and the build takes many minutes, long before they run."""
        from .image import steps
        from .prove import bench, serve, smoke

        image = steps.moving_tag(self.loaded, self.opts.repo, False)  # the image is built later
        serve.check_spec(dataclasses.replace(self.spec(), image=image))
        if self.opts.smoke_only:  # a recipe with no checks or scenarios fails at its step, as alone
            smoke.chosen(self.loaded, self.opts.smoke_only)
        if self.opts.bench_only or self.opts.repeats < 1:
            bench.check_request(self.loaded, self.opts.repeats, self.opts.bench_only)

    def claim(self) -> None:
        """Mark the folder as the chain's before its first write (checked in __init__)."""
        if not (self.out / MARKER).is_file():
            self.out.mkdir(parents=True, exist_ok=True)
            outdir.mark(self.out, MARKER, MARKER_TEXT)

    def done(self, name: str) -> bool:
        """Passed for this image and this request, and its evidence still says so."""
        if not done_before(self.state, name, self.image_id, asked(self.opts, name)):
            return False
        said = self.evidence(name)
        if said:
            say(f"{name}: done before, but {said}: again")
        return said is None

    def evidence(self, name: str) -> str | None:
        """Why the files a per-image step left no longer show it passed for this request (None: they
        do): read again at every run, never taken from state.json alone."""
        from .image import imagecheck
        from .prove import results

        try:
            if name == "test":
                imagecheck.require_passed(self.image_id)
            elif name in ("smoke", "bench"):
                return run_matches(results.read(self.out / name / f"{name}.json", name), name, self.loaded.id,
                                   self.image_id, self.opts)
            elif name == "results":
                for kind in ("smoke", "bench"):
                    made, copy = self.out / kind / f"{kind}.json", results.path_for(self.loaded.id, kind, self.root)
                    if not copy.is_file() or made.read_bytes() != copy.read_bytes():
                        return f"{copy} is not this run's {kind}.json"
            elif name == "docs" and not (self.out / f"{self.loaded.id}.md").is_file():
                return "the page is gone"
        except (CookbookError, OSError) as exc:
            return str(exc).splitlines()[0]
        return None

    @property
    def root(self) -> Path:
        from .prove import results

        return self.opts.results or results.RESULTS

    def step(self, name: str, work: Callable[[], str | None]) -> bool:
        self.claim()
        if self.done(name):
            self.outcomes.append(Outcome(name, DONE, f"for {self.image_id[:19]}"))
            say(f"{name}: done before for this image and this request")
            return True
        if name in self.opts.skip:
            self.outcomes.append(Outcome(name, SKIPPED, "skipped: --skip"))
            say(f"{name}: skipped (--skip)")
            return True
        say(f"step {STEPS.index(name) + 1}/{len(STEPS)}: {name}")
        try:
            with _logged(self.out, name):
                detail = work()
        except CookbookError as exc:
            self.outcomes.append(Outcome(name, FAILED, str(exc).splitlines()[0]))
            self._save(name, FAILED)
            return False
        except OSError as exc:  # a file of the step's gone or unwritable: said, and the summary still written
            self.outcomes.append(Outcome(name, FAILED, f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": ")))
            self._save(name, FAILED)
            return False
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM (run is signals.interruptible)
            self.outcomes.append(Outcome(name, FAILED, "interrupted"))
            self._save(name, FAILED)
            raise
        status = SKIPPED if detail and detail.startswith("skipped") else PASSED
        self.outcomes.append(Outcome(name, status, detail or ""))
        self._save(name, status)
        return True

    def _save(self, name: str, status: str) -> None:
        self.state = recorded(self.state, name, self.image_id, status, asked(self.opts, name))
        save_state(self.state_path, self.state)

    # the steps, each the function its task calls
    def doctor(self) -> str:
        from .image import steps
        from .prove import doctor

        if not self.opts.runtime:
            return "skipped: Docker's default runtime (a CPU run) has no Gaudi to check"
        image = steps.moving_tag(self.loaded, self.opts.repo, False)
        checks = doctor.run(self.loaded, image, record=self.out / "doctor")  # no Gaudi at all: HostError
        doctor.require_ready(self.loaded, checks, but=BUILT_NEXT)
        return "host ready (image: built and checked next)"

    def base(self) -> str:
        from .fixpack import fix_base
        from .host import engine
        from .image import render
        from .recipe import fixes

        ref = render.vault_base(self.loaded).from_ref
        profile = self.loaded.recipe.fixes.profile
        if not fixes.load_profile(profile, fixes_dir()).order:
            return f"skipped: profile {profile} selects no fixes"
        if not engine.image_exists(ref):
            return f"skipped: {ref} is not on this engine (the build pulls it; run fixes.verify --base then)"
        report = fix_base.verify_base(ref, self.loaded.recipe.fixes.profile, out=self.out / "base")
        for line in fix_base.describe(report):
            print(line)
        report.require()
        return f"the pack applies as recorded to {ref}"

    def build(self) -> str:
        from .image import steps

        built = steps.build_recipe(str(self.loaded.path), False, None, self.opts.repo, False)
        self.image_id = built.image_id
        return built.image_id[:19]

    def test(self) -> str:
        from .image import imagecheck, steps

        result = imagecheck.run(self.loaded, self.image_id, steps.base_for(self.loaded, False))
        imagecheck.verdict(result, self.image_id)
        return f"evidence {result.evidence}"

    def weights(self) -> str:
        from .prove import weights

        return weights.step(self.loaded, self.opts.hf_cache, self.weights_record).detail

    def spec(self):
        from .prove import serve

        o = self.opts
        return serve.spec_for(self.loaded, image=self.image_id, runtime=o.runtime, hf_cache=o.hf_cache, env=o.env,
                              options=o.option, args=o.args, port=o.port,
                              name=o.name or f"cookbook-verify-{self.loaded.id}", role="smoke")

    def smoke(self, running) -> str:
        from .prove import smoke

        result = smoke.task(str(self.loaded.path), running.url, None, self.out / "smoke", self.opts.smoke_only, False,
                            image=self.image_id, image_id=running.image_id, log_path=running.log_path,
                            args=self.opts.args)  # SmokeFailure when a check failed
        return f"{len(result.rows)} checks"

    def bench(self, running) -> str:
        from .prove import bench, results

        facts = results.image_target(self.image_id, running.image_id, results.log_hardware(running.log_path),
                                     results.image_labels(running.image_id), self.opts.args)
        doc = bench.run(self.loaded, running.url, scale=self.opts.scale, repeats=self.opts.repeats,
                        only=list(self.opts.bench_only) or None, image=self.image_id, image_id=running.image_id,
                        facts=facts)
        bench.write(doc, self.out / "bench")
        print(bench.markdown(doc), end="")
        return f"{len(doc['scenarios'])} scenarios"

    def results(self) -> str:
        from .prove import docs, results

        root = self.root
        runs = {kind: results.read(self.out / kind / f"{kind}.json", kind) for kind in ("smoke", "bench")}
        if root.resolve() == results.RESULTS.resolve():  # what the pages read: never CPU runs of a Gaudi recipe
            for kind, run in runs.items():
                docs.refuse_misplaced(self.loaded, run, results.path_for(self.loaded.id, kind, root))
        for kind in ("smoke", "bench"):
            dest = results.path_for(self.loaded.id, kind, root)
            if dest.parent.is_symlink():  # results/ID pointing elsewhere: the copy would land there
                raise UsageError(f"{dest.parent} is a symlink; the chain never writes through one",
                                 hint="remove the link; the chain makes the folder")
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.tmp")  # then renamed: a symlink at dest is replaced, not followed
            tmp.unlink(missing_ok=True)
            tmp.write_bytes((self.out / kind / f"{kind}.json").read_bytes())
            os.replace(tmp, dest)
            results.load(self.loaded.id, kind, root)  # the page reads it back: refuse a file it cannot
        return f"{root / self.loaded.id}"

    def docs(self) -> str:
        """The repository's pages (`invoke docs`) when the results went into its results/ folder; and
        always this recipe's page, as it reads the results now, under the chain's folder."""
        from .prove import docs, results
        from .recipe import fixes, recipes

        root = self.root
        said = ""
        if root.resolve() == results.RESULTS.resolve() and self.loaded.id in recipes.known_ids():
            said = f"docs/: {len(docs.write())} files written; "
        smoke, bench = results.load(self.loaded.id, "smoke", root), results.load(self.loaded.id, "bench", root)
        page = self.out / f"{self.loaded.id}.md"
        page.write_text(docs.recipe_page(self.loaded, [self.loaded], set(fixes.fix_names()), smoke, bench))
        return said + f"page {page}"

    def figures(self) -> tuple[list, list]:
        from .prove import docs, results

        root = self.root
        return docs.measured_rows(self.loaded, results.load(self.loaded.id, "smoke", root),
                                  results.load(self.loaded.id, "bench", root))


@signals.interruptible()  # SIGTERM as Ctrl-C in every step: each cleans up, the chain returns, the summary is written
def run(loaded: LoadedRecipe, opts: Options) -> Chain:
    """The whole chain; the container serve starts is removed when smoke and bench end, whatever happens
    (serve.container: failure, Ctrl-C, SIGTERM)."""
    from .prove import serve

    c = Chain(loaded, opts)
    try:
        go = c.step("doctor", c.doctor) and c.step("base", c.base) and c.step("build", c.build) and \
            c.step("test", c.test)
    except KeyboardInterrupt:
        return c
    serving = go and not (c.done("smoke") and c.done("bench"))
    if serving:
        try:
            go = c.step("weights", c.weights)  # before the container: a download never eats its health wait
        except KeyboardInterrupt:
            return c
    if serving and go:
        say(f"step {STEPS.index('serve') + 1}/{len(STEPS)}: serve")
        try:
            with serve.container(c.spec(), c.out / "server.log", opts.timeout) as r:
                c.outcomes.append(Outcome("serve", PASSED, f"{r.url}, log {c.out / 'server.log'}"))
                go = c.step("smoke", lambda: c.smoke(r)) and c.step("bench", lambda: c.bench(r))
        except CookbookError as exc:
            c.outcomes.append(Outcome("serve", FAILED, str(exc).splitlines()[0]))
            go = False
        except KeyboardInterrupt:  # the container is removed by now (serve.container)
            if not any(o.step == "serve" for o in c.outcomes):
                c.outcomes.append(Outcome("serve", FAILED, "interrupted"))
            go = False
        started = any(o.step == "serve" and o.status == PASSED for o in c.outcomes)
        c.outcomes.append(Outcome("stop", PASSED, "container removed" if started else "no container left"))
    elif go:
        for step in ("weights", "serve"):
            c.outcomes.append(Outcome(step, SKIPPED, "smoke and bench passed for this image before"))
        c.outcomes += [Outcome(s, DONE, f"for {c.image_id[:19]}") for s in ("smoke", "bench")]
        c.outcomes.append(Outcome("stop", SKIPPED, "nothing was started"))
    if go:
        try:
            c.step("results", c.results) and c.step("docs", c.docs)
        except KeyboardInterrupt:
            pass
    return c


def task(recipe: str, dry_run: bool = False, **given) -> None:
    """`invoke chain`: `given` holds the task's options, read (cookbook/host/cli.given), under Options' names;
    the summary, then the verdict (ChainStopped, exit 1) when a step failed."""
    from .recipe import recipes

    loaded = recipes.load(recipe)
    opts = Options(**{**given, "skip": check_skip(given.get("skip"))})
    if dry_run:
        plan(loaded, opts)
        return
    done = run(loaded, opts)
    print("\n".join(report(done)))
    if not ok(done.outcomes):
        raise ChainStopped(f"the chain stopped; every step's output is in {done.out}")


def report(c: Chain) -> list[str]:
    """The summary, also written to build/verify/<id>/summary.txt."""
    try:
        checks, scenarios = c.figures()
    except CookbookError as exc:
        checks, scenarios = [], []
        say(f"figures: {exc}")
    lines = summary(c.outcomes, checks, scenarios)
    c.claim()
    path = c.out / "summary.txt"
    path.unlink(missing_ok=True)  # a file of ours, or a link put in its place: never written through
    path.write_text("\n".join(lines) + "\n")
    return lines
