"""cookbook/host/outdir.py: the one rule for a folder a task replaces (`render --out`, `docs --site`,
`k8s --out`): a missing path, an empty folder or one carrying the task's marker; anything else is refused
before any work and left as it was."""

import stat

import pytest

from cookbook.host import outdir
from cookbook.host.errors import UsageError

from ..test_tasks import invoke

M = ".cookbook-x"


def make(tmp_path, kind):
    p = tmp_path / "out"
    if kind == "file":
        p.write_text("notes")
    elif kind == "symlink":
        (tmp_path / "target").mkdir()
        p.symlink_to(tmp_path / "target")
    elif kind != "missing":
        p.mkdir()
        if kind == "marked":
            (p / M).write_text("")
            (p / "old.html").write_text("old")
        elif kind == "user":
            (p / "thesis.tex").write_text("years of work")
        elif kind == "other-marker":
            (p / ".cookbook-y").write_text("")
    return p


@pytest.mark.parametrize("kind,ok", [("missing", True), ("empty", True), ("marked", True), ("user", False),
                                     ("other-marker", False), ("file", False), ("symlink", False)])
def test_check(tmp_path, kind, ok):
    p = make(tmp_path, kind)
    if ok:
        outdir.check(p, M, "--opt")
        return
    with pytest.raises(UsageError) as err:
        outdir.check(p, M, "--opt")
    assert str(p) in str(err.value) and "--opt" in str(err.value)


def test_swap_in_replaces_and_keeps_neighbours(tmp_path):
    out = make(tmp_path, "marked")
    (tmp_path / ".out.old").mkdir()  # a neighbour that only looks like a leftover
    new = tmp_path / "new"
    new.mkdir()
    (new / "index.html").write_text("new")
    outdir.swap_in(new, out)
    assert sorted(p.name for p in out.iterdir()) == ["index.html"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.old", "out"]


# --- the tasks: a folder of the user's is refused before any work and left as it was -----------------

@pytest.mark.parametrize("where", [".", "checkout-file"])
def test_docs_site_refuses_a_folder_it_did_not_make(tmp_path, where):
    """`--site .` once removed the checkout; a non-empty folder without the site marker is refused."""
    site = tmp_path / "mine"
    site.mkdir()
    (site / "thesis.tex").write_text("years of work")
    target = site if where == "." else site / "thesis.tex"
    out = invoke("docs", "--site", str(target))
    assert out.returncode == 2 and "not replacing it" in out.stderr and "Traceback" not in out.stderr
    assert (site / "thesis.tex").read_text() == "years of work"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # nothing built beside it either


def test_docs_site_is_readable_by_others_and_rebuilds_its_own(tmp_path):
    site = tmp_path / "site"
    assert invoke("docs", "--site", str(site)).returncode == 0
    assert stat.S_IMODE(site.stat().st_mode) == 0o755 and (site / ".cookbook-site").is_file()
    (site / "stale.html").write_text("from an earlier build")
    again = invoke("docs", "--site", str(site))
    assert again.returncode == 0, again.stderr
    assert not (site / "stale.html").exists() and (site / "index.html").is_file()


def test_links_finds_every_symlink_inside_without_following_one(tmp_path):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    (out / "smoke").mkdir(parents=True)
    elsewhere.mkdir()
    (elsewhere / "deep").symlink_to(tmp_path)  # under a linked folder: never reached
    (out / "build.log").symlink_to(tmp_path / "precious")
    (out / "bench").symlink_to(elsewhere)
    (out / "smoke" / "smoke.json").symlink_to(tmp_path / "gone")  # dangling counts too
    (out / "state.json").write_text("{}")
    assert outdir.links(out) == [out / "bench", out / "build.log", out / "smoke" / "smoke.json"]
    assert outdir.links(tmp_path / "missing") == [] and outdir.links(out / "bench") == []
