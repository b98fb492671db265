"""The pack at the recipe's scale (cookbook/fixpack/lab/_capacity.py): vLLM 0.26's real scheduler and KV cache manager
with Qwen3.5-27B-FP8's own KV cache configuration (896-token hybrid blocks, the page's 711-block pool,
1,792 batched tokens, 32 sequences, 262,144 tokens), async scheduling on as vLLM 0.26 defaults, no model.

Held against vLLM's own align-mode accounting on the same tree ("stock": the runner's decision to
checkpoint every block boundary not taken). gdn-prefix-cache holds a real block at every boundary of a
chunk in flight, so it reserves what a request holds at a step's peak: 1 + 2 x 2 blocks per GDN group
(MambaSpec.max_admission_blocks_per_request), 308 blocks for a 262,144-token request where stock counts
299. The figures below are exact (the scheduler is deterministic). On the pristine tree there is no pack
(and its async scheduler dies at the first preemption); on the previous round's 0012 the longest prompt
admitted was 158,592 tokens and 12 prompts of 131K ran one at a time."""

import json

import _capacity
import pytest

RECIPE = _capacity.DEFAULT_RECIPE
PAGE = RECIPE.parent / "capacity.json"


@pytest.fixture(scope="module")
def stock():
    return _capacity.figures(RECIPE, True, stock=True)


@pytest.fixture(scope="module")
def pack():
    return _capacity.figures(RECIPE, True)


def _rows(f):
    return {**f["workloads"], **{f"32 x {ctx}": v for ctx, v in f["at_once"].items()}}


def test_the_lab_runs_the_recipes_geometry(stock, pack):
    assert (stock["setup"]["block"], stock["setup"]["pool"]) == (896, 711)
    assert stock["setup"]["reported_tokens"] == 623_359  # the page's KV pool, measured on the stock release
    assert pack["setup"]["pack_accounting"] and not stock["setup"]["pack_accounting"]
    # vLLM's start-up check and reported capacity count the pack's step peak: 293 + 3 x 5 blocks
    assert (pack["setup"]["reported_tokens"], pack["setup"]["reported_concurrency"]) == (605_144, 2.308)


def test_the_pack_admits_every_prompt_stock_admits(stock, pack):
    assert pack["longest_admitted"] == stock["longest_admitted"] == 262_143  # max_model_len - 1


def test_every_admitted_request_finishes_and_every_block_comes_back(stock, pack):
    for name, row in _rows(pack).items():
        assert not row["wedged"], f"{name}: wedged, waiting {row['waiting_at_end']}"
        assert row["finished"] == row["admitted"] and row["blocks_leaked"] == 0, (name, row)


def test_the_pack_runs_as_many_at_once_as_stock_in_no_more_steps(stock, pack):
    s, p = _rows(stock), _rows(pack)
    worse = [(n, s[n]["peak_running"], p[n]["peak_running"]) for n in s if p[n]["peak_running"] < s[n]["peak_running"]]
    assert not worse, f"fewer at once than stock: {worse}"
    slower = [(n, s[n]["steps"], p[n]["steps"]) for n in s if p[n]["steps"] > s[n]["steps"]]
    assert not slower, f"more steps than stock: {slower}"
    # The rows (12 submitted, 2,000 tokens out): stock 9 / 6 / 4 at 65K, 100K, 131K
    assert [p[f"12 x {c}"]["peak_running"] for c in (65536, 100000, 131072)] == [9, 6, 4]


def test_a_long_prompt_ahead_of_short_ones_does_not_hold_them(pack):
    row = pack["workloads"]["long ahead of short"]
    assert (row["admitted"], row["finished"], row["peak_running"]) == (9, 9, 9)


def test_hits_reach_the_last_full_shared_block(stock, pack):
    """A reader sharing all but the last 1,000 tokens of a writer's prompt: the pack restores the writer's
    checkpoint at the last full shared block; stock has one only where the writer's chunks ended (every
    second block)."""
    shared = sum((ctx - _capacity.HIT_TAIL) // 896 * 896 for ctx in _capacity.HIT_PROMPTS)
    assert pack["workloads"]["prefix hits 6K-126K"]["hit_tokens"] == shared
    even = sum((ctx - _capacity.HIT_TAIL) // 1792 * 1792 for ctx in _capacity.HIT_PROMPTS)
    assert stock["workloads"]["prefix hits 6K-126K"]["hit_tokens"] == even < shared


def test_the_pages_capacity_figures_are_the_labs(stock, pack):
    """recipes/.../capacity.json (the page's Capacity table) is what this lab computes now."""
    page = json.loads(PAGE.read_text())
    for name, f in (("stock", stock), ("pack", pack)):
        want = {ctx: {k: row[k] for k in _capacity.PAGE_FIELDS} for ctx, row in f["at_once"].items()}
        assert page[name]["at_once"] == want, f"{PAGE} is stale: run invoke fixes.capacity"
        assert page[name]["longest_admitted"] == f["longest_admitted"]
        assert page[name]["reported_tokens"] == f["setup"]["reported_tokens"]


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_a_tight_pool_preempts_and_every_request_still_finishes(async_scheduling):
    """A pool of 320 blocks, the smallest start-up check the pack passes at max_model_len rounded up (308
    blocks a request), for 16 requests of 16,768 prompt tokens and 16,000 out: admission counts the
    prompt, decoding grows each to 37 blocks, so requests are preempted and resumed; none is left unable
    to finish, every block comes back, and the pack runs as many at once as vLLM's own accounting."""
    rows = {}
    for name, stock in (("stock", True), ("pack", False)):
        lab = _capacity.Lab(RECIPE, async_scheduling, pool=320, stock=stock)
        assert lab.pack is not stock, "the pack's accounting is not in this tree"
        rows[name] = _capacity.at_once(lab, 32768, n=16, output=16000)
    for name, row in rows.items():
        assert not row.wedged and row.finished == row.admitted == 16 and row.blocks_leaked == 0, (name, row)
    assert rows["pack"].preemptions > 0, "the pool never ran short"
    assert rows["pack"].peak_running >= rows["stock"].peak_running


def test_sync_scheduling_admits_every_prompt_and_runs_as_many(stock):
    """vLLM's Scheduler (async scheduling off): one chunk in flight, 3 blocks per GDN group."""
    lab = _capacity.Lab(RECIPE, False)
    assert lab.setup().reported_tokens == 617_166  # 293 + 3 x 3 blocks a request
    assert _capacity.longest_admitted(lab) == stock["longest_admitted"]
    assert [_capacity.at_once(lab, c).peak_running for c in (65536, 100000, 131072)] == [9, 6, 4]
