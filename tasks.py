"""Gaudi cookbook tasks. `invoke --list` shows them; `invoke --help TASK` shows a task's options.

Everywhere a task takes --recipe, it takes a recipe id (qwen3.5-27b-fp8) or a path to a recipe.yaml.
"""

from __future__ import annotations

import functools
import sys

from invoke import Collection, Exit, task

from cookbook.host import signals
from cookbook.host.errors import CookbookError, os_error_code, printable

DEFAULT_RECIPE = "qwen3.5-27b-fp8"


def edge(fn):
    """Turn the cookbook's errors into a clear message and exit code, never a traceback (exit codes:
    cookbook/host/errors.py and the README). Every task is interruptible: SIGTERM, as Ctrl-C, unwinds it
    (its temporary folders and containers cleaned up, its children's process groups killed), exit 1."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            with signals.interruptible():
                return fn(*args, **kwargs)
        except CookbookError as exc:  # printable: it may quote a server's or a file's words
            print("\n".join(printable(line) for line in f"error: {exc}".splitlines()), file=sys.stderr)
            raise Exit(code=exc.exit_code) from None
        except OSError as exc:  # a path it cannot use (2), or a network that failed (3)
            where = f": {exc.filename}" if exc.filename else ""
            print(printable(f"error: {exc.strerror or exc}{where}"), file=sys.stderr)
            raise Exit(code=os_error_code(exc)) from None

    return wrapper


@task
@edge
def recipes(c):
    """List the recipes: id, model, hardware, fixes."""
    from cookbook.recipe import recipes as r

    for loaded in r.load_all():
        rec = loaded.recipe
        print(f"{loaded.id:20} {rec.model.id:28} {rec.hardware.cards}x {rec.hardware.accelerator:7} "
              f"{rec.base.vllm_gaudi.version}  opt-in: {', '.join(rec.fixes.opt_in) or '-'}")


@task(help={"recipe": "recipe id or path; all recipes when omitted"})
@edge
def validate(c, recipe=None):
    """Validate recipes: schema, `extends`, and every rule."""
    from cookbook.image import steps
    from cookbook.prove import smoke
    from cookbook.recipe import recipes as r

    loaded = [r.load(recipe)] if recipe else r.load_all()
    for item in loaded:
        smoke.check_names(item)
        print(f"ok  {item.id}  ({item.rel_path}, sha256 {item.hash[:12]})")
        for line in steps.unwritten_note(item):
            print(line)


@task(help={"recipe": "recipe id or path", "out": "context folder (default build/<id>[-standin])",
            "standin": "render FROM the offline stand-in base", "dry_run": "list the files, write nothing"})
@edge
def render(c, recipe=DEFAULT_RECIPE, out=None, standin=False, dry_run=False):
    """Render a recipe into a self-contained build context."""
    from cookbook.image import steps

    steps.render_recipe(recipe, out, standin, dry_run)


@task(iterable=["tag"],
      help={"recipe": "recipe id or path", "standin": "build on the offline stand-in base",
            "tag": "an extra tag (repeatable)", "repo": "image repository prefix",
            "allow_unwritten_fixes": "development only: build on the real base although some selected fixes are "
                                     "not written; every tag says -unwritten and the image is never published",
            "dry_run": "print the commands, run nothing"})
@edge
def build(c, recipe=DEFAULT_RECIPE, standin=False, tag=None, repo="gaudi-cookbook", allow_unwritten_fixes=False,
          dry_run=False):
    """Build a recipe's image on the Docker engine; print its id, size and what it adds over its base."""
    from cookbook.image import steps

    steps.build_recipe(recipe, standin, tag, repo, dry_run, allow_unwritten_fixes)


@task(name="standin", help={"recipe": "the recipe whose release the stand-in stands for",
                             "rebuild": "build the base image again", "dry_run": "print the commands"})
