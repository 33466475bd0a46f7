"""A long reply costs memory linear in its length, and what is left after it ends stays small.

Measured in a fresh interpreter running the real engine and worker: this test process's heap
already holds free chunks that would serve (and hide) the allocations. Not timed.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from model.arch.lfm2_config import ATTENTION, CONV

REPLY_TOKENS = 10_000
# ~0.6 KiB a token stays while the reply's handle lives (its ids and text); 2.5 KiB a token would be a leak
LIMIT_MIB = 25

SCENARIO = textwrap.dedent(
    """
    import gc, queue, re, sys, torch
    from engine import Engine, EngineConfig, EngineWorker, SamplingParams

    torch.set_num_threads(1)
    path, reply_tokens = sys.argv[1], int(sys.argv[2])

    def rss_mib():
        return int(re.search(r"VmRSS:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) / 1024

    # auto: bf16 where the native kernels run, whose paged attention keeps a 10k context fast
    config = EngineConfig(dtype="auto", block_size=16, num_kv_blocks=reply_tokens // 16 + 16)
    engine = Engine.from_pretrained(path, config, progress=lambda stage, fraction: None)
    assert engine.max_model_len > reply_tokens + 16, engine.max_model_len
    worker = EngineWorker(engine).start()

    def stream(prompt, params):  # tokens streamed until the finished event, each event dropped once read
        events = queue.Queue()
        handle = worker.submit(prompt, params, on_event=events.put)
        streamed, event = 0, None
        while event is None or not event.finished:
            event = events.get(timeout=600)
            streamed += len(event.token_ids)
        return handle, streamed

    warm_up = SamplingParams(temperature=0.0, max_tokens=200, ignore_eos=True)
    stream("Hello there", warm_up)  # lazy allocations happen here, not below
    gc.collect()
    before = rss_mib()
    reply = SamplingParams(temperature=0.0, max_tokens=reply_tokens, ignore_eos=True)
    handle, streamed = stream("Once upon a time", reply)
    assert streamed == reply_tokens, streamed
    gc.collect()
    print(rss_mib() - before)  # the handle is still alive here
    worker.shutdown()
    """
)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RSS from /proc")
def test_a_10k_token_reply_leaves_under_25_mib_behind(tiny_ckpt_factory):
    """Events carry fixed-size metrics and the handle keeps none of them (issue 17, item 5)."""
    path = tiny_ckpt_factory(
        "default", num_hidden_layers=2, layer_types=[CONV, ATTENTION], max_position_embeddings=32768
    )
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-c", SCENARIO, str(path), str(REPLY_TOKENS)],
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout) < LIMIT_MIB
