"""The serving test's yardstick (cookbook/fixpack/lab/_serving.py): when a request served among others departs from
itself served alone. Tokens exactly, whatever the feature: no near-tie is excused. No engine: the outputs
are written here."""

import _serving
import pytest

TOL = _serving.TOL


def _out(tokens, logprobs=None, finish="length", text="", prompt_logprobs=None):
    return {"tokens": tokens, "text": text, "finish": finish, "logprobs": logprobs,
            "prompt_logprobs": prompt_logprobs}


@pytest.mark.parametrize("got, want, departs", [
    (_out([3, 4]), _out([3, 4]), None),
    # A near-tie broken the other way is a departure like any other token.
    (_out([3, 4], [{3: -1.0}, {4: -2.0, 5: -2.0 - TOL / 10}]), _out([3, 5], [{3: -1.0}, {5: -2.0, 4: -2.0}]),
     "tokens differ from step 1"),
    (_out([3, 4, 6]), _out([3, 4]), "tokens differ from step 2"),  # one run stopped earlier
    (_out([3, 4], finish="stop"), _out([3, 4]), "finished on 'stop'"),
    (_out([3, 4], text="ab"), _out([3, 4], text="ac"), "the text"),
    (_out([3], [{3: -1.0}]), _out([3], [{3: -1.0 - TOL / 2}]), None),
    (_out([3], [{3: -1.0}]), _out([3], [{3: -1.0 - 2 * TOL}]), "logprobs at step 0"),
    (_out([3], [{3: -1.0, 4: -2.0}]), _out([3], [{3: -1.0, 5: -2.0}]), None),  # a tie at the top-k cut-off
    (_out([3], [{3: -1.0, 4: -2.0}]), _out([3], [{3: -1.0, 5: -1.5}]), "logprobs at step 0"),
    (_out([3], [{3: -1.0}]), _out([3]), "logprobs unexpected"),
    (_out([3], prompt_logprobs=[None, {1: -3.0}]), _out([3], prompt_logprobs=[None, {1: -3.0 + 2 * TOL}]),
     "prompt_logprobs at step 1"),
])
def test_differences(got, want, departs):
    bad = _serving.differences("r", got, want)
    if departs is None:
        assert bad == []
    else:
        assert len(bad) == 1 and departs in bad[0], bad


def test_the_tolerance_is_far_below_the_margins_it_stands_beside():
    # Exact tokens rest on two runs' noise (TOL bounds it) being far below every greedy margin.
    assert 0 < TOL <= _serving.MARGIN_FLOOR / 10


@pytest.mark.parametrize("chunks, cached, inner", [
    ({"w": [(0, 512), (512, 1024)]}, {"r": 256}, [("r", 256)]),
    ({"w": [(0, 512), (512, 1024)]}, {"r": 768}, [("r", 768)]),
    ({"w": [(0, 256), (256, 512)]}, {"r": 256}, []),  # written at a chunk's end
    ({"w": [(0, 512), (512, 1024)]}, {"r": 512}, []),  # an even block: a chunk's end
    ({"w": [(0, 512)], "x": [(0, 256)]}, {"r": 256}, []),  # another writer ended a chunk there
    ({"w": [(0, 512)]}, {"r": 0}, []),
])
def test_inner_hits_needs_every_writer_to_have_crossed_the_boundary_inside_a_chunk(chunks, cached, inner):
    prefix = list(range(1, 1025))
    requests = [_serving.Request("w", prefix, "greedy", 0), _serving.Request("x", prefix[:300], "greedy", 1),
                _serving.Request("r", prefix[:cached["r"]] + [7] * 9, "greedy", 2)]
    served = _serving.Served(outputs={r.name: {"tokens": [], "cached": cached.get(r.name, 0)} for r in requests},
                             chunks={tuple(r.prompt): chunks.get(r.name, []) for r in requests})
    assert _serving.inner_hits(requests, served) == inner