@edge
def standin_(c, recipe=DEFAULT_RECIPE, rebuild=False, dry_run=False):
    """Build the offline stand-in base image (Debian rootfs + the release's Python files)."""
    from cookbook.image import steps
    from cookbook.recipe import recipes as r

    base = steps.ensure_standin(r.load(recipe), dry_run=dry_run, rebuild=rebuild)
    print(base.image)


@task(name="fetch", help={"from_": "git URL or local mirror/clone of vllm-project/vllm-gaudi (default GitHub)",
                          "wheel": "a downloaded vllm wheel instead of PyPI", "recipe": "whose pins to fetch",
                          "dry_run": "print the commands"})
@edge
def upstream_fetch(c, recipe=DEFAULT_RECIPE, from_=None, wheel=None, dry_run=False):
    """Fill the upstream source cache: vllm-gaudi at the pinned commit, vLLM's files from PyPI."""
    from cookbook.image import steps

    steps.fetch_upstream(recipe, from_, wheel, dry_run)


ns = Collection(recipes, validate, render, build, standin_)
ns.add_collection(Collection("upstream", upstream_fetch))


@task(help={"check": "fail if fixes/pack.json differs from what the sources give (CI's drift check)"})
@edge
def fixes_index(c, check=False):
    """Write fixes/pack.json from the fix.yaml files and profiles (--check: fail on drift)."""
    from cookbook.recipe import fixes

    fixes.write_index(check=check)


@task(help={"profile": "fix profile (default: all)"})
@edge
def fixes_list(c, profile=None):
    """The pack order of a profile: each fix, opt-in or generic, written or not."""
    from cookbook.recipe import fixes

    for line in fixes.describe(profile):
        print(line)


@task(help={"profile": "fix profile to verify",
            "base": "check the pack against this base image's own files instead (read, never run)",
            "site": "with --base: the base's site-packages folder (default: found in the image)",
            "dry_run": "with --base: print what it would read"})
@edge
def fixes_verify(c, profile="v0.26.0", base=None, site=None, dry_run=False):
    """Apply the pack in order to pristine upstream sources, or to a base image's files (--base); report fix by fix.

    With --base: exit 0 when every fix matches, 4 when some target files differ but the pack still
    applies (a build on that base still refuses them), 1 when a fix does not apply.
    """
    from cookbook.fixpack import fix_base, fix_verify
    from cookbook.host.errors import UsageError

    if site and not base:
        raise UsageError("--site goes with --base IMAGE", hint="invoke fixes.verify --base IMAGE --site DIR")
    if base:
        report = fix_base.verify_base(base, profile, site, dry_run=dry_run)
        if report is None:
            return
        for line in fix_base.describe(report):
            print(line)
        if report.code:
            raise Exit(fix_base.failure(report), code=report.code)
        return
    if dry_run:
        print(f"would apply profile {profile}'s written fixes in order to pristine copies from the upstream cache")
        return
    bad = 0
    for outcome in fix_verify.verify(profile):
        print(f"{outcome.fix:36} {outcome.status}" + (f"\n    {outcome.detail}" if outcome.detail else ""))
        bad += outcome.status in ("conflicts", "target differs")
    if bad:
        raise Exit(f"{bad} fix(es) do not apply to the pristine release", code=1)


@task(iterable=["lab_fix"],
      help={"base": "the base image whose own target files the candidate is made for (read, never run)",
            "profile": "fix profile", "site": "the base's site-packages folder (default: found in the image)",
            "no_lab": "skip the fix lab on the candidate (it takes 10+ minutes)",
            "lab_fix": "run the lab for this fix only (repeatable; default: every written fix and the pack)",
            "keep": "lay the lab's trees out here and keep them", "dry_run": "print what it would do"})
@edge
def fixes_rebase(c, base, profile="v0.26.0", site=None, no_lab=False, lab_fix=None, keep=None, dry_run=False):
    """A candidate pack re-anchored on a base's own files, proved in the lab; fixes/ is never written."""
    from pathlib import Path

    from cookbook.fixpack import fix_rebase

    result = fix_rebase.rebase(base, profile, site, lab=not no_lab, lab_fixes=lab_fix or None,
                               keep=Path(keep) if keep else None, dry_run=dry_run)
    if result is None:
        return
    for line in fix_rebase.describe(result):
        print(line)
    if result.code:
        raise Exit(fix_rebase.failure(result), code=result.code)


