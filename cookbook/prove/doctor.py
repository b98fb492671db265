"""`invoke doctor`: can this host serve this recipe? Check by check, what would stop
`docker run --runtime=habana` of the recipe's image.

Reading the host and judging it are kept apart: `read()` runs the commands and probes (hl-smi -q,
docker info, a write in the Hugging Face cache, a bind of the port, the image and its evidence file)
and keeps what they said as plain data (`Readings`, JSON); every check is a pure function of those
readings and the recipe. `--record DIR` saves the readings of a host, `--readings FILE` judges saved
ones; the tests drive each check with good and bad readings.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..host import grammar
from ..host.errors import CheckFailure, HostError, UsageError, printable
from ..host.names import HF_CACHE_HOST, HF_CACHE_IN_IMAGE, Label
from ..recipe import hardware
from ..recipe.recipes import LoadedRecipe

OK, WARN, FAIL = "ok", "warn", "FAIL"
SHM = "/dev/shm"  # what `docker run --ipc=host` shares with the container
RUNTIME_HINT = ('register it in /etc/docker/daemon.json: "runtimes": {"habana": {"path": '
                '"/usr/bin/habana-container-runtime"}} (package habanalabs-container-runtime), then restart docker')


@dataclass(frozen=True)
class Readings:
    """What the host said. Each part is None when it could not be read at all."""

    hl_smi: dict | None = None  # {"rc": int, "out": str} of `hl-smi -q`; None: hl-smi is not installed
    docker_info: dict | None = None  # `docker info --format '{{json .}}'`; None: no daemon answers
    hf_cache: dict = field(default_factory=dict)  # {"path", "writable", "error"}
    port: dict = field(default_factory=dict)  # {"port", "free", "error"}
    shm: dict = field(default_factory=dict)  # {"path", "writable", "error"}: the host's /dev/shm
    image: dict = field(default_factory=dict)  # {"ref", "present", "id", "labels", "evidence"}

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Readings:
        return cls(**json.loads(text))


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str
    mend: str = ""


# ----------------------------------------------------------------------------------------- hl-smi


@dataclass(frozen=True)
class Card:
    product: str
    firmware: str  # the Gaudi software release in the firmware's version, e.g. 1.24.1
    total_mb: int
    free_mb: int


def parse_hl_smi(out: str) -> tuple[str | None, list[Card]]:
    """(driver release, cards) from `hl-smi -q`: the driver's `Driver Version : 1.24.1-abc`, and per
    card its Product Name, `Firmware [SPI] Version : ... hl-gaudi2-1.24.1-fw-...` and Memory Usage."""
    driver = re.search(r"^Driver Version\s*:\s*(\d+\.\d+\.\d+)", out, re.M)
    cards = []
    for block in re.split(r"^\[\d+\] AIP", out, flags=re.M)[1:]:
        product = re.search(r"Product Name\s*:\s*(\S+)", block)
        firmware = re.search(r"Firmware \[SPI\] Version\s*:.*?hl-gaudi\d*-(\d+\.\d+\.\d+)", block)
        usage = block.split("Memory Usage", 1)[1] if "Memory Usage" in block else ""
        total = re.search(r"^\s*Total\s*:\s*(\d+)\s*MB", usage, re.M)
        free = re.search(r"^\s*Free\s*:\s*(\d+)\s*MB", usage, re.M)
        cards.append(Card(product.group(1) if product else "?", firmware.group(1) if firmware else "?",
                          int(total.group(1)) if total else 0, int(free.group(1)) if free else 0))
    return (driver.group(1) if driver else None), cards


def gaudi_absent(r: Readings) -> str | None:
    """Why this is not a Gaudi host, in one line; None when it is one."""
    if r.hl_smi is None:
        return "no Gaudi on this host: hl-smi (the Habana driver's tool) is not installed; nothing else was checked"
    _, cards = parse_hl_smi(r.hl_smi["out"])
    if r.hl_smi["rc"] != 0 or not cards:
        said = (r.hl_smi["out"].strip().splitlines() or ["no output"])[-1][:160]
        return f"no Gaudi on this host: hl-smi -q finds no card ({said}); nothing else was checked"
    return None


def _release_check(name: str, found: str | None, want: str, what: str) -> Check:
    if found is None or found == "?":
        return Check(name, FAIL, f"hl-smi -q shows no {what} version", "reinstall the Habana driver and firmware")
    if found == want:
        return Check(name, OK, f"{what} {found}")
    if found.split(".")[:2] == want.split(".")[:2]:
        return Check(name, WARN, f"{what} {found}, the recipe was validated on {want} (same minor release)")
    return Check(name, FAIL, f"{what} {found}, the image is built for Gaudi software {want}",
                 f"install the {want} driver and firmware, or use a recipe for {found}")


def check_driver(r: Readings, want: str) -> Check:
    driver, _ = parse_hl_smi(r.hl_smi["out"])
    return _release_check("driver", driver, want, "driver")


def check_firmware(r: Readings, want: str) -> Check:
    _, cards = parse_hl_smi(r.hl_smi["out"])
    found = sorted({c.firmware for c in cards})
    if len(found) > 1:
        return Check("firmware", FAIL, f"the cards run different firmware: {', '.join(found)}",
                     f"update every card's firmware to {want} (hl-fw-loader)")
    return _release_check("firmware", found[0], want, "firmware")


def check_cards(r: Readings, cards: int, accelerator: str) -> Check:
    if not hardware.is_card(accelerator):  # a CPU recipe (the tests' CPU image) needs no card
        return Check("cards", OK, f"a {accelerator} recipe needs no Gaudi card")
    _, found = parse_hl_smi(r.hl_smi["out"])
    right = [c for c in found if c.product.startswith(hardware.ACCELERATORS[accelerator].products)]
    if len(right) < cards:
        others = sorted({c.product for c in found} - {c.product for c in right})
        return Check("cards", FAIL, f"{len(right)} {accelerator} card(s) visible, the recipe needs {cards}"
                     + (f" (also seen: {', '.join(others)})" if others else ""),
                     f"serve on a host with {cards} {accelerator} card(s)")
    return Check("cards", OK, f"{len(right)} {accelerator} card(s) visible, the recipe needs {cards}")


def check_memory(r: Readings, cards: int, utilization: float) -> Check:
    """vLLM takes `gpu_memory_utilization` of each card's memory: that much must be free on enough cards."""
    _, found = parse_hl_smi(r.hl_smi["out"])
    free = sorted(((c.free_mb / c.total_mb if c.total_mb else 0.0), c.free_mb) for c in found)[::-1]
    enough = [f for f in free if f[0] >= utilization]
    if len(enough) < cards:
        best = ", ".join(f"{mb} MB ({share:.0%})" for share, mb in free[:cards]) or "none"
        return Check("device memory", FAIL, f"{cards} card(s) need {utilization:.0%} of their memory free; "
                     f"the freest have {best}", "stop what runs on the cards (hl-smi shows their processes)")
    return Check("device memory", OK, f"{len(enough)} card(s) with {utilization:.0%} or more of their memory free")


