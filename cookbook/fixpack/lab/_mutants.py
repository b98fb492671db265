"""Mutants of the pack: a patched tree with one of gdn-prefix-cache's guarantees taken out again, to show
the serving test (test_pack_serving.py) notices. Each is a few exact edits of the patched tree's files,
applied to a copy of it; an edit whose old text is not found exactly once is refused, so a mutant that
no longer lands after the pack changed fails loudly instead of leaving the tree as patched.

    python _mutants.py PATCHED_TREE DEST NAME   # lays out DEST as PATCHED_TREE with mutant NAME

No engine or vLLM import here: the host's suite (tests/fixpack/test_fix_lab_mutants.py) uses it too.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

RUNNER = "vllm_gaudi/v1/worker/hpu_model_runner.py"
GDN_OP = "vllm_gaudi/ops/hpu_gdn_pytorch.py"

# name -> [(file under the tree, old text, new text)]
MUTANTS: dict[str, list[tuple[str, str, str]]] = {
    # 0004: a hit restores the SSM state but leaves the conv state (state 0 of a layer's page stream) as
    # the slot was handed out: zeros.
    "conv-not-restored": [(
        RUNNER,
        "                else:\n                    raw[i][slots, state_offset:state_offset + nbytes] = "
        "pages[half][blocks, offset:offset + nbytes]\n",
        "                elif i != 0:\n                    raw[i][slots, state_offset:state_offset + nbytes] = "
        "pages[half][blocks, offset:offset + nbytes]\n",
    )],
    # 0003: neither a block id's page when the runner first sees it nor a slot handed to a request is
    # zeroed: both keep what their last owner left.
    "pages-not-zeroed": [
        (RUNNER,
         "        if not block_ids:\n            return\n        block_tokens = self._gdn_block_tokens\n",
         "        return\n        block_tokens = self._gdn_block_tokens\n"),
        (RUNNER,
         "                    self._gdn_zero_slot(base_slot)\n",
         "                    pass\n"),
    ],
    # 0010: the chunked GDN op hands out the state after every stride-th 128-token kernel chunk; here
    # one chunk earlier (after chunk 0, 2, ... of a 2-chunk stride: 128 and 384 tokens, not 256 and 512).
    # The optimized phase B, which the release runs unless VLLM_GDN_LEGACY_PHASE_B=1.
    "inner-checkpoint-early": [(
        GDN_OP,
        "        state_t = torch.matmul(M_full[:, ci], state_t) + N_t[:, ci]\n"
        "        if checkpoint_stride and (ci + 1) % checkpoint_stride == 0:\n",
        "        state_t = torch.matmul(M_full[:, ci], state_t) + N_t[:, ci]\n"
        "        if checkpoint_stride and (ci + 2) % checkpoint_stride == 0:\n",
    )],
}


class MutantError(Exception):
    pass


def apply(tree: Path, name: str, edits: list[tuple[str, str, str]] | None = None) -> None:
    """Apply mutant `name`'s edits (or `edits`) to `tree` in place (a copy of a patched tree)."""
    edits = MUTANTS[name] if edits is None else edits
    for rel, old, _ in edits:  # check every edit before writing any
        text = (tree / rel).read_text()
        if text.count(old) != 1:
            raise MutantError(f"{name}: {rel} holds the text to replace {text.count(old)} times, not once:\n{old}")
    for rel, old, new in edits:
        path = tree / rel
        path.write_text(path.read_text().replace(old, new))


def lay_out(patched: Path, dest: Path, name: str) -> Path:
    """`dest`: a copy of the patched tree `patched` with mutant `name` applied."""
    if name not in MUTANTS:
        raise MutantError(f"no mutant {name!r}: {', '.join(MUTANTS)}")
    if not (patched / "fix-record.json").is_file():
        raise MutantError(f"{patched} is not a patched tree (no fix-record.json)")
    shutil.copytree(patched, dest, symlinks=True)
    apply(dest, name)
    (dest / "mutant.txt").write_text(name + "\n")
    return dest


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    print(lay_out(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]))