@task(iterable=["requires"],
      help={"name": "the fix's name (it must be in the profile's order)", "edited": "edited copy of the package",
            "package": "vllm_gaudi or vllm", "profile": "fix profile", "title": "one line", "why": "the symptom",
            "how": "the mechanism", "requires": "a fix this one needs (repeatable)", "dry_run": "print, write nothing"})
@edge
def fixes_new(c, name, edited, package="vllm_gaudi", profile="v0.26.0", title="TODO", why="TODO", how="TODO",
              requires=None, dry_run=False):
    """Scaffold a fix from an edited copy of a package: the diff against pristine, hashes filled in."""
    from pathlib import Path

    from cookbook.fixpack import fix_new

    fix_new.new_fix(name, Path(edited), package, profile, title=title, why=why, how=how, requires=requires,
                    dry_run=dry_run)


@task(iterable=["fix"],
      help={"fix": "only this fix (repeatable; default: every written fix)",
            "keep": "lay the trees out here and keep them",
            "upstream": ("also run all of vllm-gaudi's own unit tests on the patched tree, but those "
                         "tests/lab/upstream-excluded.txt names"),
            "alone": "also run each fix's tests on a tree with that fix alone (and what it requires)",
            "profile": "fix profile", "dry_run": "print what would run"})
@edge
def fixes_lab(c, fix=None, keep=None, upstream=False, alone=False, profile="v0.26.0", dry_run=False):
    """Prove the fixes on CPU: each fix's lab tests fail on the pristine tree and pass on the patched one."""
    from pathlib import Path

    from cookbook.fixpack import fix_lab

    report = fix_lab.lab(fix or None, Path(keep) if keep else None, upstream, profile, dry_run=dry_run, alone=alone)
    if report is None:
        return
    for line in fix_lab.describe(report):
        print(line)
    if not report.ok:
        raise Exit("the fix lab found problems (above)", code=1)



@task(help={"keep": "lay the trees out here and keep them",
            "workload": "the counter's workload: sampling (the guard's) or greedy",
            "no_prefix_caching": "serve with prefix caching off", "sync_scheduling": "serve with async scheduling off",
            "profile": "fix profile"})
@edge
def fixes_cost(c, keep=None, workload="sampling", no_prefix_caching=False, sync_scheduling=False, profile="v0.26.0"):
    """What the pack costs on the hot path: host syncs per steady decode step, pristine against patched."""
    from pathlib import Path

    from cookbook.fixpack import fix_cost

    args = ("--workload", workload) + (("--no-prefix-caching",) if no_prefix_caching else ()) + (
        ("--sync-scheduling",) if sync_scheduling else ())
    report = fix_cost.cost(Path(keep) if keep else None, args, profile)
    for line in fix_cost.describe_cost(report):
        print(line)
    if report.problems:
        raise Exit("the pack adds host syncs to a steady decode step (above)", code=1)


@task(help={"to": "vllm-gaudi tag or commit to check the pack against", "from_": "git URL or local mirror of "
            "vllm-gaudi (default GitHub; not needed when the cache has REF)", "vllm": "vLLM version on PyPI "
            "(default: the one REF pins)", "profile": "fix profile whose pack to carry over",
            "out": "report folder (default build/drift/REF)", "dry_run": "print what it would fetch and write"})
@edge
def fixes_drift(c, to, from_=None, vllm=None, profile="v0.26.0", out=None, dry_run=False):
    """What a newer release does to the pack: applies, already upstream, conflicts, target moved or gone."""
    from pathlib import Path

    from cookbook.fixpack import fix_drift

    report = fix_drift.run(to, profile, from_, vllm, Path(out) if out else None, dry_run=dry_run)
    if report and not report.ports:
        raise Exit(f"the pack does not port to {to} as is", code=1)



