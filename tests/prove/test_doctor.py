"""invoke doctor: every check driven with good and bad readings (what hl-smi, docker info and the probes
said), the readers on this host, and the one-line refusal where there is no Gaudi."""

import dataclasses
import json
import shutil
import socket
import subprocess
import sys

import pytest

from cookbook.host.errors import CheckFailure, HostError, UsageError
from cookbook.host.paths import ROOT
from cookbook.image import imagecheck
from cookbook.prove import doctor
from cookbook.recipe import recipes

DATA = ROOT / "tests" / "data" / "doctor"
HL_SMI = (DATA / "hl-smi-q.gaudi2x2.txt").read_text()
LOADED = recipes.load("qwen3.5-27b-fp8")
IMAGE_ID = "sha256:" + "1" * 64


def good() -> doctor.Readings:
    return doctor.Readings(
        hl_smi={"rc": 0, "out": HL_SMI},
        docker_info={"Runtimes": {"habana": {"path": "/usr/bin/habana-container-runtime"}, "runc": {"path": "runc"}},
                     "DefaultRuntime": "runc", "ServerVersion": "27.0.3"},
        hf_cache={"path": "/root/.cache/huggingface", "writable": True, "error": None},
        port={"port": 8000, "free": True, "error": None},
        shm={"path": "/dev/shm", "writable": True, "error": None},
        image={"ref": "gaudi-cookbook/qwen3.5-27b-fp8:v0.26.0-x", "present": True, "id": IMAGE_ID,
               "labels": {"cookbook.recipe.hash": LOADED.hash, "cookbook.standin": "false"},
               "evidence": {"image_id": IMAGE_ID, "passed": True, "started": "2026-12-02T17:00:00Z"}},
    )


def hl(text: str) -> dict:
    return {"rc": 0, "out": text}


def with_(**parts) -> doctor.Readings:
    return dataclasses.replace(good(), **parts)


def image(**changes) -> dict:
    return {**good().image, **changes}


def test_parse_hl_smi():
    driver, cards = doctor.parse_hl_smi(HL_SMI)
    assert driver == "1.24.1"
    assert cards == [doctor.Card("HL-225", "1.24.1", 98304, 97536)] * 2


def test_good_host_passes_every_check():
    checks = doctor.judge(good(), LOADED)
    assert [c.status for c in checks] == [doctor.OK] * 9, doctor.table(checks)
    assert [c.name for c in checks] == ["habana runtime", "driver", "firmware", "cards", "device memory",
                                        "hugging face cache", "port", "shared memory", "image"]


BAD = [
    ("no daemon", with_(docker_info=None), "habana runtime", doctor.FAIL, "no Docker daemon"),
    ("runc only", with_(docker_info={"Runtimes": {"runc": {"path": "runc"}}}), "habana runtime", doctor.FAIL,
     "has no `habana` runtime (it has: runc)"),
    ("old driver", with_(hl_smi=hl(HL_SMI.replace("Driver Version                          : 1.24.1",
                                                  "Driver Version                          : 1.22.0"))),
     "driver", doctor.FAIL, "driver 1.22.0, the image is built for Gaudi software 1.24.1"),
    ("patch-level driver", with_(hl_smi=hl(HL_SMI.replace("Driver Version                          : 1.24.1",
                                                          "Driver Version                          : 1.24.0"))),
     "driver", doctor.WARN, "same minor release"),
    ("no driver line", with_(hl_smi=hl(HL_SMI.replace("Driver Version", "Drv"))), "driver", doctor.FAIL,
     "no driver version"),
    ("old firmware", with_(hl_smi=hl(HL_SMI.replace("hl-gaudi2-1.24.1-fw", "hl-gaudi2-1.21.0-fw"))), "firmware",
     doctor.FAIL, "firmware 1.21.0"),
    ("mixed firmware", with_(hl_smi=hl(HL_SMI.replace("Preboot version hl-gaudi2-1.24.1",
                                                      "Preboot version hl-gaudi2-1.23.0", 1))),
     "firmware", doctor.FAIL, "different firmware: 1.23.0, 1.24.1"),
    ("gaudi3 cards", with_(hl_smi=hl(HL_SMI.replace("HL-225", "HL-325L"))), "cards", doctor.FAIL,
     "0 gaudi2 card(s) visible, the recipe needs 1 (also seen: HL-325L)"),
    ("cards busy", with_(hl_smi=hl(HL_SMI.replace("97536 MB", "20000 MB"))), "device memory", doctor.FAIL,
     "need 85% of their memory free; the freest have 20000 MB (20%)"),
    ("cache read-only", with_(hf_cache={"path": "/hf", "writable": False, "error": "Read-only file system"}),
     "hugging face cache", doctor.FAIL, "/hf is not writable: Read-only file system"),
    ("port taken", with_(port={"port": 8000, "free": False, "error": "Address already in use"}), "port",
     doctor.FAIL, "port 8000 is taken: Address already in use"),
    ("no shared memory, one card", with_(shm={"path": "/dev/shm", "writable": False, "error": "x"}),
     "shared memory", doctor.OK, "one card"),
    ("no image", with_(image={"ref": "x", "present": False}), "image", doctor.FAIL, "not on this Docker engine"),
    ("other recipe version", with_(image=image(labels={"cookbook.recipe.hash": "0" * 64})), "image", doctor.FAIL,
     "another version of recipe"),
    ("stand-in", with_(image=image(labels={"cookbook.recipe.hash": LOADED.hash, "cookbook.standin": "true"})),
     "image", doctor.FAIL, "stand-in base"),
    ("never checked", with_(image=image(evidence=None)), "image", doctor.FAIL, "no image-check evidence"),
    ("checks failed", with_(image=image(evidence={"image_id": IMAGE_ID, "passed": False})), "image", doctor.FAIL,
     "says the checks failed"),
    ("evidence of another image", with_(image=image(evidence={"image_id": "sha256:" + "2" * 64, "passed": True})),
     "image", doctor.FAIL, "is for another image"),
]