# ------------------------------------------------------------------------------------ the rest


def check_runtime(r: Readings) -> Check:
    if r.docker_info is None:
        return Check("habana runtime", FAIL, "no Docker daemon answers", "start docker")
    runtimes = r.docker_info.get("Runtimes") or {}
    if "habana" not in runtimes:
        return Check("habana runtime", FAIL, "Docker has no `habana` runtime (it has: "
                     + (", ".join(sorted(runtimes)) or "none") + ")", RUNTIME_HINT)
    return Check("habana runtime", OK, f"habana -> {runtimes['habana'].get('path', '?')}")


# The two probes the reader makes: (reading, its yes/no key, what a no says, what a yes says, the mend).
PROBES = {
    "hugging face cache": ("hf_cache", "writable", "{path} is not writable: {error}", "{path} is writable",
                           f"make it writable, or mount another with -v DIR:{HF_CACHE_IN_IMAGE}"),
    "port": ("port", "free", "port {port} is taken: {error}", "port {port} is free",
             "stop what listens there, or run the image with -p OTHER:PORT"),
    # Tensor parallel runs a worker process per card, and they share tensors through shared memory (vLLM's
    # docs: why its `docker run` needs --ipc=host), which --ipc=host takes from the host's /dev/shm.
    "shared memory": ("shm", "writable", "{path} is not writable: {error}; the tensor-parallel workers share "
                      "tensors through it (--ipc=host hands the host's to the container)", "{path} is writable",
                      f"mount a tmpfs there: mount -t tmpfs tmpfs {SHM}"),
}


def check_probe(r: Readings, name: str) -> Check:
    part, key, bad, fine, mend = PROBES[name]
    probe = defaultdict(lambda: "?", {k: v for k, v in getattr(r, part).items() if v is not None})
    if not probe.get(key):
        return Check(name, FAIL, bad.format_map(probe), mend)
    return Check(name, OK, fine.format_map(probe))


def check_shm(r: Readings, tensor_parallel: int) -> Check:
    if tensor_parallel <= 1:
        return Check("shared memory", OK, "one card: no tensor-parallel workers to share memory between")
    return check_probe(r, "shared memory")


