"""gdn-prefix-cache end to end: the release's real engine on the CPU (cookbook/fixpack/lab/_engine.py), the tiny
Qwen3.5 hybrid, prefix caching on. A request that hits a shared prefix of whole blocks, after another
request dirtied the GDN slot, gives the tokens and logprobs of the same prompt run cold and of
transformers' reference. On the stock tree the hit resumes from the slot's last owner and diverges.

The pool is small (24 blocks), so later cases get blocks that held earlier cases' checkpoints, for
the attention group as well as for the GDN groups: a page must carry nothing of its previous owner.

Without compact GDN slots the fix refuses prefix caching; the stock tree serves it, and then even a
cold chunked run is wrong (each chunk's state store overwrites the block it resumed from)."""

import _engine
import pytest

TOL = _engine.TOL
B = _engine.BLOCK
POOL = 24  # blocks; the cases below cycle it


@pytest.fixture(scope="module")
def qwen35_engine(qwen35_dir):
    # max_model_len within what the pool holds for one request at a step's peak (the pack's start-up
    # check: 8 blocks of attention and 5 per GDN group with two 2-block chunks in flight, 23 of 24)
    with _engine.engine(qwen35_dir, num_blocks=POOL, max_model_len=8 * B) as engine:
        yield engine


def _check(engine, reference, ids, out, what):
    steps = _engine.generated(out)
    ref = reference.steps(ids, [s["token"] for s in steps])
    bad = _engine.disagreements(steps, ref, TOL)
    assert not bad, f"{what} against transformers: " + "; ".join(bad)
    return steps


def _same_as_cold(hit, cold, what):
    """The hit's tokens and logprobs are the cold run's."""
    h, c = _engine.generated(hit), _engine.generated(cold)
    diverged = [f"step {i}: hit {x['token']} ({x['logprob']:.4f}), cold {y['token']} ({y['logprob']:.4f})"
                for i, (x, y) in enumerate(zip(h, c, strict=True))
                if x["token"] != y["token"] or abs(x["logprob"] - y["logprob"]) > TOL]
    assert not diverged, f"{what} against cold: " + "; ".join(diverged)


@pytest.mark.parametrize("prefix_blocks, tail", [(2, 17), (3, 17), (3, B + 44)])
def test_a_hit_on_a_shared_prefix_gives_the_cold_runs_tokens(qwen35_engine, qwen35_reference, prefix_blocks, tail):
    case = f"{prefix_blocks}-{tail}"
    prefix = _engine.prompt(100 + prefix_blocks, prefix_blocks * B)
    ids = prefix + _engine.prompt(200 + tail, tail)
    cold = qwen35_engine.generate(ids, salt=f"cold-{case}")
    # Another request on the same prefix caches its blocks and leaves its own state in the slot.
    other = qwen35_engine.generate(prefix + _engine.prompt(300 + tail, 100), salt=f"shared-{case}")
    hit = qwen35_engine.generate(ids, salt=f"shared-{case}")
    assert (cold.num_cached_tokens, other.num_cached_tokens, hit.num_cached_tokens) == (0, 0, prefix_blocks * B)
    _same_as_cold(hit, cold, f"hit on {prefix_blocks * B} cached tokens")
    _check(qwen35_engine, qwen35_reference, ids, cold, "cold")
    _check(qwen35_engine, qwen35_reference, ids, hit, "hit")


@pytest.mark.parametrize("prefix_blocks", [1, 3])
def test_a_hit_reaches_a_block_boundary_inside_the_writers_prefill_chunk(qwen35_engine, qwen35_reference,
                                                                          prefix_blocks):
    """The writer's prompt (4 blocks and 100 tokens) is prefilled in 2-block chunks, which end at
    blocks 2 and 4, never at 1 or 3. Its GDN layers hand out the state at each block boundary inside
    a chunk, vLLM keeps a block cached there, and a reader sharing 1 or 3 blocks hits all of them
    (before: none, and 2 of 3). Its tokens and logprobs are the cold run's and transformers'; once
    every request is done, the block pool has every block back (the blocks inside a chunk are freed
    after their step, cached)."""
    case = f"inner-{prefix_blocks}"
    pool = _scheduler(qwen35_engine).kv_cache_manager.block_pool
    free = pool.get_num_free_blocks()
    prefix = _engine.prompt(500 + prefix_blocks, prefix_blocks * B)
    ids = prefix + _engine.prompt(520 + prefix_blocks, 17)
    cold = qwen35_engine.generate(ids, salt=f"cold-{case}")
    writer = qwen35_engine.generate(prefix + _engine.prompt(510 + prefix_blocks, (4 - prefix_blocks) * B + 100),
                                    salt=case)
    hit = qwen35_engine.generate(ids, salt=case)
    assert (cold.num_cached_tokens, writer.num_cached_tokens, hit.num_cached_tokens) == (0, 0, prefix_blocks * B)
    _same_as_cold(hit, cold, f"hit on {prefix_blocks * B} cached tokens")
    _check(qwen35_engine, qwen35_reference, ids, hit, "a hit inside the writer's chunk")
    assert pool.get_num_free_blocks() == free, "blocks of finished requests were not freed"


