"""async-discard-counter: vllm-gaudi's HPUAsyncScheduler drops a token that arrives with no output
placeholder pending (an HPU partial prefill chunk yields one, and so does a frame that was in flight
when `reset_prefix_cache` preempted the request). The stock branch reads
`request.discard_latest_async_tokens`, which vLLM 0.26.0's Request no longer has: it raises
AttributeError. vLLM 0.26.0 counts stale frames in `async_tokens_to_discard`; if the HPU branch drops
a stale frame without draining that counter, the base scheduler later drops the resumed request's
first real token in its place and leaves its placeholder behind (what a bare getattr guard does).

Driven through the real scheduler loop: schedule, update_from_output with the worker's tokens,
reset_prefix_cache(reset_running_requests=True), as the async engine core calls them.
"""

import pytest
from _scheduler import delivered, hpu_async_scheduler, request, step_output, tiny_model_dir

PROMPT = list(range(1, 41))  # 40 tokens: two full 16-token blocks and a partial one


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("tiny-llama"))


@pytest.mark.parametrize("frames_in_flight", [1, 2])
def test_stale_frames_after_a_prefix_cache_reset_are_dropped_and_the_next_real_token_kept(
        model_dir, frames_in_flight):
    sched = hpu_async_scheduler(model_dir)
    req = request("r0", PROMPT)
    sched.add_request(req)
    prefill = sched.schedule()
    assert delivered(sched.update_from_output(prefill, step_output(prefill, {"r0": 101}))) == {"r0": [101]}

    # Async scheduling: decode steps are scheduled before their tokens come back.
    in_flight = [sched.schedule() for _ in range(frames_in_flight)]
    assert req.num_output_placeholders == frames_in_flight
    assert sched.reset_prefix_cache(reset_running_requests=True)
    assert req.async_tokens_to_discard == frames_in_flight

    for n, step in enumerate(in_flight):  # the stale frames come back after the reset
        assert delivered(sched.update_from_output(step, step_output(step, {"r0": 900 + n}))) == {}
    assert list(req.output_token_ids) == [101]
    assert req.async_tokens_to_discard == 0

    resumed = sched.schedule()  # recomputes the prompt and the one real output token
    assert resumed.num_scheduled_tokens == {"r0": len(PROMPT) + 1}
    assert delivered(sched.update_from_output(resumed, step_output(resumed, {"r0": 102}))) == {"r0": [102]}
    assert list(req.output_token_ids) == [101, 102]
    assert (req.num_output_placeholders, req.async_tokens_to_discard) == (0, 0)

    decode = sched.schedule()  # and decoding goes on one token at a time
    assert decode.num_scheduled_tokens == {"r0": 1}
    assert delivered(sched.update_from_output(decode, step_output(decode, {"r0": 103}))) == {"r0": [103]}
    assert list(req.output_token_ids) == [101, 102, 103]


def test_a_token_from_a_partial_prefill_chunk_is_dropped_and_the_prompt_completes(model_dir):
    sched = hpu_async_scheduler(model_dir, max_num_batched_tokens=32)
    req = request("r0", PROMPT)
    sched.add_request(req)
    chunk = sched.schedule()
    assert chunk.num_scheduled_tokens == {"r0": 32} and req.num_output_placeholders == 0
    # The HPU runner may return logits for a partial chunk: the token must go nowhere.
    assert delivered(sched.update_from_output(chunk, step_output(chunk, {"r0": 555}))) == {}
    assert list(req.output_token_ids) == [] and req.async_tokens_to_discard == 0

    rest = sched.schedule()
    assert rest.num_scheduled_tokens == {"r0": 8}
    assert delivered(sched.update_from_output(rest, step_output(rest, {"r0": 101}))) == {"r0": [101]}
    assert list(req.output_token_ids) == [101] and req.num_output_placeholders == 0