@task(help={"recipe": "recipe id or path", "profile": "fix profile",
            "check": "write nothing; fail if capacity.json differs from a fresh run",
            "dry_run": "print what it would run and write"})
@edge
def fixes_capacity(c, recipe="qwen3.5-27b-fp8", profile="v0.26.0", check=False, dry_run=False):
    """The recipe's capacity at its own geometry (vLLM's scheduler, no model), stock and with the pack."""
    from cookbook.fixpack import capacity

    capacity.write(recipe, profile, check=check, dry_run=dry_run)


ns.add_collection(Collection("fixes", index=fixes_index, list=fixes_list, verify=fixes_verify, rebase=fixes_rebase,
                             new=fixes_new, lab=fixes_lab, cost=fixes_cost, drift=fixes_drift,
                             capacity=fixes_capacity))


@task(help={"recipe": "recipe id or path", "image": "image to check (default: the recipe's moving tag)",
            "standin": "the image was built on the stand-in base", "repo": "image repository prefix",
            "dry_run": "print the commands"})
@edge
def test(c, recipe=DEFAULT_RECIPE, image=None, standin=False, repo="gaudi-cookbook", dry_run=False):
    """Check an image with pytest-testinfra before any smoke run; writes the evidence file."""
    from cookbook.image import imagecheck, steps
    from cookbook.recipe import recipes

    loaded = recipes.load(recipe)
    image = image or steps.moving_tag(loaded, repo, standin)
    result = imagecheck.run(loaded, image, steps.base_for(loaded, standin), dry_run=dry_run)
    if result and not result.passed:
        raise Exit(f"image checks failed for {image}; evidence in {result.evidence}", code=1)


ns.add_task(test)


@task(iterable=["env"],
      help={"recipe": "recipe id or path", "image": "the image to run, pinned: NAME@sha256:DIGEST",
            "local": "a local tag of that image to read its labels and manifest from (default: --image)",
            "replicas": "replicas, one Gaudi host each (default 1)",
            "kserve": "a KServe ServingRuntime + InferenceService",
            "env": "a run-time env override NAME=VALUE (repeatable)",
            "hf_secret": "Secret holding HF_TOKEN (key token)",
            "cache_claim": "PersistentVolumeClaim for the Hugging Face cache", "out": "folder (default build/k8s/ID)",
            "standin": "render from a stand-in image anyway (it serves no model)", "dry_run": "print, write nothing"})
@edge
def k8s(c, recipe=DEFAULT_RECIPE, image=None, local=None, replicas=None, kserve=False, env=None, hf_secret="hf-token",
        cache_claim="hf-model-cache", out=None, standin=False, dry_run=False):
    """Render validated Kubernetes manifests (Deployment or KServe, Service, PDB) from a recipe and its image."""
    from pathlib import Path

    from cookbook.recipe import recipes
    from cookbook.release import k8s as k

    opts = k.Options(image, k.parse_replicas(replicas), kserve, k.parse_env(env), hf_secret, cache_claim)
    k.run(recipes.load(recipe), opts, local, Path(out) if out else None, allow_standin=standin, dry_run=dry_run)


ns.add_task(k8s)


@task(help={"recipe": "recipe id or path", "image": "the image to serve (default: the recipe's exact tag)",
            "repo": "image repository prefix", "record": "save what the host said into DIR/readings.json",
            "readings": "judge a saved readings.json instead of this host", "dry_run": "print what it would read"})
@edge
def doctor(c, recipe=DEFAULT_RECIPE, image=None, repo="gaudi-cookbook", record=None, readings=None, dry_run=False):
    """Can this host serve the recipe? Habana runtime, driver, firmware, cards, memory, cache, port, image."""
    from pathlib import Path

    from cookbook.image import steps
    from cookbook.prove import doctor as d
    from cookbook.recipe import recipes

    loaded = recipes.load(recipe)
    image = image or steps.moving_tag(loaded, repo, False)
    checks = d.run(loaded, image, Path(readings) if readings else None, Path(record) if record else None, dry_run)
    failed = [ch.name for ch in checks or [] if ch.status == d.FAIL]
    if failed:
        raise Exit(f"this host cannot serve {loaded.id} yet: {', '.join(failed)}", code=1)