@pytest.mark.parametrize("why,readings,name,status,said", BAD, ids=[b[0] for b in BAD])
def test_each_bad_reading_fails_its_check_only(why, readings, name, status, said):
    checks = {c.name: c for c in doctor.judge(readings, LOADED)}
    assert checks[name].status == status and said in checks[name].detail, checks[name]
    if status == doctor.FAIL:
        assert checks[name].mend  # every failure says how to mend it
    assert all(c.status == doctor.OK for n, c in checks.items() if n != name)


@pytest.mark.parametrize("hl_smi,said", [
    (None, "hl-smi (the Habana driver's tool) is not installed"),
    ({"rc": 1, "out": "hl-smi: No devices were found\n"}, "finds no card (hl-smi: No devices were found)"),
    ({"rc": 0, "out": HL_SMI.split("[0] AIP")[0]}, "finds no card"),
])
def test_no_gaudi_is_one_line(hl_smi, said):
    r = doctor.Readings(hl_smi=hl_smi)
    line = doctor.gaudi_absent(r)
    assert said in line and "\n" not in line
    assert doctor.gaudi_absent(good()) is None


def test_readings_round_trip_and_judge_saved_ones(tmp_path, capsys):
    (tmp_path / "readings.json").write_text(good().to_json())
    checks = doctor.run(LOADED, "img", readings=tmp_path / "readings.json", record=tmp_path / "again")
    assert all(c.status == doctor.OK for c in checks)
    assert doctor.Readings.from_json((tmp_path / "again" / "readings.json").read_text()) == good()
    assert "ok    habana runtime" in capsys.readouterr().out


def invoke(*args):
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True)


def test_task_on_saved_readings(tmp_path):
    bad = with_(port={"port": 8000, "free": False, "error": "Address already in use"})
    (tmp_path / "r.json").write_text(bad.to_json())
    out = invoke("doctor", "--readings", str(tmp_path / "r.json"))
    assert out.returncode == 1 and "cannot serve qwen3.5-27b-fp8 yet: port" in out.stderr
    assert "FAIL  port" in out.stdout and "fix: stop what listens there" in out.stdout


def test_task_without_gaudi_says_so_in_one_line():
    if shutil.which("hl-smi"):
        pytest.skip("hl-smi is installed: this host has Gaudi, the one-line refusal is for hosts without it")
    here = invoke("doctor")
    assert here.returncode == 1 and here.stdout == ""
    assert here.stderr.strip().count("\n") == 0 and "no Gaudi on this host" in here.stderr


def test_readers_on_this_host(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert doctor._hf_cache() == {"path": str(tmp_path / "hf"), "writable": True, "error": None}
    assert list((tmp_path / "hf").iterdir()) == []  # the probe file is gone
    (tmp_path / "a-file").write_text("")  # not a directory: unwritable even for root
    monkeypatch.setenv("HF_HOME", str(tmp_path / "a-file" / "hf"))
    bad = doctor._hf_cache()
    assert bad["writable"] is False and bad["error"]


    assert doctor._writable(tmp_path) == {"path": str(tmp_path), "writable": True, "error": None}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".cookbook-doctor.")]  # the probe file is gone


# --- a recipe for four cards (tests/multicard.py) ---------------------------------------------------------

@pytest.fixture(scope="module")
def four_cards(tmp_path_factory):
    from .. import multicard

    root = tmp_path_factory.mktemp("tp4") / "recipes"
    return recipes.load(multicard.write(root, **{"hardware.accelerator": "gaudi2"}), root)


