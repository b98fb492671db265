import pytest

from .tree import Cookbook


@pytest.fixture
def cb(tmp_path) -> Cookbook:
    return Cookbook(tmp_path)
