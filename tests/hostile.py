"""A recipe whose values are hostile to a shell or a Dockerfile, but allowed: one line each. An image
built from it must hold every one byte for byte (test_render.py) and its entrypoint must still check
its final command (test_runtime.py). Its port is not vLLM's default, so image.port must reach vLLM.

It says it is a dense model, so PT_HPU_LAZY_MODE may hold anything but "1": that variable is handed
to the build-time fix step, where a shell would run what it holds (and, not being "1", it is compile mode).
It is served on four cards at tensor parallel 4, so the image's guard is seen to hold a multi-card
recipe's card count (test_runtime.py)."""

from __future__ import annotations

from pathlib import Path

import yaml

from .conftest import variant

ID = "hostile-values"
PORT = 9000
CARDS = 4
TITLE = "Hostile \"title\" it's $HOME ${PATH} `id`; $(touch /tmp/pwned) & echo \\ end\\"
ENV = {
    "PT_HPU_LAZY_MODE": "0 $(touch /tmp/pwned) `touch /tmp/pwned`; touch /tmp/pwned",
    "HOSTILE_SHELL": "$(touch /tmp/pwned); `id` && echo $HOME ${PATH} | cat > /tmp/x",
    "HOSTILE_QUOTES": "it's \"double\" and 'single' '\"'\"'",
    "ENDS_WITH_BACKSLASH": "C:\\dir\\",
    "BACKSLASH_DOLLAR": "\\$HOME \\\\ \\\"",
    "LOOKS_LIKE_A_COMMENT": "# not a comment",
    "EQUALS": "a=b=c",
    "PADDED": "  padded  ",
    "EMPTY": "",
    "UNICODE": "naïve – ünïcödé ✓",
}


def write(root: Path) -> Path:
    data = variant({"title": TITLE, "image.port": PORT, "model.architecture": "dense",
                    "hardware.cards": CARDS, "hardware.tensor_parallel": CARDS, "serve.tensor_parallel_size": CARDS})
    data["env"].update(ENV)
    path = root / "Test" / "Hostile-Values" / "recipe.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path
