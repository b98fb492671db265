"""inimage/pack.py: a pack.json the applier cannot rely on is refused before anything is read or changed."""

import pytest

from .tree import DEP, needs, refused


@pytest.mark.parametrize("spec", [">0.2", "0.2.4", ">=", ">=0.2.4,", "~=0.2.4", ">=x.y"])
def test_a_pack_with_a_malformed_dependency_range_is_refused(cb, spec):
    needs(cb, "hybrid-decode-pad", {DEP: spec}, "0.2.9")
    before = cb.snapshot()
    result = cb.apply()
    if spec == ">0.2":  # a well-formed range: the control
        assert result.code == 0, result.out
        return
    refused(cb, before, result, f"fix hybrid-decode-pad: 'dists' {DEP}: {spec!r} is not a version range")
