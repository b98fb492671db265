"""Gaudi cookbook tasks. `invoke --list` shows them; `invoke --help TASK` shows a task's options.

Everywhere a task takes --recipe, it takes a recipe id (qwen3.5-27b-fp8) or a path to a recipe.yaml.

Each task is a docstring and one call into cookbook/. `task` (cookbook/host/cli.py) gives every task the
shared options' help and short flags, and its edge: an error becomes `error:` and `fix:` lines and the
README's exit code, never a traceback.
"""

from __future__ import annotations

from invoke import Collection

from cookbook.host import cli
from cookbook.host.cli import task
from cookbook.host.names import HF_CACHE_HOST, IMAGE_REPO

DEFAULT_RECIPE = "qwen3.5-27b-fp8"


@task(name="list", default=True, help={"json": "print the ids alone, as a JSON list (a CI matrix reads it)",
                                       "accelerator": "only the recipes for this card type: gaudi2, gaudi3 or cpu"})
def recipes_list(c, json=False, accelerator=None):
    """List the recipes: id, model, hardware, fixes (`invoke recipes`)."""
    from cookbook.recipe import recipes as r

    r.list_all(as_json=json, accelerator=accelerator)


@task(name="import")
def recipes_import(c, check=False, dry_run=False):
    """Write a recipe per model and card from vllm-gaudi's own .cd/ defaults (--check: fail on drift)."""
    from cookbook.recipe import catalogue

    catalogue.run(check=check, dry_run=dry_run)


@task(help={"recipe": "recipe id or path; all recipes when omitted"})
def validate(c, recipe=None):
    """Validate recipes: schema, `extends`, and every rule."""
    from cookbook.image import steps
    from cookbook.prove import smoke

    steps.validate(recipe, smoke.check_names)


@task(help={"out": "context folder (default build/<id>[-standin])",
            "standin": "render FROM the offline stand-in base", "dry_run": "list the files, write nothing"})
def render(c, recipe=DEFAULT_RECIPE, out=None, standin=False, dry_run=False):
    """Render a recipe into a self-contained build context."""
    from cookbook.image import steps

    steps.render_recipe(recipe, out, standin, dry_run)


@task(help={"standin": "build on the offline stand-in base",
            "allow_unwritten_fixes": "development only: build on the real base although some selected fixes are "
                                     "not written; every tag says -unwritten and the image is never published",
            "dry_run": "print the commands, run nothing"})
def build(c, recipe=DEFAULT_RECIPE, standin=False, tag=None, repo=IMAGE_REPO, allow_unwritten_fixes=False,
          dry_run=False):
    """Build a recipe's image on the Docker engine; print its id, size and what it adds over its base."""
    from cookbook.image import steps

    steps.build_recipe(recipe, standin, tag, repo, dry_run, allow_unwritten_fixes)


@task(name="standin", help={"recipe": "the recipe whose release the stand-in stands for",
                             "rebuild": "build the base image again", "dry_run": "print the commands"})
def standin_(c, recipe=DEFAULT_RECIPE, rebuild=False, dry_run=False):
    """Build the offline stand-in base image (Debian rootfs + the release's Python files)."""
    from cookbook.image import steps

    steps.standin_task(recipe, rebuild, dry_run)


@task(name="fetch", help={"from_": "git URL or local mirror/clone of vllm-project/vllm-gaudi (default GitHub)",
                          "wheel": "a downloaded vllm wheel instead of PyPI", "recipe": "whose pins to fetch",
                          "dry_run": "print the commands"})
def upstream_fetch(c, recipe=DEFAULT_RECIPE, from_=None, wheel=None, dry_run=False):
    """Fill the upstream source cache: vllm-gaudi at the pinned commit, vLLM's files from PyPI."""
    from cookbook.image import steps

    steps.fetch_upstream(recipe, from_, wheel, dry_run)


ns = Collection(validate, render, build, standin_)
ns.add_collection(Collection("recipes", recipes_list, recipes_import))
ns.add_collection(Collection("upstream", upstream_fetch))


@task(help={"check": "fail if fixes/pack.json differs from what the sources give (CI's drift check)"})
def fixes_index(c, check=False):
    """Write fixes/pack.json from the fix.yaml files and profiles (--check: fail on drift)."""
    from cookbook.recipe import fixes

    fixes.write_index(check=check)


