"""A mkdocs hook: a nav entry written as a folder (`- Recipes: recipes/`) lists the pages `invoke docs`
generates there, its index.md first, then by file name, each under its first heading (a generated page
opens with its do-not-edit comment, so mkdocs would not find its title); a new recipe reaches the
site's nav with no edit to mkdocs.yml."""

import re
from pathlib import Path


def title(page: Path) -> str:
    """The page's first heading, where it is plain words; else its file name (a recipe id). The theme
    prints a nav title unescaped in the nav and unescapes its entities in <title>, so a heading holding
    markup or an entity (`&lt;script&gt;` from a recipe's title) must never become one."""
    heading = re.search(r"^# (.+)$", page.read_text(), re.M)
    text = heading[1].strip() if heading else ""
    return text if re.fullmatch(r"[\w .,:()+/-]+", text) else page.stem


def expand(nav, docs_dir: Path):
    """The nav with every folder entry replaced by the folder's Markdown pages."""
    if isinstance(nav, str) and nav.endswith("/"):
        pages = sorted((docs_dir / nav).glob("*.md"), key=lambda p: (p.name != "index.md", p.name))
        return [{title(p): str(p.relative_to(docs_dir))} for p in pages]
    if isinstance(nav, list):  # a folder among a section's pages: its pages take its place there
        out = []
        for item in nav:
            got = expand(item, docs_dir)
            out.extend(got) if isinstance(item, str) and item.endswith("/") else out.append(got)
        return out
    if isinstance(nav, dict):
        return {title: expand(item, docs_dir) for title, item in nav.items()}
    return nav


def on_config(config):
    config["nav"] = expand(config["nav"], Path(config["docs_dir"]))
    return config