def _scheduler(engine):
    """The live engine's scheduler (engine core in this process)."""
    return engine.llm.llm_engine.engine_core.engine_core.scheduler


def _runner(engine):
    """The live engine's model runner (engine core and uniproc worker in this process)."""
    return engine.llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner


def test_a_hit_no_checkpoint_backs_is_computed_not_restored(qwen35_engine, qwen35_reference):
    """A hit vLLM offers on a GDN block whose checkpoint was never written must be computed again,
    not restored from whatever the page holds. No natural case is known under the start-up
    refusals (speculative decoding, the one that skipped checkpoints, is refused), so this test
    forces one: after another request cached 3 blocks of the prefix, it zeroes the page of the third
    block's checkpoint in the live engine's runner and removes that checkpoint from the runner's
    record, as if that step had never written it. The hit then reaches 2 blocks, gives the cold
    run's tokens, and the runner counts the hit it could not back. On a runner that restores
    whatever the page holds, the hit resumes from zeros and diverges."""
    runner = _runner(qwen35_engine)
    prefix = _engine.prompt(400, 3 * B)
    ids = prefix + _engine.prompt(401, 17)
    cold = qwen35_engine.generate(ids, salt="cold-unbacked")
    written = []  # each step's checkpoints, (base slot, block id per GDN group)
    write = runner._gdn_write_checkpoints

    def spy():
        written.extend(runner._gdn_pending_checkpoints)
        write()

    runner._gdn_write_checkpoints = spy
    try:  # chunks end at 2 and 3 blocks: checkpoints of blocks 1 and 2
        qwen35_engine.generate(prefix + _engine.prompt(402, 100), salt="unbacked")
    finally:
        del runner._gdn_write_checkpoints
    third = written[-1][1]
    declined = getattr(runner, "gdn_unbacked_hits", 0)
    for b in third:
        getattr(runner, "_gdn_checkpoints", {}).pop(b, None)
    with qwen35_engine._cpu():
        runner._gdn_zero_pages(third)
    hit = qwen35_engine.generate(ids, salt="unbacked")
    _same_as_cold(hit, cold, f"a hit on {hit.num_cached_tokens} cached tokens, the last unbacked")
    assert hit.num_cached_tokens == 2 * B, "the hit should stop at the last checkpoint written"
    assert runner.gdn_unbacked_hits > declined, "the unbacked hit was not counted"
    _check(qwen35_engine, qwen35_reference, ids, hit, "a hit short of an unbacked block")


def test_without_compact_gdn_prefix_caching_is_refused_not_served_wrong(qwen35_dir, qwen35_reference):
    ids = _engine.prompt(7, 3 * B + 17)
    try:
        engine = _engine.Engine(qwen35_dir, env={"VLLM_COMPACT_GDN": "0"})
    except Exception as exc:  # the fix's guard: raised while the runner starts
        assert "VLLM_COMPACT_GDN" in str(exc), exc
        return
    try:
        out = engine.generate(ids, salt="noncompact-cold")
    finally:
        engine.close()
    _check(engine, qwen35_reference, ids, out, "a cold chunked run without compact GDN")