@task(help={"profile": "fix profile (default: all)"})
def fixes_list(c, profile=None):
    """The pack order of a profile: each fix, opt-in or generic, written or not."""
    from cookbook.recipe import fixes

    for line in fixes.describe(profile):
        print(line)


@task(help={"profile": "fix profile to verify",
            "base": "check the pack against this base image's own files instead (read, never run)",
            "site": "with --base: the base's site-packages folder (default: found in the image)",
            "dry_run": "with --base: print what it would read"})
def fixes_verify(c, profile=None, base=None, site=None, dry_run=False):
    """Apply the pack in order to pristine upstream sources, or to a base image's files (--base); report fix by fix.

    With --base: exit 0 when every fix matches, 4 when some target files differ but the pack still
    applies (a build on that base still refuses them), 1 when a fix does not apply.
    """
    from cookbook.fixpack import fix_verify

    fix_verify.task(profile, base, site, dry_run)


@task(help={"base": "the base image whose own target files the candidate is made for (read, never run)",
            "no_lab": "skip the fix lab on the candidate (it takes 10+ minutes)",
            "keep": "lay the lab's trees out here and keep them", "dry_run": "print what it would do"})
def fixes_rebase(c, base, profile=None, site=None, no_lab=False, lab_fix=None, keep=None, dry_run=False):
    """A candidate pack re-anchored on a base's own files, proved in the lab; fixes/ is never written."""
    from cookbook.fixpack import fix_rebase

    fix_rebase.task(base, profile, site, not no_lab, lab_fix or None, cli.READ["keep"](keep), dry_run)


@task(help={"name": "the fix's name (it must be in the profile's order)", "edited": "edited copy of the package",
            "package": "vllm_gaudi or vllm", "title": "one line", "why": "the symptom",
            "how": "the mechanism", "dry_run": "print, write nothing"})
def fixes_new(c, name, edited, package="vllm_gaudi", profile=None, title="TODO", why="TODO", how="TODO",
              requires=None, dry_run=False):
    """Scaffold a fix from an edited copy of a package: the diff against pristine, hashes filled in."""
    from pathlib import Path

    from cookbook.fixpack import fix_new

    fix_new.new_fix(name, Path(edited), package, profile, title=title, why=why, how=how, requires=requires,
                    dry_run=dry_run)


@task(help={"upstream": ("also run all of vllm-gaudi's own unit tests on the patched tree, but those "
                         "cookbook/fixpack/lab/upstream-excluded.txt names"),
            "alone": "also run each fix's tests on a tree with that fix alone (and what it requires)",
            "dry_run": "print what would run"})
def fixes_lab(c, fix=None, keep=None, upstream=False, alone=False, profile=None, dry_run=False):
    """Prove the fixes on CPU: each fix's lab tests fail on the pristine tree and pass on the patched one."""
    from cookbook.fixpack import fix_lab

    fix_lab.lab_task(fix or None, cli.READ["keep"](keep), upstream, profile, dry_run=dry_run, alone=alone)


@task(help={"workload": "the counter's workload: sampling (the guard's), greedy or serving",
            "no_prefix_caching": "serve with prefix caching off", "sync_scheduling": "serve with async scheduling off"})
def fixes_cost(c, keep=None, workload="sampling", no_prefix_caching=False, sync_scheduling=False, profile=None):
    """What the pack costs on the hot path: host syncs per steady decode step, pristine against patched."""
    from cookbook.fixpack import fix_cost

    fix_cost.cost_task(cli.READ["keep"](keep), workload, no_prefix_caching, sync_scheduling, profile)


@task(help={"to": "vllm-gaudi tag or commit to check the pack against", "from_": "git URL or local mirror of "
            "vllm-gaudi (default GitHub; not needed when the cache has REF)", "vllm": "vLLM version on PyPI "
            "(default: the one REF pins)", "profile": "fix profile whose pack to carry over",
            "out": "report folder (default build/drift/REF)", "dry_run": "print what it would fetch and write"})
def fixes_drift(c, to, from_=None, vllm=None, profile=None, out=None, dry_run=False):
    """What a newer release does to the pack: applies, fixed upstream, conflicts, target moved or gone."""
    from cookbook.fixpack import fix_drift

    fix_drift.task(to, profile, from_, vllm, cli.READ["out"](out), dry_run=dry_run)


