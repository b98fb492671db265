"""The offline stand-in base: lets the whole pipeline run where the vault images cannot be pulled.

A Debian 12 rootfs with python3 and git (mmdebstrap, from Debian's packages), cached as a tarball and
imported with `docker import`; on top, the site-packages layout of the real image: vLLM's Python files
from the PyPI wheel and vllm-gaudi's from the upstream cache, each with the install metadata a pip
install records. Images built on it are tagged and labelled `standin` and are never published.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from inimage import versions

from ..host import engine, signals, upstream
from ..host.errors import BuildError
from ..host.names import IMAGE_REPO, PROJECT, Label
from ..host.paths import FIXES, cache_dir
from ..host.progress import say
from ..recipe import fixes
from . import render

SUITE = "bookworm"
PYTHON = "3.11"
SITE_PACKAGES = f"/usr/local/lib/python{PYTHON}/dist-packages"
ROOTFS_IMAGE = f"{IMAGE_REPO}/standin-rootfs:{SUITE}"
PACKAGES = ["python3", "git", "patch"]
MIRROR = "http://deb.debian.org/debian"
# The stand-in's layout: a base image labelled with another is built again. 2: records of the dists the
# pack's fixes require (dependency_records).
LAYOUT = 2


def base_image(release: str) -> str:
    return f"{IMAGE_REPO}/standin-base:{release}"


def base(release: str) -> render.Base:
    return render.Base(base_image(release), None, True, PYTHON, SITE_PACKAGES)


def rootfs_tar() -> Path:
    return cache_dir() / "standin" / f"rootfs-{SUITE}.tar"


def mmdebstrap_command(out: Path, mirror: str = MIRROR, packages: list[str] = PACKAGES) -> list[str]:
    return ["mmdebstrap", "--variant=minbase", "--format=tar", "--include=" + ",".join(packages), "--mode=root",
            SUITE, str(out), mirror]


def ensure_rootfs(dry_run: bool = False) -> Path:
    tar = rootfs_tar()
    if tar.is_file():
        say(f"stand-in rootfs: cached at {tar}")
        return tar
    if dry_run:
        print(" ".join(mmdebstrap_command(tar)))
        return tar
    build_rootfs(tar, PACKAGES, "stand-in rootfs")
    return tar


def build_rootfs(tar: Path, packages: list[str], what: str) -> None:
    """A Debian rootfs with `packages` into the tarball `tar` (the stand-in's and the CPU base's)."""
    if not shutil.which("mmdebstrap"):
        raise BuildError("mmdebstrap is not installed", hint="apt-get install mmdebstrap")
    tar.parent.mkdir(parents=True, exist_ok=True)
    # Written beside the cache entry and renamed into place, so an interrupted run leaves no tarball.
    tmp = tar.with_name(tar.name.replace(".tar", ".partial.tar"))
    _remove(tmp)
    say(f"{what}: building Debian {SUITE} with {', '.join(packages)} (about half a minute)")
    proc = signals.run(mmdebstrap_command(tmp, packages=packages), capture_output=True, text=True)
    if proc.returncode != 0:
        _remove(tmp)
        raise BuildError("mmdebstrap failed: " + proc.stderr.strip()[-800:],
                         hint="check that Debian's package mirror is reachable (apt-get update)")
    tmp.rename(tar)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def ensure_rootfs_image(dry_run: bool = False) -> None:
    if not dry_run and engine.image_exists(ROOTFS_IMAGE):
        return
    tar = ensure_rootfs(dry_run)
    cmd = ["import", "--change", 'CMD ["python3"]', str(tar), ROOTFS_IMAGE]
    if dry_run:
        print("docker " + " ".join(cmd))
        return
    say(f"stand-in rootfs: importing {tar.name} as {ROOTFS_IMAGE}")
    engine.docker(*cmd)


def dist_info(site: Path, dist: str, version: str, top: str, installer: str = f"{PROJECT}-standin") -> None:
    """The install metadata pip records, by which importlib.metadata finds `dist` (also the CPU base's)."""
    info = site / f"{dist}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "top_level.txt").write_text(top + "\n")
    (info / "INSTALLER").write_text(installer + "\n")


# The console script pip makes from vLLM's entry point (the stand-in's and the CPU base's). The guard
# matters: vLLM starts its engine core with multiprocessing's spawn, which imports __main__ again.
VLLM_SCRIPT = ("#!/usr/bin/python3\nimport sys\nfrom vllm.entrypoints.cli.main import main\n\n"
               "if __name__ == '__main__':\n    sys.exit(main())\n")


def write_vllm_script(bin_dir: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "vllm"
    script.write_text(VLLM_SCRIPT)
    script.chmod(0o755)


def _scm_version_file(version: str, commit: str) -> str:
    """What setuptools-scm writes into vllm_gaudi/_version.py when installing from the tag's checkout."""
    parts = ", ".join(version.split("."))
    return (f"__version__ = version = '{version}'\n__version_tuple__ = version_tuple = ({parts})\n\n"
            f"__commit_id__ = commit_id = 'g{commit[:9]}'\n")


# vllm-gaudi's setup.py entry points: how vLLM finds the HPU platform and the plugin's registrations.
ENTRY_POINTS = """[vllm.general_plugins]
01.hpu_custom_utils = vllm_gaudi:register_utils
02.hpu_custom_ops = vllm_gaudi:register_ops
03.hpu_custom_models = vllm_gaudi:register_models
04.hpu_tool_parsers = vllm_gaudi:register_tool_parsers

[vllm.platform_plugins]
hpu = vllm_gaudi:register
"""


def lay_site_packages(pins: upstream.Pins, site: Path) -> None:
    """The release's two packages laid into `site` as a pip install lays them (also the fix lab's trees)."""
    gaudi_src, vllm_src = upstream.require(pins)
    shutil.copytree(vllm_src / "vllm", site / "vllm")
    for info in vllm_src.glob("vllm-*.dist-info"):
        shutil.copytree(info, site / info.name)
    shutil.copytree(gaudi_src / "vllm_gaudi", site / "vllm_gaudi")
    version = pins.dist_version
    (site / "vllm_gaudi" / "_version.py").write_text(_scm_version_file(version, pins.vllm_gaudi_commit))
    dist_info(site, "vllm_gaudi", version, "vllm_gaudi")
    (site / f"vllm_gaudi-{version}.dist-info" / "entry_points.txt").write_text(ENTRY_POINTS)


def vllm_requirement(metadata: str, dist: str) -> str:
    """vLLM's own range for `dist` from its METADATA's Requires-Dist ("<1.0.0,>=0.2.1"), markers dropped; ""
    when vLLM does not require it."""
    for line in metadata.splitlines():
        if line.startswith("Requires-Dist:"):
            spec = line.split(":", 1)[1].split(";", 1)[0].strip()
            name = re.match(r"[A-Za-z0-9_.-]+", spec)
            if name and name.group(0).lower().replace("_", "-") == dist.lower().replace("_", "-"):
                return spec[name.end():].strip().strip("()")
    return ""


def floor_version(ranges: list[str]) -> str | None:
    """The lowest version every range accepts, among the versions their `>=` and `==` clauses name."""
    named = [v for r in ranges if r for op, v in ((c.strip()[:2], c.strip()[2:]) for c in r.split(","))
             if op in (">=", "==")]
    ok = [v for v in named if all(not r or versions.in_range(v, r) for r in ranges)]
    return min(ok, key=versions.version_key) if ok else None


def dependency_records(dists: dict[str, list[str]], vllm_metadata: str, site: Path) -> dict[str, str]:
    """What the pack's fixes require of the base beyond its two packages (xgrammar), recorded as installed at
    the lowest version vLLM's own requirement and every fix's range accept. The stand-in holds no vLLM
    dependency (no torch, nothing compiled), only the layout the applier checks: a build on the real base
    checks the version that base has. Refused when no version fits them all."""
    out = {}
    for dist, ranges in sorted(dists.items()):
        want = [vllm_requirement(vllm_metadata, dist), *ranges]
        version = floor_version(want)
        if version is None:
            raise BuildError(f"no version of {dist} fits vLLM's {want[0] or 'none'} and the fixes' {ranges}")
        dist_info(site, dist, version, dist)
        out[dist] = version
    return out


def pack_dists(profile: str) -> dict[str, list[str]]:
    """Each distribution the profile's written fixes require, with every range that asks for it: the
    checkout's own pack (the release's), whatever pack COOKBOOK_FIXES_DIR points a build at."""
    out: dict[str, list[str]] = {}
    for name in fixes.load_profile(profile, FIXES).order:
        if name in fixes.fix_names(FIXES):
            for dist, range_ in fixes.load_fix(name, FIXES).dists.items():
                out.setdefault(dist, []).append(range_)
    return out


def stage_context(pins: upstream.Pins, dest: Path, profile: str) -> None:
    site = dest / "site-packages"
    lay_site_packages(pins, site)
    metadata = next(site.glob("vllm-*.dist-info/METADATA")).read_text()
    records = dependency_records(pack_dists(profile), metadata, site)
    write_vllm_script(dest / "bin")  # it needs torch, which a stand-in lacks: there for the layout
    (dest / "Dockerfile").write_text(render.templates().get_template("standin.Dockerfile.j2").render(
        release=pins.vllm_gaudi_version, vllm_version=pins.vllm_version, gaudi_commit=pins.vllm_gaudi_commit,
        rootfs_image=ROOTFS_IMAGE, site_packages=SITE_PACKAGES, layout=LAYOUT, layout_label=Label.STANDIN_LAYOUT,
        records=records))


def ensure(pins: upstream.Pins, profile: str, dry_run: bool = False, rebuild: bool = False) -> render.Base:
    """The stand-in base image for a release, built if missing or of an older layout (a warm rerun takes
    seconds)."""
    image = base_image(pins.vllm_gaudi_version)
    if not dry_run:
        upstream.require(pins)  # refuse early, naming the command that fills the cache
        engine.require_daemon()
        if not rebuild and engine.image_exists(image):
            if (engine.inspect(image)["Config"]["Labels"] or {}).get(Label.STANDIN_LAYOUT) == str(LAYOUT):
                say(f"stand-in base: {image} is present")
                return base(pins.vllm_gaudi_version)
            say(f"stand-in base: {image} is of an older layout; building it again")
    ensure_rootfs_image(dry_run)
    if dry_run:
        print(f"stage site-packages from {upstream.root()} and docker build -t {image} <context>")
        return base(pins.vllm_gaudi_version)
    with tempfile.TemporaryDirectory(prefix="cookbook-standin.") as tmp:
        stage_context(pins, Path(tmp), profile)
        say(f"stand-in base: building {image}")
        code, _ = engine.stream("build", "-t", image, tmp)
        if code != 0:
            raise BuildError(f"building the stand-in base {image} failed (see the log above)")
    return base(pins.vllm_gaudi_version)