# (why, the readings' changes, check, status, what it says): the good host has two Gaudi 2 cards
FOUR = [
    ("two cards of four", {}, "cards", doctor.FAIL, "2 gaudi2 card(s) visible, the recipe needs 4"),
    ("two cards' memory for four", {}, "device memory", doctor.FAIL, "4 card(s) need 85% of their memory free"),
    ("shared memory writable", {}, "shared memory", doctor.OK, "/dev/shm is writable"),
    ("shared memory read-only", {"shm": {"path": "/dev/shm", "writable": False, "error": "Read-only file system"}},
     "shared memory", doctor.FAIL, "/dev/shm is not writable: Read-only file system; the tensor-parallel workers"),
    ("no shared memory", {"shm": {"path": "/dev/shm", "writable": False, "error": "No such file or directory"}},
     "shared memory", doctor.FAIL, "No such file or directory"),
]


@pytest.mark.parametrize("why,changes,name,status,said", FOUR, ids=[f[0] for f in FOUR])
def test_a_four_card_recipe(four_cards, why, changes, name, status, said):
    checks = {c.name: c for c in doctor.judge(with_(**changes), four_cards)}
    assert checks[name].status == status and said in checks[name].detail, checks[name]
    assert status == doctor.OK or checks[name].mend


def test_a_four_card_recipe_on_four_cards(four_cards):
    cards = HL_SMI.split("[0] AIP")[1]
    four = hl(HL_SMI.split("[0] AIP")[0] + "".join(f"[{i}] AIP" + cards for i in range(4)))
    checks = {c.name: c for c in doctor.judge(with_(hl_smi=four), four_cards)}
    assert checks["cards"].status == checks["device memory"].status == doctor.OK, doctor.table(list(checks.values()))


def test_port_reader_sees_a_listener():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        taken = doctor._port(port)
    assert taken["free"] is False and taken["error"]
    assert doctor._port(port)["free"] is True


def test_docker_info_keeps_only_what_the_checks_need(docker_engine):
    info = doctor._docker_info()
    assert set(info) == {"Runtimes", "DefaultRuntime", "ServerVersion"} and "runc" in json.dumps(info)


def test_run_refuses_saved_readings_without_gaudi(tmp_path):
    (tmp_path / "r.json").write_text(doctor.Readings(hl_smi=None).to_json())
    with pytest.raises(HostError, match="no Gaudi on this host"):
        doctor.run(LOADED, "img", readings=tmp_path / "r.json")


BAD_FILES = [
    ("not json", "not json"), ("an unknown part", '{"hl_smi": null, "colour": 1}'), ("a list", "[1, 2]"),
    ("truncated", good().to_json()[:200]),
    ("hl_smi as text", '{"hl_smi": "yes"}'), ("hl_smi without out", '{"hl_smi": {"rc": 0}}'),
    ("rc as text", '{"hl_smi": {"rc": "0", "out": ""}}'),
    ("runtimes as a list", json.dumps({**json.loads(good().to_json()), "docker_info": {"Runtimes": ["habana"]}})),
    ("a runtime as text", json.dumps({**json.loads(good().to_json()), "docker_info": {"Runtimes": {"habana": "x"}}})),
    ("port as a list", json.dumps({**json.loads(good().to_json()), "port": [8000]})),
    ("image without id", json.dumps({**json.loads(good().to_json()), "image": {"present": True, "ref": "x"}})),
    ("evidence as text", json.dumps({**json.loads(good().to_json()),
                                     "image": {**good().image, "evidence": "passed"}})),
]


@pytest.mark.parametrize("why,text", BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_a_bad_readings_file_is_one_message(tmp_path, why, text):
    """A readings file the user gave that is not shaped as `--record` writes it: one line, exit 2."""
    (tmp_path / "r.json").write_text(text)
    with pytest.raises(UsageError, match="is not a readings file"):
        doctor.run(LOADED, "img", readings=tmp_path / "r.json")
    out = invoke("doctor", "--readings", str(tmp_path / "r.json"))
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_a_truncated_evidence_file_is_a_failed_check(tmp_path, monkeypatch):
    """The image's evidence file cut short (a full disk, a killed run): the image check fails, saying so."""
    monkeypatch.setenv("COOKBOOK_CACHE", str(tmp_path))
    path = imagecheck.evidence_path(IMAGE_ID)
    path.parent.mkdir(parents=True)
    path.write_text('{"passed": true, "image_id": "sha')
    with pytest.raises(CheckFailure, match="does not read"):
        imagecheck.require_passed(IMAGE_ID)
    r = with_(image={**good().image, "evidence": {"unreadable": "the image-check evidence X does not read"}})
    checks = {c.name: c for c in doctor.judge(r, LOADED)}
    assert checks["image"].status == doctor.FAIL and "does not read" in checks["image"].detail


def test_an_absent_image_points_to_fixes_verify_of_the_recipes_base():
    # Before the first build on a host: whether the pack applies to the base the recipe names.
    check = doctor.check_image(with_(image={"ref": "x", "present": False}), LOADED)
    base = LOADED.recipe.base
    ref = f"{base.image.rsplit(':', 1)[0]}@{base.digest}" if base.digest else base.image
    assert f"invoke fixes.verify --base {ref}" in check.mend