@task(help={"check": "write nothing; fail if capacity.json differs from a fresh run",
            "dry_run": "print what it would run and write"})
def fixes_capacity(c, recipe="qwen3.5-27b-fp8", profile=None, check=False, dry_run=False):
    """The recipe's capacity at its own geometry (vLLM's scheduler, no model), stock and with the pack."""
    from cookbook.fixpack import capacity

    capacity.write(recipe, profile, check=check, dry_run=dry_run)


ns.add_collection(Collection("fixes", index=fixes_index, list=fixes_list, verify=fixes_verify, rebase=fixes_rebase,
                             new=fixes_new, lab=fixes_lab, cost=fixes_cost, drift=fixes_drift,
                             capacity=fixes_capacity))


@task(help={"image": "image to check (default: the recipe's moving tag)",
            "standin": "the image was built on the stand-in base",
            "dry_run": "print the commands"})
def test(c, recipe=DEFAULT_RECIPE, image=None, standin=False, repo=IMAGE_REPO, dry_run=False):
    """Check an image with pytest-testinfra before any smoke run; writes the evidence file."""
    from cookbook.image import steps

    steps.test_image(recipe, image, standin, repo, dry_run)


ns.add_task(test)


@task(help={"image": "the image to run, pinned: NAME@sha256:DIGEST",
            "local": "a local tag of that image to read its labels and manifest from (default: --image)",
            "replicas": "replicas, one Gaudi host each (default 1)",
            "kserve": "a KServe ServingRuntime + InferenceService",
            "env": "a run-time env override NAME=VALUE (repeatable)",
            "hf_secret": "Secret holding HF_TOKEN (key token)",
            "cache_claim": "PersistentVolumeClaim for the Hugging Face cache", "out": "folder (default build/k8s/ID)",
            "standin": "render from a stand-in image anyway (it serves no model)", "dry_run": "print, write nothing"})
def k8s(c, recipe=DEFAULT_RECIPE, image=None, local=None, replicas=None, kserve=False, env=None, hf_secret="hf-token",
        cache_claim="hf-model-cache", out=None, standin=False, dry_run=False):
    """Render validated Kubernetes manifests (Deployment or KServe, Service, PDB) from a recipe and its image."""
    from cookbook.release import k8s as k

    k.task(**cli.given(c, locals()))


ns.add_task(k8s)


@task(help={"image": "the image to serve (default: the recipe's exact tag)",
            "record": "save what the host said into DIR/readings.json",
            "readings": "judge a saved readings.json instead of this host", "dry_run": "print what it would read"})
def doctor(c, recipe=DEFAULT_RECIPE, image=None, repo=IMAGE_REPO, record=None, readings=None, dry_run=False):
    """Can this host serve the recipe? Habana runtime, driver, firmware, cards, memory, cache, port, image."""
    from cookbook.prove import doctor as d

    d.task(**cli.given(c, locals()))


ns.add_task(doctor)


@task(help={"registry": "HOST[:PORT][/NAMESPACE] to push to (required)",
            "image": "local image to publish, by name or id (default: the recipe's moving tag)",
            "standin": "look for the stand-in build (it is refused: stand-ins are never published)",
            "repo": "local image repository prefix", "sbom": "attach the SBOM and provenance (default on)",
            "digest_file": "also write the pushed digest here (for signing in CI)",
            "no_moving_tags": "push the content tag only; leave the version tag and latest where they are "
                              "(a later publish of the same image moves them, e.g. once it is signed)",
            "dry_run": "print the commands, push nothing"})
def publish(c, registry=None, recipe=DEFAULT_RECIPE, image=None, standin=False, repo=IMAGE_REPO, sbom=True,
            digest_file=None, no_moving_tags=False, dry_run=False):
    """Check an image again; push it with its SBOM and provenance; move the moving tags last.

    Credentials: COOKBOOK_REGISTRY_USER and COOKBOOK_REGISTRY_PASSWORD, else the Docker config; never printed.
    """
    from cookbook.release import publish as p

    p.publish(recipe, registry, image=image, standin=standin, repo=repo, dry_run=dry_run, sbom=sbom,
              moving_tags=not no_moving_tags, digest_file=digest_file)


ns.add_task(publish)


@task(help={"check": "write nothing; fail if a generated page differs from its sources (CI's drift check)",
            "site": "also build the static site (mkdocs) into this folder", "dry_run": "print, write nothing"})
