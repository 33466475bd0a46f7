"""`bench --quick` is quick and never silent, and Ctrl+C still prints what finished.

No speed is asserted: the plan's size, the progress lines and the partial table are.
"""

from __future__ import annotations

import contextlib
import io
import time

import pytest

from bench import bandwidth, runner
from bench import progress as progress_module
from bench.cli import INTERRUPTED, main, parse, planned_runs
from bench.progress import Progress


def test_quick_plans_a_few_short_in_process_runs() -> None:
    workloads, schemes, total = planned_runs(parse(["--quick"]))
    assert total <= 12 and not schemes
    assert not any(w.isolated for w in workloads)  # no fresh process loading the model per run
    _, _, full = planned_runs(parse([]))
    assert full > 3 * total
    assert planned_runs(parse(["--quick", "--repeats", "2", "--workloads", "single"]))[2] == 4


def test_a_stage_of_unknown_length_says_it_is_still_going(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress_module, "HEARTBEAT_SECONDS", 0.02)
    out = io.StringIO()
    with Progress(1, out).stage("building kernels"):
        time.sleep(0.2)
    lines = out.getvalue().splitlines()
    assert lines[0] == "bench: building kernels ..."
    assert any("building kernels: still going" in line for line in lines[1:-1])
    assert lines[-1].startswith("bench: building kernels: done in ")


def test_ctrl_c_mid_run_prints_the_runs_that_finished_and_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0
    real = runner.run_checked

    def interrupted_at_the_third(*args):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1  # 1: warm-up, 2: single, 3: batch8
        if calls == 3:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(runner, "run_checked", interrupted_at_the_third)
    monkeypatch.setattr(bandwidth, "PROBE_BYTES", 32 * 2**20)  # the real probe's 512 MB is for real runs
    stdout, stderr = io.StringIO(), io.StringIO()
    argv = ["--tiny", "--quick", "--engines", "ours", "--threads", "1", "--workloads", "single,batch8"]
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        assert main(argv) == INTERRUPTED
    assert stderr.getvalue().startswith("bench: 2 runs planned")  # before anything slow
    text = stdout.getvalue()
    assert "interrupted; the 1 of 2 runs that finished" in text
    rows = [line.split() for line in text.splitlines() if line.startswith(("single", "batch8"))]
    assert rows and all(row[0] == "single" for row in rows)
    assert all(row[-1] != "n/a" for row in rows)
    assert "memory bandwidth: " in text and "GB/s (1-thread read of 32 MB" in text
    assert "limit: a one-stream decode step reads " in text
    (limit_row,) = [line.split() for line in text.splitlines() if "% of limit" in line]
    assert limit_row[0] == "single" and limit_row[-1].endswith("%")