ns.add_task(doctor)


@task(help={"recipe": "recipe id or path", "registry": "HOST[:PORT][/NAMESPACE] to push to (required)",
            "image": "local image to publish, by name or id (default: the recipe's moving tag)",
            "standin": "look for the stand-in build (it is refused: stand-ins are never published)",
            "repo": "local image repository prefix", "sbom": "attach the SBOM and provenance (default on)",
            "digest_file": "also write the pushed digest here (for signing in CI)",
            "no_moving_tags": "push the content tag only; leave the version tag and latest where they are "
                              "(a later publish of the same image moves them, e.g. once it is signed)",
            "dry_run": "print the commands, push nothing"})
@edge
def publish(c, registry=None, recipe=DEFAULT_RECIPE, image=None, standin=False, repo="gaudi-cookbook", sbom=True,
            digest_file=None, no_moving_tags=False, dry_run=False):
    """Check an image again; push it with its SBOM and provenance; move the moving tags last.

    Credentials: COOKBOOK_REGISTRY_USER and COOKBOOK_REGISTRY_PASSWORD, else the Docker config; never printed.
    """
    from cookbook.host.errors import UsageError
    from cookbook.release import publish as p

    if not registry:
        raise UsageError("invoke publish needs --registry HOST[:PORT][/NAMESPACE]",
                         hint="e.g. invoke publish --recipe qwen3.5-27b-fp8 --registry ghcr.io/my-org")
    p.publish(recipe, registry, image=image, standin=standin, repo=repo, dry_run=dry_run, sbom=sbom,
              moving_tags=not no_moving_tags, digest_file=digest_file)


ns.add_task(publish)


@task(help={"check": "write nothing; fail if a generated page differs from its sources (CI's drift check)",
            "site": "also build the static site (mkdocs) into this folder", "dry_run": "print, write nothing"})
@edge
def docs(c, check=False, site=None, dry_run=False):
    """Generate the recipe pages and the indexes of recipes and fixes under docs/ (--site DIR: mkdocs too)."""
    from pathlib import Path

    from cookbook.prove import docs as d

    d.write(check=check, dry_run=dry_run)
    if site:
        d.build_site(Path(site), dry_run=dry_run)


ns.add_task(docs)


SERVE_HELP = {"recipe": "recipe id or path", "image": "image to run (default: the recipe's moving tag)",
              "port": "host port (default: the recipe's image.port)", "runtime": "Docker runtime (default habana; "
              "'' for Docker's default; device variables only with habana)", "name": "container name",
              "hf_cache": "host Hugging Face cache mounted at /root/.cache/huggingface ('' for none)",
              "env": "NAME=VALUE for the container, or NAME to pass yours through (repeatable; a secret such as "
                     "HF_TOKEN only by name)",
              "option": "an extra `docker run` option, one of --shm-size=, --ulimit=, --network=, "
                        "--volume=DIR:/models/...:ro (repeatable)",
              "timeout": "seconds to wait for health", "log_dir": "where the container's log is kept",
              "no_fetch": "do not fetch the model into the host's cache first (hosts that manage weights themselves)",
              "dry_run": "print the docker run, start nothing"}