def docs(c, check=False, site=None, dry_run=False):
    """Generate the recipe pages and the indexes of recipes and fixes under docs/ (--site DIR: mkdocs too)."""
    from cookbook.prove import docs as d

    d.task(**cli.given(c, locals()))


ns.add_task(docs)


@task(help={"image": "image to run (default: the recipe's moving tag)", "log_dir": "where the container's log is kept",
            "no_fetch": "do not fetch the model into the host's cache first (hosts that manage weights themselves)",
            "dry_run": "print the docker run, start nothing"})
def serve(c, recipe=DEFAULT_RECIPE, image=None, port=None, runtime="habana", name=None,
          hf_cache=HF_CACHE_HOST, env=None, option=None, cards=None, timeout="1800", log_dir="build/serve",
          no_fetch=False, dry_run=False):
    """Start a recipe's image as the README's Serving section does, its model fetched and verified first.

    The model goes into the host's cache first (`--no-fetch` leaves that out); then it waits for health
    and says where the log is.

    Words after `--` go after the image, appended to the recipe's vLLM flags (`-- --max-num-seqs 16`).
    """
    from cookbook.prove import serve as s

    s.task(**cli.given(c, locals(), words=True))


ns.add_task(serve)


@task(help={"image": "start this image for the run (as `invoke serve` does), removed afterwards",
            "only": "run only this scenario (repeatable)", "out": "folder for bench.json, bench.md, bench.png",
            "dry_run": "print the sized scenarios (and the docker run), run nothing"})
def bench(c, recipe=DEFAULT_RECIPE, url=None, image=None, scale="1", repeats="3", only=None, out=None, port=None,
          runtime="habana", name=None, hf_cache=HF_CACHE_HOST, env=None, option=None, timeout="1800",
          dry_run=False):
    """Run the recipe's performance scenarios: tokens/s, TTFT, end to end; JSON, Markdown rows, PNG."""
    from cookbook.prove import bench as b

    b.task(**cli.given(c, locals(), words=True))


ns.add_task(bench)


@task(help={"image": "start this image for the run (as `invoke serve` does), removed afterwards",
            "scale": "shrink every long prompt by this factor too (the server's context already scales them)",
            "out": "folder for smoke.json and smoke.md (default build/smoke/ID)",
            "only": "run only this check: a row name or a check kind (repeatable)",
            "dry_run": "list the checks, send nothing"})
def smoke(c, recipe=DEFAULT_RECIPE, url=None, image=None, scale=None, out=None, only=None, port=None,
          runtime="habana", name=None, hf_cache=HF_CACHE_HOST, env=None, option=None, timeout="1800",
          dry_run=False):
    """Run the recipe's Verified checks against a running server; JSON and Markdown results, exit 1 on a failure."""
    from cookbook.prove import smoke as s

    s.against(**cli.given(c, locals(), words=True))


ns.add_task(smoke)


@task(help={"name": "container name (default cookbook-verify-ID)",
            "runtime": "Docker runtime (default habana; '' for Docker's default: a CPU run, which skips the doctor)",
            "scale": "bench: multiply the recipe's token sizes", "repeats": "bench: runs of each scenario",
            "out": "folder for every step's output (default build/verify/ID)",
            "results": "where the result files go (default results/; docs/ is written only then)",
            "dry_run": "print the steps, run nothing"})
def chain(c, recipe=DEFAULT_RECIPE, runtime="habana", repo=IMAGE_REPO, hf_cache=HF_CACHE_HOST,
          env=None, option=None, timeout="1800", scale="1", repeats="3", out=None, results=None, skip=None,
          port=None, name=None, smoke_only=None, bench_only=None, dry_run=False):
    """One command on a Gaudi host, doctor to the recipe page's measured figures; resumable, one summary.

    Steps: doctor, fixes.verify --base, build, test, weights, serve, smoke, bench, results/ID/, docs, stop the server.

    Resumable: a step that passed for the same image id and the same request (runtime, flags, selection,
    scale, repeats), whose evidence files still say so, is not run again (build/verify/ID/state.json).
    Words after `--` go after the image, appended to the recipe's vLLM flags, as with `invoke serve`.
    """
    from cookbook import chain as ch

    ch.task(**cli.given(c, locals(), words=True))


ns.add_task(chain)