def check_image(r: Readings, loaded: LoadedRecipe) -> Check:
    i = r.image
    if not i.get("present"):
        from ..image.render import vault_base

        return Check("image", FAIL, f"{i.get('ref')} is not on this Docker engine",
                     f"invoke build --recipe {loaded.id}, or docker pull it; before a first build on this host, "
                     f"check the pack against its base: invoke fixes.verify --base {vault_base(loaded).from_ref}")
    labels = i.get("labels") or {}
    if labels.get(Label.RECIPE_HASH) != loaded.hash:
        return Check("image", FAIL, f"{i['ref']} was built from another version of recipe {loaded.id}",
                     f"invoke build --recipe {loaded.id}")
    if labels.get(Label.STANDIN) == "true":
        return Check("image", FAIL, f"{i['ref']} is built on the stand-in base: it serves no model",
                     f"invoke build --recipe {loaded.id} (without --standin) on a host that reaches the vault")
    ev = i.get("evidence")
    if not ev:
        return Check("image", FAIL, f"{i['ref']} has no image-check evidence", f"invoke test --recipe {loaded.id}")
    if ev.get("unreadable"):
        return Check("image", FAIL, ev["unreadable"], f"invoke test --recipe {loaded.id}")
    if ev.get("image_id") != i.get("id") or not ev.get("passed"):
        why = "is for another image" if ev.get("image_id") != i.get("id") else "says the checks failed"
        return Check("image", FAIL, f"the evidence of {i['ref']} {why}", f"invoke test --recipe {loaded.id}")
    return Check("image", OK, f"{i['ref']} ({i['id'][:19]}) passed its checks on {ev.get('started', '?')}")


def judge(r: Readings, loaded: LoadedRecipe) -> list[Check]:
    """Every check, on a Gaudi host (see gaudi_absent first)."""
    rec = loaded.recipe
    want = rec.base.gaudi_sw
    return [
        check_runtime(r),
        check_driver(r, want),
        check_firmware(r, want),
        check_cards(r, rec.hardware.cards, rec.hardware.accelerator),
        check_memory(r, rec.hardware.cards, rec.serve.gpu_memory_utilization or 0.9),
        check_probe(r, "hugging face cache"),
        check_probe(r, "port"),
        check_shm(r, rec.hardware.tensor_parallel),
        check_image(r, loaded),
    ]


# --------------------------------------------------------------------------------- reading a host


COMMANDS = ["hl-smi -q", "docker info --format '{{json .}}'", "write and remove a file in the Hugging Face cache",
            "bind 0.0.0.0:PORT and release it", "write and remove a file in /dev/shm", "docker image inspect IMAGE",
            "read the image's evidence file"]


def hf_cache_dir() -> Path:
    home = os.environ.get("HF_HOME")
    return Path(home) if home else Path(HF_CACHE_HOST).expanduser()


def _hl_smi() -> dict | None:
    exe = shutil.which("hl-smi")
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, "-q"], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return {"rc": -1, "out": "hl-smi -q did not answer within 60 s"}
    return {"rc": proc.returncode, "out": proc.stdout + proc.stderr}


def _docker_info() -> dict | None:
    from ..host import engine

    try:
        out = engine.docker("info", "--format", "{{json .}}", check=False, timeout=30)
    except Exception:  # EngineError: no client, or no answer
        return None
    if out.returncode != 0:
        return None
    info = json.loads(out.stdout)
    return {k: info.get(k) for k in ("Runtimes", "DefaultRuntime", "ServerVersion")}  # nothing private


def _writable(path: Path, make: bool = False) -> dict:
    """Whether a file can be written in `path` (made first with `make`): one is, and removed."""
    try:
        if make:
            path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".cookbook-doctor."):
            pass
        return {"path": str(path), "writable": True, "error": None}
    except OSError as exc:
        return {"path": str(path), "writable": False, "error": exc.strerror or str(exc)}


def _hf_cache() -> dict:
    return _writable(hf_cache_dir(), make=True)


def _port(port: int) -> dict:
    """Whether `docker run -p PORT:PORT` could bind: it binds every interface, so this does too, briefly."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))
            return {"port": port, "free": True, "error": None}
        except OSError as exc:
            return {"port": port, "free": False, "error": exc.strerror or str(exc)}


def _image(ref: str) -> dict:
    from ..host import engine
    from ..image import imagecheck

    try:
        info = engine.inspect(ref)
    except Exception:  # EngineError: absent, or no daemon
        return {"ref": ref, "present": False}
    path = imagecheck.evidence_path(info["Id"])
    try:
        evidence = imagecheck.read_evidence(path) if path.is_file() else None
    except CheckFailure as exc:  # a truncated or hand-broken file: said by the image check, not a traceback
        evidence = {"unreadable": exc.what}
    return {"ref": ref, "present": True, "id": info["Id"], "labels": info["Config"].get("Labels") or {},
            "evidence": evidence and {k: evidence.get(k)
                                      for k in ("image_id", "passed", "started", "recipe_hash", "unreadable")}}


def read(loaded: LoadedRecipe, image: str) -> Readings:
    """The host's readings. Without Gaudi only hl-smi is asked: nothing else would matter."""
    hl = _hl_smi()
    partial = Readings(hl_smi=hl)
    if gaudi_absent(partial):
        return partial
    return Readings(hl_smi=hl, docker_info=_docker_info(), hf_cache=_hf_cache(), port=_port(loaded.recipe.image.port),
                    shm=_writable(Path(SHM)), image=_image(image))


