"""The accelerators a recipe may name, as data said once: the schema's `hardware.accelerator` values, the
name pages print, each card's memory, and the product names hl-smi gives its cards (for `invoke doctor`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Accelerator:
    name: str  # as pages and messages say it
    memory_gb: int | None  # device memory (HBM) per card; None: not a card
    products: tuple[str, ...]  # hl-smi -q's Product Name starts with one of these; () for no card


# Memory: vllm-gaudi's own `.cd/server/server_defaults.yaml` (hw_defaults.HPU_MEM, which its autocalc sizes
# by) says the same; tests/recipe/test_hardware.py compares them. Products: Gaudi 2 parts are HL-225 (and its
# letter variants); Gaudi 3 parts are numbered HL-3xx (OAM and PCIe cards alike); Gaudi 1's HL-205 is neither.
# cpu: a recipe served on a CPU (the tests' CPU image); it needs no card.
ACCELERATORS = {
    "gaudi2": Accelerator("Gaudi 2", 96, ("HL-225",)),
    "gaudi3": Accelerator("Gaudi 3", 128, ("HL-3",)),
    "cpu": Accelerator("CPU", None, ()),
}


def name(key: str) -> str:
    return ACCELERATORS[key].name


def is_card(key: str) -> bool:
    """Whether a recipe for this accelerator runs on Gaudi cards (the Habana runtime hands them over)."""
    return bool(ACCELERATORS[key].products)
