"""The fix lab: the release's real Python files, pristine and patched, exercised on a CPU.

A tree is a site-packages folder laid out as the image has it (vLLM's and vllm-gaudi's Python files
from the upstream cache, with their install metadata). The patched tree is made by the project's
own applier (`python -m inimage.apply`) applying the pack to a pristine tree, so the lab tests exactly what an
image gets. The lab runs in its own environment (scripts/fix-lab.sh: CPU torch and vLLM's pure-Python
requirements) with the tree first on the path. A fix's lab tests live in its folder, beside its patches
(`fixes/<name>/test_fix_<snake_name>.py`, and `..._engine.py` for an end-to-end one), and must fail on
the pristine tree and pass on the patched one; the lab's harness (its fixtures, stubs for the Gaudi
software, the engine and capacity helpers) and the pack's own modules are in `lab/` beside this module.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from inimage import fixplan

from ..host import containers, paths, signals, upstream
from ..host.errors import CookbookError, PackFailure, UsageError
from ..host.paths import ENGINE, ROOT
from ..host.paths import fixes_dir as default_fixes_dir
from ..host.progress import say
from ..image import standin
from ..recipe import fixes, release

LAB_TESTS = Path(__file__).resolve().parent / "lab"  # the harness: pytest's root for every lab run
FIXTURES_PLUGIN = "lab_fixtures"  # lab/lab_fixtures.py, loaded with -p: a fix's tests sit outside LAB_TESTS
STUBS = LAB_TESTS / "stubs"
UPSTREAM_EXCLUDED = LAB_TESTS / "upstream-excluded.txt"
UPSTREAM_TESTS = "tests/unit_tests"
BUILD_SCRIPT = ROOT / "scripts" / "fix-lab.sh"
TREE_MARKER = ".cookbook-lab-tree"  # what `--keep` may replace: only trees the lab laid out
# The env the fixes are applied under: the recipe's compile mode, and the guard gdn-prefix-cache names.
APPLY_ENV = {"PT_HPU_LAZY_MODE": "0", "VLLM_COMPACT_GDN": "1"}


class LabError(CookbookError):
    """The fix lab's environment or a tree is missing or cannot be made."""


# A fix may also have an end-to-end module, `test_fix_<name>_engine.py` (the release's engine run on
# the CPU), held to the same rule as its own module.
ENGINE_SUFFIX = "_engine"


def module_for(fix: str, fixes_dir: Path | None = None) -> Path:
    return (fixes_dir or default_fixes_dir()) / fix / f"test_fix_{fix.replace('-', '_')}.py"


def modules_for(fix: str, fixes_dir: Path | None = None) -> list[Path]:
    """The fix's lab modules that exist, in its folder: its own, then its end-to-end one."""
    own = module_for(fix, fixes_dir)
    return [p for p in (own, own.with_name(own.stem + ENGINE_SUFFIX + ".py")) if p.is_file()]


def fix_of(module: str) -> str | None:
    """`test_fix_prompt_order` and `test_fix_prompt_order_engine` -> `prompt-order`; None for the lab's
    other modules."""
    stem = Path(module).stem.removesuffix(ENGINE_SUFFIX)
    return stem[len("test_fix_"):].replace("_", "-") if stem.startswith("test_fix_") else None


# The pack's own modules, `test_pack_<what>.py`: the whole pack under conditions no single fix owns (the
# recipe's serving conditions). Held to the fixes' rule as one verdict named PACK: every test fails on
# the pristine tree and passes on the patched one.
PACK_PREFIX = "test_pack_"
PACK = "the whole pack"


def pack_modules() -> list[Path]:
    return sorted(LAB_TESTS.glob(PACK_PREFIX + "*.py"))


def owner_of(module: str) -> str | None:
    """The verdict a lab module's tests count for: its fix, PACK, or None (modules that must pass on
    both trees)."""
    return PACK if Path(module).name.startswith(PACK_PREFIX) else fix_of(module)


