"""The accelerators, said once: the schema takes exactly these, and each card's memory is what vllm-gaudi's
own defaults (.cd/server/server_defaults.yaml, read from the upstream cache) size its autocalc by."""

import typing

import pytest
import yaml

from cookbook.recipe import hardware, schema


def test_the_schema_takes_exactly_these():
    assert typing.get_args(schema.Hardware.model_fields["accelerator"].annotation) == tuple(hardware.ACCELERATORS)


def test_card_memory_is_vllm_gaudis(upstream_cache):
    gaudi, _ = upstream_cache
    said = yaml.safe_load((gaudi / ".cd" / "server" / "server_defaults.yaml").read_text())["hw_defaults"]["HPU_MEM"]
    ours = {k.upper(): a.memory_gb for k, a in hardware.ACCELERATORS.items() if hardware.is_card(k)}
    assert ours == said


@pytest.mark.parametrize("key,name,card", [("gaudi2", "Gaudi 2", True), ("gaudi3", "Gaudi 3", True),
                                           ("cpu", "CPU", False)])
def test_names_and_cards(key, name, card):
    assert hardware.name(key) == name and hardware.is_card(key) is card