def shape_problem(r: Readings) -> str | None:
    """What in saved readings is not shaped as `read()` writes them (the checks index them so), or None."""
    def whole(v):
        return isinstance(v, int) and not isinstance(v, bool)

    hl, info, image = r.hl_smi, r.docker_info, r.image
    if hl is not None and not (isinstance(hl, dict) and whole(hl.get("rc")) and isinstance(hl.get("out"), str)):
        return 'hl_smi must be null or {"rc": a whole number, "out": text}'
    if info is not None and not (isinstance(info, dict) and isinstance(info.get("Runtimes") or {}, dict)
                                 and all(isinstance(v, dict) for v in (info.get("Runtimes") or {}).values())):
        return "docker_info must be null or an object whose Runtimes maps names to objects"
    for part in ("hf_cache", "port", "shm", "image"):
        if not isinstance(getattr(r, part), dict):
            return f"{part} must be an object"
    if image.get("present") and not (isinstance(image.get("ref"), str) and isinstance(image.get("id"), str)
                                     and isinstance(image.get("labels") or {}, dict)
                                     and isinstance(image.get("evidence") or {}, dict)):
        return "image must name its ref and id as text, its labels and evidence as objects"
    return None


def load_readings(path: Path) -> Readings:
    """Saved readings, or one line saying why the file is not such (a file the user gave: exit 2)."""
    try:
        r = Readings.from_json(path.read_text())
    except (OSError, ValueError, TypeError) as exc:
        problem = str(exc)
    else:
        problem = shape_problem(r)
        if problem is None:
            return r
    raise UsageError(f"{path} is not a readings file of `invoke doctor --record`: {problem}")


def table(checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        lines.append(f"{c.status:4}  {c.name:{width}}  {c.detail}")
        if c.mend and c.status != OK:
            lines.append(f"{'':4}  {'':{width}}  fix: {c.mend}")
    return "\n".join(lines)


def blockers(checks: list[Check] | None, but: tuple[str, ...] = ()) -> list[str]:
    """The names of the failed checks, those in `but` aside."""
    return [c.name for c in checks or [] if c.status == FAIL and c.name not in but]


def require_ready(loaded: LoadedRecipe, checks: list[Check] | None, but: tuple[str, ...] = ()) -> None:
    """The doctor's verdict: HostError (exit 1) naming every failed check but those in `but`."""
    failed = blockers(checks, but)
    if failed:
        raise HostError(f"this host cannot serve {loaded.id} yet: {', '.join(failed)}")


def task(recipe: str, image: str | None, repo: str, record: Path | None, readings: Path | None,
         dry_run: bool = False) -> None:
    """`invoke doctor`: the table for the recipe and its image (default its moving tag), then the verdict."""
    from ..image import steps
    from ..recipe import recipes

    loaded = recipes.load(recipe)
    checks = run(loaded, image or steps.moving_tag(loaded, repo, False), readings, record, dry_run)
    require_ready(loaded, checks)


def run(loaded: LoadedRecipe, image: str, readings: Path | None = None, record: Path | None = None,
        dry_run: bool = False) -> list[Check] | None:
    """Judge the host (or saved readings) and print the table; raises HostError on a host without Gaudi.
    `require_ready` turns a FAIL into the verdict."""
    said = grammar.image_problem(image)
    if said:  # it reaches `docker image inspect IMAGE`: a value such as --help would be taken as a flag
        raise UsageError(f"--image {printable(image)}: {said}")
    if dry_run:
        for cmd in COMMANDS:
            print(cmd.replace("IMAGE", image).replace("PORT", str(loaded.recipe.image.port)))
        return None
    r = load_readings(readings) if readings else read(loaded, image)
    if record:
        record.mkdir(parents=True, exist_ok=True)
        tmp = record / ".readings.json.tmp"
        tmp.write_text(r.to_json())
        tmp.replace(record / "readings.json")
    absent = gaudi_absent(r)
    if absent:
        raise HostError(absent)
    checks = judge(r, loaded)
    print(table(checks))
    return checks