@task(iterable=["env", "option"], help=SERVE_HELP)
@edge
def serve(c, recipe=DEFAULT_RECIPE, image=None, port=None, runtime="habana", name=None,
          hf_cache="~/.cache/huggingface", env=None, option=None, timeout="1800", log_dir="build/serve",
          no_fetch=False, dry_run=False):
    """Start a recipe's image as the README's Serving section does, its model fetched and verified first.

    The model goes into the host's cache first (`--no-fetch` leaves that out); then it waits for health
    and says where the log is.

    Words after `--` go after the image, appended to the recipe's vLLM flags (`-- --max-num-seqs 16`).
    """
    from pathlib import Path

    from cookbook.prove import serve as s
    from cookbook.recipe import recipes as r

    loaded = r.load(recipe)
    spec = s.spec_for(loaded, image=image, port=s.number(port, "--port") if port else None, runtime=runtime, name=name,
                      hf_cache=hf_cache, env=s.parse_env(env), options=tuple(option or ()),
                      args=s.user_args(c.remainder, sys.argv))
    s.serve(loaded, spec, Path(log_dir), s.number(timeout, "--timeout", float), dry_run, fetch=not no_fetch)


ns.add_task(serve)


# smoke and bench --image: serve's options but its log folder and the weights step
RUN_HELP = {k: v for k, v in SERVE_HELP.items() if k not in ("log_dir", "no_fetch")}


def _run_spec(c, loaded, image, port, runtime, name, hf_cache, env, option, role):
    """The --image container of smoke and bench: the same `docker run` as `invoke serve`."""
    import os

    from cookbook.prove import serve as s

    if not image:
        return None
    return s.spec_for(loaded, image=image, port=s.number(port, "--port") if port else None, runtime=runtime,
                      name=name or f"cookbook-{role}-{os.getpid()}", hf_cache=hf_cache, env=s.parse_env(env),
                      options=tuple(option or ()), args=s.user_args(c.remainder, sys.argv), role=role)


@task(iterable=["only", "env", "option"],
      help={**RUN_HELP, "url": "a running server's base URL (http://host:8000)",
            "image": "start this image for the run (as `invoke serve` does), removed afterwards",
            "scale": "multiply the recipe's token sizes (small servers: 0.01)", "repeats": "runs of each scenario",
            "only": "run only this scenario (repeatable)", "out": "folder for bench.json, bench.md, bench.png",
            "dry_run": "print the sized scenarios (and the docker run), run nothing"})
@edge
def bench(c, recipe=DEFAULT_RECIPE, url=None, image=None, scale="1", repeats="3", only=None, out=None, port=None,
          runtime="habana", name=None, hf_cache="~/.cache/huggingface", env=None, option=None, timeout="1800",
          dry_run=False):
    """Run the recipe's performance scenarios: tokens/s, TTFT, end to end; JSON, Markdown rows, PNG."""
    from pathlib import Path

    from cookbook.prove import bench as b
    from cookbook.prove import serve as s
    from cookbook.recipe import recipes as r

    loaded = r.load(recipe)
    spec = _run_spec(c, loaded, image, port, runtime, name, hf_cache, env, option, "bench")
    b.bench(loaded, url, spec, Path(out or f"build/bench/{loaded.id}"), scale=s.number(scale, "--scale", float),
            repeats=s.number(repeats, "--repeats"), only=only, timeout_s=s.number(timeout, "--timeout", float),
            dry=dry_run)


ns.add_task(bench)


@task(iterable=["only", "env", "option"],
      help={**RUN_HELP,
            "recipe": "recipe id or path", "url": "the running server, http://HOST:PORT",
            "image": "start this image for the run (as `invoke serve` does), removed afterwards",
            "scale": "shrink every long prompt by this factor too (the server's context already scales them)",
            "out": "folder for smoke.json and smoke.md (default build/smoke/ID)",
            "only": "run only this check: a row name or a check kind (repeatable)",
            "dry_run": "list the checks, send nothing"})
