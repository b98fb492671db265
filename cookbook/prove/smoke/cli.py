"""`invoke smoke`: the task's arguments checked, then the run (or, with --dry-run, the list of checks)."""

from __future__ import annotations

from pathlib import Path

from ...host.errors import SmokeFailure, UsageError
from ..openai_client import check_url
from .files import Result
from .runner import plan, run
from .table import markdown


def parse_scale(text: str | None) -> float:
    try:
        scale = 1.0 if text is None else float(text)
    except ValueError:
        raise UsageError(f"--scale takes a number, not {text!r}") from None
    if not 0 < scale <= 1e6:
        raise UsageError(f"--scale must be positive, not {text}")
    return scale


def against(recipe: str, url: str | None, image: str | None, scale: float | None, out: Path | None,
            only: tuple[str, ...], port: int | None, runtime: str | None, name: str | None, hf_cache: str | None,
            env: dict, option: tuple[str, ...], timeout: float, args: tuple[str, ...], dry_run: bool = False):
    """`invoke smoke` with the task's options: `task` against --url, or against a container of --image
    started for it and always removed (serve.run_against)."""
    from ...host.paths import ROOT
    from ...recipe import recipes
    from .. import serve

    loaded = recipes.load(recipe)
    spec = serve.run_spec(loaded, "smoke", image, port, runtime, name, hf_cache, env, option, args)
    out_dir = out or ROOT / "build" / "smoke" / loaded.id
    return serve.run_against(url, spec, out_dir / "server.log", timeout, dry_run,
                             lambda t: task(recipe, t.url, scale, out_dir, only, dry_run, image=t.image,
                                            image_id=t.image_id, log_path=t.log_path, args=args if spec else ()))


def task(recipe: str, url: str | None, scale: str | None, out: Path | None, only, dry_run: bool, *,
         image: str | None = None, image_id: str | None = None, log_path: Path | None = None,
         args: tuple[str, ...] = ()) -> Result | None:
    """`invoke smoke`: load the recipe, check the arguments, then run (or list, with dry_run) its checks.
    `image`/`image_id`/`log_path`/`args`: the container started for the run (--image), recorded in smoke.json
    with the image's content hash and base, the hardware its server reported in its log, and the vLLM
    flags added to the recipe's, which the recipe page reads (cookbook/prove/results.py)."""
    from ...host import progress
    from ...host.paths import ROOT
    from ...recipe import recipes
    from .. import results

    loaded = recipes.load(recipe)
    factor = parse_scale(scale)
    if not url:
        raise UsageError("give the server to check: --url http://HOST:PORT")
    url = check_url(url)
    out_dir = out or ROOT / "build" / "smoke" / loaded.id
    if dry_run:
        print(f"would check {url} with {loaded.id}'s checks (sized from its /v1/models) into {out_dir}:")
        for line in plan(loaded, only):
            print("  " + line)
        return None
    target = {"url": url, "image": image, "image_id": image_id}
    if image_id:
        target.update(results.image_target(image, image_id, results.log_hardware(log_path),
                                           results.image_labels(image_id), args))
    result = run(loaded, url, scale=factor, out_dir=out_dir, only=only, progress=progress.say, target=target)
    print(markdown(result), end="")
    print(f"results: {out_dir / 'smoke.json'}")
    failed = [row["name"] for row in result.rows if row["status"] == "failed"]
    if failed:
        raise SmokeFailure(f"smoke checks failed: {', '.join(failed)}")
    return result