def test_cold_prompts_arriving_together_share_prefill_batches(qwen35_dir, qwen35_reference):
    """The recipe's buckets merge up to 8 new prompts into one prefill batch. The stock runner asserts
    one request per batch when prefix caching is on (the engine core dies); with the fix each request
    in a merged batch gives the tokens it gives alone, and transformers' reference."""
    import _serving

    prompts = [_engine.prompt(900 + i, 60 + 97 * i) for i in range(6)]
    prompts += [prompts[5][:2 * B] + _engine.prompt(950 + i, 40 + i) for i in range(2)]  # hits on prompt 5
    with _engine.engine(qwen35_dir, num_blocks=64, max_num_seqs=8, env=_serving.BUCKET_ENV) as engine:
        together = engine.generate_many(prompts, salt="together")
        # Prompt 5's first chunk caches the blocks prompts 6 and 7 hit in the same step: vLLM defers
        # those hits a step (their checkpoint is written by that step), never counts them unbacked.
        assert getattr(_runner(engine), "gdn_unbacked_hits", 0) == 0, "a hit on a block cached this step declined"
        assert [o.num_cached_tokens for o in together[6:]] == [2 * B, 2 * B]
        alone = [engine.generate(ids, salt=f"alone-{i}") for i, ids in enumerate(prompts)]
    for i, (ids, t, a) in enumerate(zip(prompts, together, alone, strict=True)):
        tokens = [s["token"] for s in _engine.generated(t)]
        assert tokens == [s["token"] for s in _engine.generated(a)], f"prompt {i} in a merged batch against alone"
        _check(engine, qwen35_reference, ids, t, f"prompt {i} in a merged batch")


def test_speculative_decoding_with_prefix_caching_is_refused_before_any_request(qwen35_dir):
    """Steps that accept draft tokens end where the runner cannot checkpoint. The stock engine starts,
    and its first step with a draft raises inside execute_model, which ends every request in flight;
    with the fix the engine does not start, and says why."""
    spec = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
    try:
        engine = _engine.Engine(qwen35_dir, speculative_config=spec)
    except ValueError as exc:
        assert "speculative decoding" in str(exc), exc
        return
    try:
        out = engine.generate(_engine.prompt(11, 2 * B + 5), salt="spec")
    finally:
        engine.close()
    pytest.fail("the engine started with speculative decoding and prefix caching, and served "
                f"{out.outputs[0].token_ids}")


# Near the pool's size. A prefill step holds a real block at every block boundary of the
# chunks in flight and the block its chunk starts from: with chunks of 2 blocks and async scheduling's
# two steps in flight, 5 blocks per GDN group, which admission reserves (0012/0013). A prompt of A
# blocks is admitted when A + 3 x 5 blocks are free; the pool is 48 blocks (47 usable: one is vLLM's
# null block), so the long prompt (31 blocks, 65% of the pool) needs 46, and the start-up check admits
# max_model_len 32 blocks (47 of 48). The previous round's 0012 counted a block per GDN group per prompt
# block (4A): a prompt over a quarter of the pool waited forever and blocked every prompt behind it.
NEAR_POOL = 48
TAIL = 150  # every prompt's last partial block: a shape the CPU has met is cheap
LONG = 30 * B + TAIL  # 31 blocks, 65% of the pool
THIRD = 13 * B + TAIL  # 14 blocks, nearly a third of the pool
MAX_TOKENS = 6


def _near_pool_scenarios():
    """Per scenario, its requests (id, prompt ids, salt), queued together. Their hits share the
    latest blocks of a prompt just served: a GDN checkpoint is freed (cached) once a step is past it,
    and near the pool's size the allocator soon evicts the early ones."""
    long, short = _engine.prompt(1000, LONG), _engine.prompt(1100, 4 * B)
    thirds = [_engine.prompt(1200 + i, THIRD) for i in range(3)]
    return {
        "most": [("long", long, "near-a")],
        # The short ones wait behind it (FCFS); the second and third hit 3 and 4 blocks of the one
        # before (an odd and an even number; a chunk ends on an even block).
        "ahead": [("long", long, "near-b"),
                  ("short-3", short[:3 * B] + _engine.prompt(1101, TAIL), "near-b"),
                  ("short-4", short + _engine.prompt(1102, TAIL), "near-b"),
                  ("short-4b", short + _engine.prompt(1103, TAIL), "near-b")],
        # Three of 14 blocks (42 of the 47 the pool hands out), two behind them sharing 13 and 12
        # blocks with the last.
        "thirds": [(f"third-{i}", ids, "near-c") for i, ids in enumerate(thirds)]
        + [("third-13", thirds[2][:13 * B] + _engine.prompt(1210, TAIL), "near-c"),
           ("third-12", thirds[2][:12 * B] + _engine.prompt(1211, TAIL), "near-c")],
    }