@edge
def smoke(c, recipe=DEFAULT_RECIPE, url=None, image=None, scale=None, out=None, only=None, port=None,
          runtime="habana", name=None, hf_cache="~/.cache/huggingface", env=None, option=None, timeout="1800",
          dry_run=False):
    """Run the recipe's Verified checks against a running server; JSON and Markdown results, exit 1 on a failure."""
    from pathlib import Path

    from cookbook.host.paths import ROOT
    from cookbook.prove import serve
    from cookbook.prove import smoke as s
    from cookbook.recipe import recipes as r

    loaded = r.load(recipe)
    spec = _run_spec(c, loaded, image, port, runtime, name, hf_cache, env, option, "smoke")
    out_dir = Path(out) if out else ROOT / "build" / "smoke" / loaded.id
    result = serve.run_against(url, spec, out_dir / "server.log", serve.number(timeout, "--timeout", float), dry_run,
                               lambda t: s.task(recipe, t.url, scale, out_dir, only or (), dry_run,
                                                image=t.image, image_id=t.image_id, log_path=t.log_path,
                                                args=spec.args if spec else ()))
    if result is not None and not result.passed:
        raise Exit(f"smoke checks failed: {', '.join(r['name'] for r in result.rows if r['status'] == 'failed')}",
                   code=1)


ns.add_task(smoke)


@task(iterable=["env", "option", "skip", "smoke_only", "bench_only"],
      help={"port": "host port (default: the recipe's image.port)", "name": "container name "
            "(default cookbook-verify-ID)", "smoke_only": "run only this smoke check (repeatable; default all)",
            "bench_only": "run only this bench scenario (repeatable; default all)",
            "skip": "leave out a check: doctor, base, test, or weights on a host that manages its own "
            "(repeatable; the summary says so)",
            "recipe": "recipe id or path", "runtime": "Docker runtime (default habana; '' for Docker's default: "
            "a CPU run, which skips the doctor)", "repo": "image repository prefix",
            "hf_cache": SERVE_HELP["hf_cache"], "env": SERVE_HELP["env"], "option": SERVE_HELP["option"],
            "timeout": "seconds to wait for health", "scale": "bench: multiply the recipe's token sizes",
            "repeats": "bench: runs of each scenario", "out": "folder for every step's output "
            "(default build/verify/ID)", "results": "where the result files go (default results/; docs/ is "
            "written only then)", "dry_run": "print the steps, run nothing"})
@edge
def chain(c, recipe=DEFAULT_RECIPE, runtime="habana", repo="gaudi-cookbook", hf_cache="~/.cache/huggingface",
          env=None, option=None, timeout="1800", scale="1", repeats="3", out=None, results=None, skip=None,
          port=None, name=None, smoke_only=None, bench_only=None, dry_run=False):
    """One command on a Gaudi host, doctor to the recipe page's measured figures; resumable, one summary.

    Steps: doctor, fixes.verify --base, build, test, weights, serve, smoke, bench, results/ID/, docs, stop the server.

    Resumable: a step that passed for the same image id and the same request (runtime, flags, selection,
    scale, repeats), whose evidence files still say so, is not run again (build/verify/ID/state.json).
    Words after `--` go after the image, appended to the recipe's vLLM flags, as with `invoke serve`.
    """
    from pathlib import Path

    from cookbook import chain as ch
    from cookbook.prove import serve as s
    from cookbook.recipe import recipes

    loaded = recipes.load(recipe)
    opts = ch.Options(runtime=runtime or None, repo=repo, hf_cache=hf_cache, env=s.parse_env(env),
                      options=tuple(option or ()), timeout_s=s.number(timeout, "--timeout", float),
                      scale=s.number(scale, "--scale", float), repeats=s.number(repeats, "--repeats"),
                      out=Path(out) if out else None, results_root=Path(results) if results else None,
                      args=s.user_args(c.remainder, sys.argv), skip=ch.check_skip(skip),
                      port=s.number(port, "--port") if port else None, name=name,
                      smoke_only=tuple(smoke_only or ()), bench_only=tuple(bench_only or ()))
    if dry_run:
        ch.dry_run(loaded, opts)
        return
    done = ch.run(loaded, opts)
    print("\n".join(ch.report(done)))
    if not ch.ok(done.outcomes):
        raise Exit(f"the chain stopped; every step's output is in {done.out}", code=1)


ns.add_task(chain)
