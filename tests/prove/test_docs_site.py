"""The site `invoke docs --check --site` builds (cookbook/prove/docs.py build_site, mkdocs.yml), as a reader
sees it: headless Chromium renders the home page and a recipe page, the top bar holds the nav's five
sections in the theme's colours, and the recipe page its title; a page left out of the nav fails the build."""

import shutil
import subprocess
from pathlib import Path

import pytest

from cookbook.host.errors import CookbookError
from cookbook.host.paths import ROOT
from cookbook.prove import docs

from ..test_readme import nav_sections
from ..test_tasks import invoke

SECTIONS = ["Use a recipe", "Recipes", "Fixes", "Develop", "Reference"]
WINDOW = (1280, 800)
TOP_BAR = 96  # the theme's header and tabs, in pixels at WINDOW's width
# Headless, as root, and nothing of its own on the network (updates, sync, first-run pages): a page and no more.
QUIET_BROWSER = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-extensions")


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        from ..conftest import unavailable

        unavailable("no chromium on PATH (Debian's package `chromium`; scripts/setup.sh installs it)")
    return found


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site built from this checkout by the task, which checks the generated pages first."""
    site = tmp_path_factory.mktemp("site") / "site"
    built = invoke("docs", "--check", "--site", str(site))
    assert built.returncode == 0, built.stderr
    return site


def test_the_task_checks_drift_and_builds_the_recipe_pages(site):
    html = (site / "recipes" / "qwen3.5-27b-fp8.html").read_text()
    assert "623,359" in html and "qwen3.5-27b-fp8-bench.svg" in html


@pytest.fixture(scope="module")
def rendered(tmp_path_factory, request):
    """What Chromium makes of the site: a screenshot of the home page and of a recipe page, and the recipe
    page's DOM after the theme's scripts ran; each in a browser of its own, all three at once."""
    browser = chromium()  # before the site is built: without a browser there is nothing to wait for
    site = request.getfixturevalue("site")
    tmp = tmp_path_factory.mktemp("chromium")
    pages = {"home": site / "index.html", "recipe": site / "recipes" / "qwen3.5-27b-fp8.html"}
    procs = {}
    for name, what in (("home", "png"), ("recipe", "png"), ("recipe", "dom")):
        args = [browser, *QUIET_BROWSER, f"--user-data-dir={tmp / name}-{what}",
                f"--window-size={WINDOW[0]},{WINDOW[1]}"]
        args += [f"--screenshot={tmp / name}.png"] if what == "png" else ["--dump-dom"]
        procs[name, what] = subprocess.Popen([*args, pages[name].as_uri()], stdout=subprocess.PIPE,
                                             stderr=subprocess.DEVNULL, text=True)
    out = {key: proc.communicate(timeout=60)[0] for key, proc in procs.items()}
    return {"home": {"png": tmp / "home.png"}, "recipe": {"png": tmp / "recipe.png", "dom": out["recipe", "dom"]}}


def colours(png: Path, box: tuple[int, int, int, int]) -> dict[tuple, int]:
    from PIL import Image

    with Image.open(png) as image:
        assert image.size == WINDOW
        return {colour: n for n, colour in image.convert("RGB").crop(box).getcolors(maxcolors=1 << 20)}


@pytest.mark.parametrize("page", ["home", "recipe"])
def test_the_top_bar_renders_in_the_theme(rendered, page):
    """Not blank, and styled: the theme's CSS loaded (an unstyled page has a white top with blue links),
    and its text drawn (antialiased letters give many shades)."""
    bar = colours(rendered[page]["png"], (0, 0, WINDOW[0], TOP_BAR))
    ground = max(bar, key=bar.get)
    assert ground != (255, 255, 255) and bar[ground] > WINDOW[0] * TOP_BAR / 2, ground
    assert len(bar) > 20, len(bar)
    body = colours(rendered[page]["png"], (0, TOP_BAR, WINDOW[0], WINDOW[1]))
    assert len(body) > 20  # the page's own text under the bar


def test_the_nav_holds_the_five_sections(rendered):
    import re

    tabs = re.findall(r'class="md-tabs__link[^"]*"[^>]*>\s*([^<]+?)\s*<', rendered["recipe"]["dom"])
    assert tabs == SECTIONS


def test_the_recipe_page_renders_its_title_and_its_siblings_in_the_nav(rendered):
    dom = rendered["recipe"]["dom"]
    assert "<title>Qwen3.5-27B-FP8 - Gaudi cookbook</title>" in dom
    assert '<h1 id="qwen35-27b-fp8">Qwen3.5-27B-FP8' in dom
    assert 'href="qwen3.6-27b-fp8.html"' in dom  # the Recipes section lists every recipe (docs/hooks)


def test_a_page_left_out_of_the_nav_fails_the_build(tmp_path, monkeypatch):
    """mkdocs.yml's own settings on stub pages: with every page in the nav it builds; a stray page fails,
    named (mkdocs reports it as a warning, which --strict counts only when not --quiet)."""
    shutil.copy(ROOT / "mkdocs.yml", tmp_path)
    shutil.copytree(ROOT / "docs" / "hooks", tmp_path / "docs" / "hooks")
    for page in ["index.md", *(page for pages in nav_sections().values() for page in pages)]:
        (tmp_path / "docs" / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "docs" / page).write_text(f"# {Path(page).stem}\n")
    monkeypatch.setattr(docs, "ROOT", tmp_path)
    docs.build_site(tmp_path / "site")
    (tmp_path / "docs" / "stray.md").write_text("# Stray\n")
    with pytest.raises(CookbookError, match="stray.md"):
        docs.build_site(tmp_path / "site")

