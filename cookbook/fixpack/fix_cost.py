"""`invoke fixes.cost`: what the pack costs on the hot path, on the fix lab's two trees (fix_lab.py lays
them out). cookbook/fixpack/lab/_hostsync.py counts, per steady decode step of the release's engine on the CPU,
the host synchronisations each call site would make on a Gaudi; the patched tree may make no more than
the pristine one, site by site, unless a fix.yaml declares the site in `host_syncs`. The sampling
workload: 8 requests decoding together, greedy, logprobs, top-p, top-k, min-p, penalties and logit
bias, prefix caching and async scheduling on.
"""

from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ..host import signals
from ..host.errors import PackFailure, UsageError, printable
from ..host.progress import say
from ..recipe import fixes
from .fix_lab import LAB_TESTS, LabError, environment, lab_env_vars, lay_out_both, written_fixes

HOSTSYNC = LAB_TESTS / "_hostsync.py"
COST_ARGS = ("--workload", "sampling")
WORKLOADS = ("sampling", "greedy", "serving")  # the counter's own choices (lab/_hostsync.py --workload)


def host_syncs(tree: Path, args: tuple[str, ...] = COST_ARGS, timeout: int = 900) -> dict:
    """The counter's figures on `tree` (one engine, one process): steady decode steps, and per call
    site the calls per step by kind (see cookbook/fixpack/lab/_hostsync.py)."""
    python = environment() / "bin" / "python"
    with tempfile.TemporaryDirectory(prefix="cookbook-cost.") as tmp:
        out = Path(tmp) / "figures.json"
        proc = signals.run([str(python), str(HOSTSYNC), "--out", str(out), *args], cwd=LAB_TESTS,
                           env=lab_env_vars(tree), capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0 or not out.is_file():
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
            raise LabError(f"the host-sync counter failed on the {tree.name} tree:\n{tail}")
        return json.loads(out.read_text())


# Kinds the counter reports that are no host sync (cookbook/fixpack/lab/_hostsync.py `is_sync`).
NOT_SYNCS = ("d2h async", "h2d async")
MIXED = "mixed host/device operands of"


def sync_rates(figures: dict) -> dict[tuple[str, str], float]:
    """{(file::function, kind): calls per steady decode step}, host syncs only, summed over a
    function's call sites (a fix that edits a line keeps its function's count)."""
    out: dict[tuple[str, str], float] = defaultdict(float)
    for site in figures["sites"].values():
        for kind, rate in site["kinds"].items():
            if kind not in NOT_SYNCS and not kind.startswith(MIXED):
                out[(site["function"], kind)] += rate
    return dict(out)


def declared_host_syncs(profile_name: str | None = None, fixes_dir: Path | None = None) -> dict[str, str]:
    """{file::function: fix} of the host syncs the written fixes declare (fix.yaml `host_syncs`)."""
    return {h.site: name for name in written_fixes(profile_name, fixes_dir)
            for h in fixes.load_fix(name, fixes_dir).host_syncs}


@dataclass(frozen=True)
class Cost:
    """Host syncs per steady decode step of the same workload, pristine against patched."""

    pristine: dict
    patched: dict
    declared: dict[str, str] = field(default_factory=dict)
    min_steps: int = 8

    @property
    def problems(self) -> list[str]:
        out = [f"the {name} run had {fig['steps']} steady decode steps (fewer than {self.min_steps}): "
               "nothing to compare" for name, fig in (("pristine", self.pristine), ("patched", self.patched))
               if fig["steps"] < self.min_steps]
        if self.pristine["steps"] != self.patched["steps"]:
            out.append(f"not the same workload: {self.pristine['steps']} steady decode steps on the pristine "
                       f"tree, {self.patched['steps']} on the patched one")
        before = sync_rates(self.pristine)
        for (where, kind), rate in sorted(sync_rates(self.patched).items()):
            was = before.get((where, kind), 0.0)
            if rate > was + 1e-9 and where not in self.declared:
                sites = [s["site"] for s in self.patched["sites"].values()
                         if s["function"] == where and kind in s["kinds"]]
                out.append(f"{where}: {kind} {rate:.2f} per steady decode step on the patched tree, {was:.2f} "
                           f"on the pristine one (no fix.yaml declares it in host_syncs): " + "; ".join(sites))
        return out


def cost(keep: Path | None = None, args: tuple[str, ...] = COST_ARGS, profile_name: str | None = None,
         fixes_dir: Path | None = None) -> Cost:
    """`invoke fixes.cost`: both trees (in `keep`, or a temporary folder), the counter on each."""
    with signals.interruptible(), tempfile.TemporaryDirectory(prefix="cookbook-cost.") as tmp:
        figures = {}
        for kind, tree in lay_out_both(keep or Path(tmp), bool(keep), profile_name, fixes_dir).items():
            say(f"fix lab: counting host syncs per steady decode step on the {kind} tree")
            figures[kind] = host_syncs(tree, args)
    return Cost(figures["pristine"], figures["patched"], declared_host_syncs(profile_name, fixes_dir))


def cost_task(keep: Path | None, workload: str, no_prefix_caching: bool, sync_scheduling: bool,
              profile_name: str | None) -> None:
    """`invoke fixes.cost`: the counter's flags from the task's options, the table, then the verdict."""
    if workload not in WORKLOADS:  # refused here, before two trees are laid out, not by the counter after
        raise UsageError(f"--workload {printable(workload)[:60]!r} is not one of the counter's",
                         hint="one of: " + ", ".join(WORKLOADS))
    args = ("--workload", workload) + (("--no-prefix-caching",) if no_prefix_caching else ()) + (
        ("--sync-scheduling",) if sync_scheduling else ())
    report = cost(keep, args, profile_name)
    for line in describe_cost(report):
        print(line)
    if report.problems:
        raise PackFailure("the pack adds host syncs to a steady decode step (above)")


def describe_cost(c: Cost) -> list[str]:
    """Per function and kind: host syncs per steady decode step, pristine and patched."""
    a, b = sync_rates(c.pristine), sync_rates(c.patched)
    lines = [f"steady decode steps: {c.pristine['steps']} pristine, {c.patched['steps']} patched; host syncs "
             f"per step: {c.pristine['syncs_per_step']:.2f} pristine, {c.patched['syncs_per_step']:.2f} patched",
             f"{'pristine':>8} {'patched':>8}  kind  function"]
    for where, kind in sorted(a.keys() | b.keys()):
        lines.append(f"{a.get((where, kind), 0):8.2f} {b.get((where, kind), 0):8.2f}  {kind}  {where}"
                     + ("  (declared by " + c.declared[where] + ")" if where in c.declared else ""))
    lines += [f"PROBLEM {p}" for p in c.problems]
    return lines
