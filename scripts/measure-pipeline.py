#!/usr/bin/env python3
"""Measure the pipeline's own performance targets (docs/benchmarks.md). Needs the Docker engine, the
upstream cache and a built stand-in image of qwen3.5-27b-fp8; prints one line per figure.

    .venv/bin/python scripts/measure-pipeline.py [-v] [--full-pack]
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cookbook.host import engine
from cookbook.image import render, standin, steps  # noqa: E402
from cookbook.recipe import recipes
from inimage import fixplan  # noqa: E402

RID = "qwen3.5-27b-fp8"


def timed(fn, n=5):
    runs = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs), min(runs), max(runs)


def render_all():
    for rid in recipes.known_ids():
        loaded = recipes.load(rid)
        render.context_files(loaded, render.vault_base(loaded))


def main() -> None:
    med, lo, hi = timed(render_all, 10)
    print(f"render all {len(recipes.known_ids())} recipes (load+validate+render, in process): "
          f"median {med * 1000:.0f} ms (min {lo * 1000:.0f}, max {hi * 1000:.0f}, n=10)")

    def build():
        with contextlib.redirect_stdout(io.StringIO()):
            return steps.build_recipe(RID, use_standin=True)

    build()  # warm
    med, lo, hi = timed(build, 3)
    print(f"warm rebuild, nothing changed (invoke build path, in process): median {med:.2f} s "
          f"(min {lo:.2f}, max {hi:.2f}, n=3)")

    built = build()
    print(f"image adds {built.added / 2**20:.3f} MiB over its base ({built.size} vs {built.base_size} bytes)")

    # One env var changed in the real recipe (restored afterwards): which build steps ran again?
    path = recipes.known_ids()[RID]
    original = path.read_text()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            # a value never built before, so the cache cannot already hold the result
            fresh = f'VLLM_RPC_TIMEOUT: "{3600000 + int(time.time()) % 100000}"'
            path.write_text(original.replace('VLLM_RPC_TIMEOUT: "3600000"', fresh))
            loaded = recipes.load(RID)
            ctx = render.write_context(render.context_files(loaded, standin.base("v0.26.0")), Path(tmp) / "ctx")
        finally:
            path.write_text(original)
        c = engine.client()
        start = time.perf_counter()
        out = subprocess.run([c.path, "build", "--progress=plain", str(ctx)], env=c.env(), capture_output=True,
                             text=True, check=True)
        seconds = time.perf_counter() - start
        log = (out.stderr + out.stdout).splitlines()
        if "-v" in sys.argv:
            print("\n".join(line for line in log if re.match(r"#\d+ (\[|CACHED)", line)))
        names = {line.split(" ", 1)[0]: line.split("] ", 1)[1][:40] for line in log
                 if re.match(r"#\d+ \[\d+/\d+\] ", line)}
        cached = {line.split(" ", 1)[0] for line in log if line.endswith(" CACHED")}
        ran = [names[n] for n in names if n not in cached]
        print(f"one env var changed: rebuilt in {seconds:.2f} s; cached: {sorted(names[n] for n in cached)}; "
              f"ran: {ran} (ENV, LABEL and the like are metadata, not steps)")

    image = built.image_id
    cmd = shlex.join(fixplan.apply_argv("--check"))
    shell = f"for i in 1 2 3 4 5; do s=$(date +%s%N); {cmd} >/dev/null; e=$(date +%s%N); echo $(((e-s)/1000000)); done"
    out = engine.docker("run", "--rm", "--entrypoint", "sh", image, "-c", shell).stdout.split()
    print(f"inimage.apply --check in the image (whole process, wall): {', '.join(out)} ms over 5 runs")




def measure_full_pack() -> None:
    """A pack the size of the real one (16 fixes, each patching the runner and a vLLM file) built
    into a stand-in image; apply (after --revert) and --check timed inside the container."""
    import os

    import yaml

    from cookbook.fixpack import fix_new
    from cookbook.fixpack.fix_sources import package_roots
    from cookbook.host.paths import FIXES
    from cookbook.recipe import fixes

    with tempfile.TemporaryDirectory() as tmp:
        pack = Path(tmp) / "fixes"
        (pack / "profiles").mkdir(parents=True)
        profile = yaml.safe_load((FIXES / "profiles" / "v0.26.0.yaml").read_text())
        names = [f"bench-{i:02}" for i in range(16)]
        profile["order"] = names + profile["order"]
        (pack / "profiles" / "v0.26.0.yaml").write_text(yaml.safe_dump(profile))
        roots = package_roots(fixes.load_profile("v0.26.0", pack))
        runner = (roots["vllm_gaudi"] / "v1/worker/hpu_model_runner.py").read_text().splitlines(keepends=True)
        for i, name in enumerate(names):
            edited = Path(tmp) / f"edit-{i}"
            target = edited / "v1/worker/hpu_model_runner.py"
            target.parent.mkdir(parents=True)
            # Fix i adds marker i and keeps the markers of the fixes before it: patches build on each other.
            lines = list(runner)
            for j in range(i + 1):
                lines.insert(200 + j * 300 + j, f"# bench fix {j}\n")
            target.write_text("".join(lines))
            fix_new.new_fix(name, edited, "vllm_gaudi", "v0.26.0", title="bench", why="bench", how="bench",
                            fixes_dir=pack)
        fixes.write_index(fixes_dir=pack)
        os.environ["COOKBOOK_FIXES_DIR"] = str(pack)
        with contextlib.redirect_stdout(io.StringIO()):
            built = steps.build_recipe(RID, use_standin=True, repo="cookbook-bench")
        del os.environ["COOKBOOK_FIXES_DIR"]
    revert = shlex.join(fixplan.apply_argv("--revert", "--quiet"))
    apply = shlex.join(fixplan.apply_argv("--profile", "v0.26.0", "--quiet", env={"PT_HPU_LAZY_MODE": "0"}))
    shell = (f"for i in 1 2 3; do {revert} >/dev/null; s=$(date +%s%N); {apply} >/dev/null; "
             "e=$(date +%s%N); echo $(( (e-s)/1000000 )); done")
    out = engine.docker("run", "--rm", "--entrypoint", "sh", built.image_id, "-c", shell).stdout.split()
    record = engine.docker("run", "--rm", "--entrypoint", "cat", built.image_id, fixplan.RECORD)
    assert json.loads(record.stdout)["fixes"] == names
    print(f"16-fix pack on the runner (hpu_model_runner.py), apply in the image: {', '.join(out)} ms over 3 runs")
    for tag in built.tags:
        engine.docker("rmi", tag, check=False)


if __name__ == "__main__":
    main()
    if "--full-pack" in sys.argv:
        measure_full_pack()