def environment() -> Path:
    """The lab's Python environment, or an error that names the command that builds it."""
    out = signals.run(["bash", str(BUILD_SCRIPT), "--print"], capture_output=True, text=True, check=True)
    env = Path(out.stdout.strip())
    if not (env / ".complete").is_file():
        raise LabError(f"the fix lab environment is not built ({env})", hint=f"run {BUILD_SCRIPT}")
    return env


def make_tree(dest: Path, profile_name: str | None = None, patched: bool = False,
              fixes_dir: Path | None = None, only: list[str] | None = None,
              base_files: dict[tuple[str, str], bytes] | None = None) -> Path:
    """A site-packages tree of the release at `dest`; with `patched`, the profile's written fixes
    (opt-ins included; with `only`, those fixes and what they require) applied by inimage.apply exactly
    as an image build applies them. `base_files` {(package, path): bytes} replace the release's files
    first: a base image's own target files, as `fixes.rebase` proves a candidate pack on them."""
    profile_name = release.profile_or_default(profile_name)
    fixes_dir = fixes_dir or default_fixes_dir()
    profile = fixes.load_profile(profile_name, fixes_dir)
    standin.lay_site_packages(fixes.pins_of(profile), dest)
    for (package, path), data in (base_files or {}).items():
        (dest / package / path).parent.mkdir(parents=True, exist_ok=True)
        (dest / package / path).write_bytes(data)
    (dest / TREE_MARKER).write_text("A release tree laid out by the fix lab; `invoke fixes.lab --keep` replaces it.\n")
    if patched:
        apply_pack(dest, profile_name, profile, fixes_dir, with_requirements(only, fixes_dir) if only else None)
    return dest


def with_requirements(names: list[str], fixes_dir: Path | None = None) -> list[str]:
    """`names` and every fix they require, transitively."""
    out: list[str] = []
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in out:
            out.append(name)
            todo += fixes.load_fix(name, fixes_dir).requires
    return out


def apply_pack(site: Path, profile_name: str, profile: fixes.ProfileSpec, fixes_dir: Path,
               names: list[str] | None = None) -> None:
    """inimage.apply on `site` with the profile's written fixes, or those of `names` in pack order."""
    chosen = [n for n in profile.order if names is None or n in names]
    present = fixes.resolve(profile, chosen, fixes_dir)
    with tempfile.TemporaryDirectory(prefix="cookbook-labpack.") as tmp:
        for rel, data in fixes.pack_files(profile_name, list(present), fixes_dir).items():
            path = Path(tmp) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        opt_in = [n for n in present if n in profile.opt_in]
        # The lab's Python, the one that imports the tree: a fix's dependency ranges are checked on its path.
        python = environment() / "bin" / "python"
        # Run by module name from the folder that holds inimage, as the image runs it from its lib/.
        cmd = [str(python), "-B", "-m", fixplan.APPLY_MODULE, "--profile", profile_name, *opt_in, "--site", str(site),
               "--pack", str(Path(tmp) / "pack.json"), "--record", str(site / "fix-record.json"), "--quiet"]
        proc = signals.run(cmd, capture_output=True, text=True, cwd=ENGINE.parent,
                           env=minimal_env(os.environ, **APPLY_ENV))
    if proc.returncode != 0:
        what = "the fix pack" if names is None else ", ".join(present)
        raise LabError(f"{what} does not apply to the pristine release in the lab:\n"
                       + (proc.stderr or proc.stdout).strip(), hint="run invoke fixes.verify")


@dataclass
class Run:
    """One pytest run of the lab: outcome per test node id ("passed", "failed", "skipped")."""

    tree: Path
    outcomes: dict[str, str] = field(default_factory=dict)
    returncode: int = 0
    output: str = ""

    def by_fix(self) -> dict[str, dict[str, str]]:
        """Outcomes by the verdict they count for: a fix's name, or PACK."""
        out: dict[str, dict[str, str]] = defaultdict(dict)
        for node, outcome in self.outcomes.items():
            owner = owner_of(node.split("::")[0])
            if owner:
                out[owner][node] = outcome
        return dict(out)