def _step_limit(prompts):
    """The steps a workload takes at worst when it is served: a chunk shares the step's token budget
    with decodes and is block-aligned, so at least one prompt block a step, and one token a step;
    plus slack. A wedged scheduler runs empty steps, so it fails fast."""
    return sum(-(-len(ids) // B) + MAX_TOKENS for ids in prompts) + 8


@pytest.fixture(scope="module")
def caching_off(qwen35_dir):
    """The yardstick, per prompt: alone, prefix caching off (no checkpoints, no align mode). Run and
    closed before the engine under test starts: the runner sets vLLM's MambaManager hooks (class
    attributes) for the engine it starts last."""
    out = {}
    with _engine.engine(qwen35_dir, num_blocks=NEAR_POOL, max_model_len=8 * 1024, max_num_seqs=1,
                        prefix_caching=False) as engine:
        for requests in _near_pool_scenarios().values():
            for _, ids, _ in requests:
                if tuple(ids) not in out:
                    done, _ = engine.run([("off", ids, "off")], _step_limit([ids]), MAX_TOKENS)
                    out[tuple(ids)] = done["off"]
    return out


@pytest.fixture(scope="module")
def near_pool_engine(qwen35_dir, caching_off):
    with _engine.engine(qwen35_dir, num_blocks=NEAR_POOL, max_model_len=8 * 1024, max_num_seqs=4) as engine:
        yield engine


def _serve(engine, requests):
    """`requests` queued together and served within the step limit; once they are done the pool has
    every block back (free or cached)."""
    pool = _scheduler(engine).kv_cache_manager.block_pool
    free = pool.get_num_free_blocks()
    done, _ = engine.run(requests, _step_limit([ids for _, ids, _ in requests]), MAX_TOKENS)
    assert pool.get_num_free_blocks() == free, f"blocks of finished requests were not freed: {engine.pool_state()}"
    return done


def _as_caching_off(caching_off, name, requests, done):
    for rid, ids, _ in requests:
        _same_as_cold(done[rid], caching_off[tuple(ids)], f"{name}: {rid} ({len(ids)} tokens, "
                      f"{done[rid].num_cached_tokens} cached; 'cold' is the prompt alone, caching off)")


def test_a_prompt_of_most_of_the_pool_is_served_cold_and_from_the_cache(near_pool_engine, caching_off):
    """Cold, then again on its own cached blocks (the stock tree restores a GDN state that is not the
    prompt's there)."""
    requests = _near_pool_scenarios()["most"]
    cold = _serve(near_pool_engine, requests)
    _as_caching_off(caching_off, "most", requests, cold)
    again = _serve(near_pool_engine, requests)
    _as_caching_off(caching_off, "most", requests, again)
    assert again["long"].num_cached_tokens >= 24 * B, "the long prompt missed its own blocks"


def _served_with_hits(engine, caching_off, scenario, hitters, at_least):
    """A scenario served as caching off serves each prompt alone, and `hitters` hit `at_least` tokens."""
    requests = _near_pool_scenarios()[scenario]
    done = _serve(engine, requests)
    _as_caching_off(caching_off, scenario, requests, done)
    hits = [done[r].num_cached_tokens for r in hitters]
    assert min(hits) >= at_least, f"{scenario}: {hitters} missed the blocks they share: {hits} cached tokens"


def test_a_prompt_of_most_of_the_pool_ahead_of_short_ones_serves_them_all(near_pool_engine, caching_off):
    _served_with_hits(near_pool_engine, caching_off, "ahead", ("short-4", "short-4b"), 2 * B)


def test_prompts_of_a_third_of_the_pool_arriving_together_are_all_served(near_pool_engine, caching_off):
    _served_with_hits(near_pool_engine, caching_off, "thirds", ("third-13", "third-12"), 8 * B)


def test_a_pool_that_cannot_hold_max_model_len_at_a_steps_peak_is_refused_at_start_up(qwen35_dir):
    """Liveness: a prompt the pool could never admit, even idle, is refused before any request. vLLM's
    start-up check counts what a request holds at a step's peak (0013), so with a 24-block pool and
    max_model_len 16 blocks (16 + 3 x 5 = 31 > 24) the engine does not start, and says the limit.
    The stock accounting (16 + 3 x 2 = 22) starts it; with the previous round's 0012 its prompts past
    a quarter of the pool then waited forever, with no error."""
    engine = None
    try:
        with pytest.raises(ValueError, match=r"max seq len \(4096\).*estimated maximum model length is 2304"):
            engine = _engine.Engine(qwen35_dir, num_blocks=24, max_model_len=16 * B)
    finally:
        if engine is not None:
            engine.close()
