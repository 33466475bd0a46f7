"""Request state without text: counters, and the two ends a token alone decides."""

from __future__ import annotations

from engine.core.request import RequestStatus


def test_a_stop_token_or_the_length_limit_finishes_a_request(new_request):
    stopped = new_request([20, 21], max_tokens=5, stop_ids={7})
    stopped.append_token(30, now=0.0)
    assert not stopped.is_finished and stopped.phase == "waiting"
    stopped.append_token(7, now=1.0)
    assert stopped.status is RequestStatus.FINISHED_STOPPED and stopped.output_token_ids == [30, 7]

    limited = new_request([20], max_tokens=2)
    limited.append_token(30, now=0.0)
    limited.append_token(7, now=1.0)  # not a stop token for this request
    assert limited.status is RequestStatus.FINISHED_LENGTH
    assert limited.num_output_tokens == limited.metrics.generated_tokens == 2