# What a lab process may inherit from the caller: where programs, the home and the caches are, the
# locale and the thread count. Nothing else (no tokens, no credentials, no VLLM_* or PT_HPU_* switch).
INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "XDG_CACHE_HOME", "COOKBOOK_CACHE",
             "OMP_NUM_THREADS")


def minimal_env(environ: dict[str, str] | os._Environ, **extra: str) -> dict[str, str]:
    """The allow-listed part of `environ`, then `extra`: the whole environment of a lab process."""
    return {**{k: environ[k] for k in INHERITED if k in environ}, **extra}


def lab_env_vars(tree: Path, harness: Path = LAB_TESTS, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The tree first on the path, then the stubs for the Gaudi software and the harness (a fix's modules
    import its helpers from there); upstream's own fake-HPU switch; no Hub access (the lab builds what
    it needs)."""
    environ = os.environ if environ is None else environ
    return minimal_env(environ, **{
        "PYTHONPATH": os.pathsep.join([str(tree), str(harness / STUBS.name), str(harness)]),
        "COOKBOOK_LAB_TREE": str(tree),
        "VLLM_USE_FAKE_HPU": "1",
        "PT_HPU_LAZY_MODE": "0",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": environ.get("OMP_NUM_THREADS", "2"),
    })


def targets_of(modules: list[Path], fixes_dir: Path | None, contained: bool) -> list[str]:
    """pytest's arguments for lab modules, relative to LAB_TESTS (the working folder of a lab run): the
    harness's own modules by name, a fix's through the fixes folder, which a contained run mounts where
    a checkout has it."""
    fixes_dir = fixes_dir or default_fixes_dir()
    out = []
    for m in modules:
        if m.is_relative_to(LAB_TESTS):
            out.append(str(m.relative_to(LAB_TESTS)))
        elif contained:
            out.append(os.path.relpath(Path(IN["fixes"]) / m.relative_to(fixes_dir), IN["lab"]))
        else:
            out.append(os.path.relpath(m, LAB_TESTS))
    return out


def run(tree: Path, targets: list[str], *, cwd: Path = LAB_TESTS, extra: list[str] | None = None,
        timeout: int = 3600, contained: bool = False, fixes_dir: Path | None = None) -> Run:
    """Run pytest in the lab environment on `tree`; outcomes come from pytest's junit XML. `contained`:
    in a container (a base's files are in the tree: see `run_contained`), else a host process. The pytest
    process and what it starts (an engine's workers) are one process group, killed on an interrupt."""
    env_dir = environment()
    with tempfile.TemporaryDirectory(prefix="cookbook-labrun.") as tmp:
        out = Path(tmp) / "out"
        out.mkdir()
        # The lab's own root and fixtures, named: a fix's modules sit outside LAB_TESTS, where pytest would
        # find neither (upstream's unit tests, run from their own folder, keep their own).
        own = ["-c", "pytest.ini", "--rootdir", ".", "-p", FIXTURES_PLUGIN] if cwd == LAB_TESTS else []
        args = [*own, *(extra or []), *targets]
        if contained:
            proc = run_contained(env_dir, tree, cwd, out, args, timeout, fixes_dir or default_fixes_dir())
        else:
            proc = signals.run([str(env_dir / "bin" / "python"), *pytest_args(out / JUNIT, args)], cwd=cwd,
                                  env=lab_env_vars(tree), capture_output=True, text=True, timeout=timeout)
        outcomes = parse_junit(out / JUNIT, cwd) if (out / JUNIT).is_file() else {}
    return Run(tree, outcomes, proc.returncode, proc.stdout + proc.stderr)


JUNIT = "junit.xml"


def pytest_args(junit: Path | str, args: list[str]) -> list[str]:
    return ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "lab_stubs", f"--junitxml={junit}",
            "-o", "junit_family=xunit1", *args]


# ------------------------------------------------------------------ a base's code, in a container
# `fixes.rebase --base IMAGE` proves a candidate pack on the base's own target files: the lab imports
# them, so the base's code runs. It never runs on the host: the lab's pytest runs in a container of the
# stand-in rootfs (Debian, as the host the lab's Python was built on) with no network, no capabilities,
# no new privileges, a read-only root, as nobody, with an environment made of the lab's own settings
# alone. It sees, read-only, the lab's Python and its venv, the harness, fixes/, recipes/ and the tree; the one
# folder it may write is a scratch folder of its own (junit XML, model cache; /tmp is a tmpfs).
NOBODY = "65534:65534"
CONTAINED_ROLE = "fixes-lab"
# Where everything goes in the container: host folders may sit under /root, which nobody cannot enter.
# The harness, fixes/ and recipes/ keep their places in a checkout (a fix's module is ../../../fixes/NAME/…
# from the harness; lab/_capacity.py reads recipes/ from the checkout's root).
OPT = "/opt/lab"  # where the contained lab mounts what it runs (run_contained)
IN = {"python": f"{OPT}/python", "env": f"{OPT}/env", "venv": f"{OPT}/venv", "tree": f"{OPT}/tree",
      "lab": f"{OPT}/repo/cookbook/fixpack/lab", "fixes": f"{OPT}/repo/fixes", "recipes": f"{OPT}/repo/recipes",
      "cwd": f"{OPT}/cwd", "out": f"{OPT}/out"}
JUNIT_LIMIT = 64 << 20  # a hostile tree writes the junit XML: bounded, like any answer from outside


def python_of(env_dir: Path) -> tuple[Path, str]:
    """(the prefix of the Python the lab's venv was made from, "python3.X"), from its pyvenv.cfg."""
    cfg = dict(line.split("=", 1) for line in (env_dir / "pyvenv.cfg").read_text().splitlines() if "=" in line)
    cfg = {k.strip(): v.strip() for k, v in cfg.items()}
    major_minor = ".".join(cfg.get("version", "").split(".")[:2])
    if "home" not in cfg or not major_minor:
        raise LabError(f"{env_dir / 'pyvenv.cfg'} names no home and version", hint=f"rebuild it: {BUILD_SCRIPT}")
    return Path(cfg["home"]).resolve().parent, f"python{major_minor}"


def venv_shim(dest: Path, python: str) -> Path:
    """A venv at `dest` that points at the lab's Python and site-packages where the container mounts
    them: the lab's own venv names host paths."""
    (dest / "bin").mkdir(parents=True)
    (dest / "lib" / python).mkdir(parents=True)
    (dest / "pyvenv.cfg").write_text(f"home = {IN['python']}/bin\ninclude-system-site-packages = false\n")
    (dest / "bin" / "python").symlink_to(f"{IN['python']}/bin/{python}")
    (dest / "lib" / python / "site-packages").symlink_to(f"{IN['env']}/lib/{python}/site-packages")
    return dest


def contained_argv(image: str, mounts: dict[str, Path], workdir: str, env: dict[str, str], args: list[str],
                   role: str = CONTAINED_ROLE) -> list[str]:
    """`docker run` arguments for one lab process: `mounts` {name in IN: host folder}, every one read-only
    but "out"; `args` to the venv's Python."""
    volumes = [f"{host}:{IN[name]}:{'rw' if name == 'out' else 'ro'}" for name, host in mounts.items()]
    options = ["--rm", "--network=none", f"--user={NOBODY}", "--cap-drop=ALL", "--security-opt=no-new-privileges",
               "--read-only", "--tmpfs=/tmp:rw,exec,mode=1777", *(f"--volume={v}" for v in volumes),
               f"--workdir={workdir}", *(f"--env={k}={v}" for k, v in env.items())]
    return containers.argv("run", image, [f"{IN['venv']}/bin/python", *args], role=role, options=options)


def run_contained(env_dir: Path, tree: Path, cwd: Path, out: Path, args: list[str],
                  timeout: int, fixes_dir: Path) -> subprocess.CompletedProcess:
    """The lab's pytest in a container (see above); the container is removed by its id whatever happens."""
    prefix, python = python_of(env_dir)
    mounts = {"python": prefix, "env": env_dir, "venv": venv_shim(out.parent / "venv", python), "tree": tree,
              "lab": LAB_TESTS, "fixes": fixes_dir, "recipes": ROOT / "recipes", "out": out}
    workdir = IN["lab"]
    if cwd != LAB_TESTS:  # upstream's unit tests, from a copy of their folder
        mounts["cwd"], workdir = cwd, IN["cwd"]
    out.chmod(0o777)  # nobody writes here; its parent (a 0700 temporary folder) keeps everyone else out
    cache = out / "cache"
    if (paths.cache_dir() / "lab-models").is_dir():  # the tiny models the lab built before, copied: no mount
        shutil.copytree(paths.cache_dir() / "lab-models", cache / "lab-models", symlinks=False)
    cache.mkdir(exist_ok=True)
    for path in [cache, *cache.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o666)
    env = lab_env_vars(Path(IN["tree"]), Path(IN["lab"]), environ={}) | {
        "HOME": "/tmp", "COOKBOOK_CACHE": f"{IN['out']}/cache", "LD_LIBRARY_PATH": f"{IN['python']}/lib"}
    argv = contained_argv(standin.ROOTFS_IMAGE, mounts, workdir, env, pytest_args(f"{IN['out']}/{JUNIT}", args))
    # --rm removes it when it ends; a timeout or an interrupt ends only the client: removed by id then
    proc = containers.attached(argv, timeout=timeout, text=True, errors="replace")
    if proc.returncode in (125, 126, 127) and not (out / JUNIT).is_file():  # docker's own: it never ran
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise LabError(f"the fix lab's container did not start ({standin.ROOTFS_IMAGE}):\n{tail}",
                       hint="the lab's Python must run on that Debian; rebuild it with " + str(BUILD_SCRIPT))
    return proc


def parse_junit(path: Path, cwd: Path) -> dict[str, str]:
    """{node id: outcome} from pytest's xunit1 junit XML (file attribute relative to `cwd`); nothing from
    a file that is too big or not XML (a contained run's tree wrote it)."""
    out = {}
    try:
        if path.stat().st_size > JUNIT_LIMIT:
            return {}
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return {}
    for case in root.iter("testcase"):
        classname = case.get("classname", "")
        file = case.get("file") or classname.replace(".", "/") + ".py"
        module = file.removesuffix(".py").replace("/", ".")
        # xunit1 puts a test class after the module in `classname`: file::Class::test
        inner = classname[len(module) + 1:] if classname.startswith(module + ".") else ""
        node = "::".join([file, *([inner] if inner else []), case.get("name")])
        if case.find("skipped") is not None:
            out[node] = "skipped"
        elif case.find("failure") is not None or case.find("error") is not None:
            out[node] = "failed"
        else:
            out[node] = "passed"
    return out


def written_fixes(profile_name: str | None = None, fixes_dir: Path | None = None) -> list[str]:
    fixes_dir = fixes_dir or default_fixes_dir()
    profile = fixes.load_profile(release.profile_or_default(profile_name), fixes_dir)
    return [n for n in profile.order if (fixes_dir / n / "fix.yaml").is_file()]


def check_named(only: list[str] | None, profile_name: str, fixes_dir: Path | None = None) -> list[str] | None:
    """The fixes named for the lab (`--fix`, `--lab-fix`), each a written fix of the profile; a dry run
    refuses what the run would, before anything is laid out."""
    written = written_fixes(profile_name, fixes_dir)
    unknown = [n for n in only or [] if n not in written]
    if unknown:
        raise UsageError(f"no written fix of profile {profile_name} is named {', '.join(map(repr, unknown))[:200]}",
                         hint="name one of: " + ", ".join(written))
    return only


def upstream_tests_root(profile_name: str | None = None) -> Path:
    profile = fixes.load_profile(release.profile_or_default(profile_name), default_fixes_dir())
    gaudi, _ = upstream.require(fixes.pins_of(profile))
    return gaudi


def upstream_excluded(path: Path | None = None) -> dict[str, str]:
    """{node id or node id prefix: why it cannot run here} from cookbook/fixpack/lab/upstream-excluded.txt: each
    entry is under a `#` paragraph that gives its reason (a Gaudi kernel, a Hub download, ...)."""
    path = path or UPSTREAM_EXCLUDED
    out: dict[str, str] = {}
    why: list[str] = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line:  # a blank line ends a paragraph and its entries
            why = []
        elif line.startswith("#"):
            why.append(line.lstrip("#").strip())
        elif not why:
            raise LabError(f"{path}:{number}: {line} has no reason (a # paragraph right above its entries)")
        else:
            out[line] = " ".join(why)
    return out


def run_upstream(tree: Path, excluded: dict[str, str] | None = None, profile_name: str | None = None,
                 contained: bool = False) -> Run:
    """All of vllm-gaudi's own unit tests (from the upstream cache, at the pinned commit) on `tree`, but
    the excluded ones, with the "hpu" device and the Hub model they name standing in
    (cookbook/fixpack/lab/stubs/lab_hpu_device.py). They run from a copy of the tests folder, so the cached
    checkout's package never shadows the tree."""
    excluded = upstream_excluded() if excluded is None else excluded
    src = upstream_tests_root(profile_name)
    with tempfile.TemporaryDirectory(prefix="cookbook-upstream-tests.") as tmp:
        shutil.copytree(src / "tests", Path(tmp) / "tests")
        shutil.copy2(src / "pytest_compat.py", Path(tmp) / "pytest_compat.py")
        say(f"fix lab: vllm-gaudi's {UPSTREAM_TESTS} on {tree.name}, {len(excluded)} entries excluded")
        deselect = [arg for node in excluded for arg in ("--deselect", node)]
        return run(tree, [UPSTREAM_TESTS], cwd=Path(tmp),
                   extra=["-p", "lab_hpu_device", "-p", "pytest_compat", "--rootdir", ".", *deselect],
                   contained=contained)


@dataclass(frozen=True)
class Verdict:
    fix: str
    pristine: dict[str, str]
    patched: dict[str, str]

    @property
    def problems(self) -> list[str]:
        out = []
        if not self.patched:
            out.append(f"no lab tests (fixes/{self.fix}/{module_for(self.fix).name})")
        out += [f"{node} passes on the pristine tree: it cannot show the bug"
                for node, o in self.pristine.items() if o == "passed"]
        out += [f"{node} {o} on the patched tree" for node, o in self.patched.items() if o != "passed"]
        return out


def verdicts(pristine: Run, patched: Run, names: list[str]) -> list[Verdict]:
    a, b = pristine.by_fix(), patched.by_fix()
    return [Verdict(n, a.get(n, {}), b.get(n, {})) for n in names]


@dataclass(frozen=True)
class Alone:
    """A fix's lab tests on a tree with that fix alone (and what it requires) applied to pristine: a fix
    that passes only because another one is applied is a defect."""

    fix: str
    outcomes: dict[str, str]
    error: str = ""

    @property
    def problems(self) -> list[str]:
        if self.error:
            return [f"alone: {self.error}"]
        if not self.outcomes:
            return ["alone: no lab tests ran"]
        return [f"alone: {node} {o}" for node, o in self.outcomes.items() if o != "passed"]


def run_alone(root: Path, fix: str, profile_name: str, fixes_dir: Path | None,
              base_files: dict[tuple[str, str], bytes] | None = None) -> Alone:
    tree = root / fix
    try:
        make_tree(tree, profile_name, patched=True, fixes_dir=fixes_dir, only=[fix], base_files=base_files)
    except LabError as exc:
        return Alone(fix, {}, str(exc).splitlines()[0])
    try:
        contained = base_files is not None
        outcomes = run(tree, targets_of(modules_for(fix, fixes_dir), fixes_dir, contained), contained=contained,
                       fixes_dir=fixes_dir).by_fix().get(fix, {})
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    return Alone(fix, outcomes)


@dataclass
class Report:
    verdicts: list[Verdict]
    upstream: Run | None = None
    runs: tuple[Run, ...] = ()
    alone: list[Alone] = field(default_factory=list)

    @property
    def upstream_broken(self) -> list[str]:
        """Upstream's tests that did not pass (their own skips aside), and a run that collected none."""
        if self.upstream is None:
            return []
        if not self.upstream.outcomes:
            return [f"no upstream test ran (pytest exit {self.upstream.returncode}): "
                    + (self.upstream.output.strip().splitlines() or ["no output"])[-1]]
        return sorted(n for n, o in self.upstream.outcomes.items() if o not in ("passed", "skipped"))

    @property
    def ok(self) -> bool:
        return (not any(v.problems for v in self.verdicts) and not self.upstream_broken
                and not any(a.problems for a in self.alone))


# Lab runs at a time: each is a pytest process of its own (2 cores here).
LAB_WORKERS = 2


def lab(only: list[str] | None = None, keep: Path | None = None, with_upstream: bool = False,
        profile_name: str | None = None, fixes_dir: Path | None = None, dry_run: bool = False,
        alone: bool = False, base_files: dict[tuple[str, str], bytes] | None = None,
        workers: int = LAB_WORKERS) -> Report | None:
    """`invoke fixes.lab`: both trees, the lab's tests on each (the pack's own modules too when no fix
    is named), with `alone` each fix's tests on a tree with that fix alone, and (optionally) upstream's
    unit tests that pass on the pristine release run on the patched one. With `base_files` (a base
    image's target files, fixes.rebase) every lab process runs contained (`run_contained`). `workers`:
    lab pytests at a time (each keeps about one core busy)."""
    profile_name = release.profile_or_default(profile_name)
    names = check_named(only, profile_name, fixes_dir) or written_fixes(profile_name, fixes_dir)
    modules = [m for n in names for m in modules_for(n, fixes_dir)] + ([] if only else pack_modules())
    if not only and pack_modules():
        names = [*names, PACK]
    contained = base_files is not None
    targets = targets_of(modules, fixes_dir, contained)
    fix_names = [n for n in names if n != PACK]
    if dry_run:
        print(f"lay out the pristine and the patched release trees in {keep or 'a temporary folder'}")
        if contained:
            print(f"docker run --rm --network=none --user={NOBODY} --cap-drop=ALL --read-only [the lab's Python, "
                  f"cookbook/fixpack/lab and the tree read-only, a scratch folder] {standin.ROOTFS_IMAGE} "
                  f"python -m pytest -p lab_stubs {' '.join(targets)}  (on each tree)")
        else:
            print(f"{environment()}/bin/python -m pytest -p lab_stubs {' '.join(targets)}  (on each tree)")
        if alone:
            print(f"and each fix's modules on a tree with that fix alone (and what it requires): "
                  f"{len(fix_names)} trees")
        if with_upstream:
            print(f"and vllm-gaudi's {UPSTREAM_TESTS} on the patched tree, less the "
                  f"{len(upstream_excluded())} entries of {UPSTREAM_EXCLUDED.name}")
        return None
    if contained:
        standin.ensure_rootfs_image()
    # SIGTERM or Ctrl-C: every pytest's process group is killed and the temporary folder (the trees,
    # unless --keep) removed.
    with signals.interruptible(), tempfile.TemporaryDirectory(prefix="cookbook-lab.") as tmp:
        trees = lay_out_both(keep or Path(tmp), bool(keep), profile_name, fixes_dir, base_files)
        say(f"fix lab: {len(targets)} module(s) on the pristine and the patched tree"
            + (f", {len(fix_names)} fixes each alone on a pristine tree" if alone else "")
            + (", upstream's unit tests on the patched tree" if with_upstream else ""))
        # Every run is a pytest process of its own: `workers` at a time, the longest first.
        kinds = ("pristine", "patched")
        with signals.pool(workers) as pool:  # on an interrupt the queued runs are dropped
            tree_runs = [pool.submit(run, trees[kind], targets, contained=contained, fixes_dir=fixes_dir)
                         if targets else None
                         for kind in kinds]
            upstream_run = (pool.submit(run_upstream, trees["patched"], upstream_excluded(), profile_name, contained)
                            if with_upstream else None)
            # The fix-alone trees go in the temporary folder, even with --keep.
            alone_runs = [pool.submit(run_alone, Path(tmp), n, profile_name, fixes_dir, base_files)
                          for n in (fix_names if alone else [])]
            runs = [f.result() if f else Run(trees[kind]) for f, kind in zip(tree_runs, kinds, strict=True)]
            report = Report(verdicts(runs[0], runs[1], names), runs=tuple(runs),
                            alone=[f.result() for f in alone_runs],
                            upstream=upstream_run.result() if upstream_run else None)
    return report


def lay_out_both(root: Path, kept: bool, profile_name: str, fixes_dir: Path | None,
                 base_files: dict[tuple[str, str], bytes] | None = None) -> dict[str, Path]:
    """The pristine and the patched tree under `root`; a --keep folder's trees are replaced only when the
    lab laid them out (checked for both before either is touched)."""
    kinds = ("pristine", "patched")
    if kept:
        for kind in kinds:
            check_replaceable(root / kind)
    trees = {}
    for kind in kinds:
        dest = root / kind
        if dest.exists():
            shutil.rmtree(dest)
        say(f"fix lab: laying out the {kind} tree in {dest}")
        trees[kind] = make_tree(dest, profile_name, patched=kind == "patched", fixes_dir=fixes_dir,
                                base_files=base_files)
    return trees


def check_replaceable(dest: Path) -> None:
    """`--keep DIR` replaces DIR/pristine and DIR/patched: refuse anything there the lab did not lay out."""
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise UsageError(f"{dest} exists and is not a folder; not replacing it", hint="choose another --keep")
    if dest.is_dir() and any(dest.iterdir()) and not (dest / TREE_MARKER).is_file():
        raise UsageError(f"{dest} is not a tree the fix lab laid out (no {TREE_MARKER} in it); not replacing it",
                         hint="choose another --keep, or move that folder away")


def describe(report: Report) -> list[str]:
    lines = [f"{'fix':36} {'pristine (must fail)':22} {'patched (must pass)':20}"]
    for v in report.verdicts:
        def count(outcomes: dict[str, str], want: str) -> str:
            return f"{sum(o == want for o in outcomes.values())}/{len(outcomes)} {want}"

        lines.append(f"{v.fix:36} {count(v.pristine, 'failed'):22} {count(v.patched, 'passed'):20}"
                     + ("" if not v.problems else "  PROBLEM"))
        lines += [f"    {p}" for p in v.problems]
    if report.alone:
        bad = [a for a in report.alone if a.problems]
        lines.append(f"each fix alone on pristine: {len(report.alone) - len(bad)}/{len(report.alone)} pass")
        lines += [f"    {a.fix}: {p}" for a in bad for p in a.problems]
    if report.upstream is not None:
        outcomes = list(report.upstream.outcomes.values())
        lines.append(f"upstream unit tests on the patched tree: {outcomes.count('passed')} passed, "
                     f"{outcomes.count('skipped')} skipped by upstream, {len(report.upstream_broken)} broken")
        lines += [f"    broken: {n}" for n in report.upstream_broken]
    return lines


def lab_task(only: list[str] | None, keep: Path | None, with_upstream: bool, profile_name: str | None,
             dry_run: bool = False, alone: bool = False) -> None:
    """`invoke fixes.lab`: the lab, its report, then the verdict (PackFailure, exit 1)."""
    report = lab(only, keep, with_upstream, profile_name, dry_run=dry_run, alone=alone)
    if report is None:
        return
    for line in describe(report):
        print(line)
    if not report.ok:
        raise PackFailure("the fix lab found problems (above)")
