"""The benchmark harness end to end on a tiny checkpoint: it runs, and the report has every row.

Never checks a speed: timings on a shared machine are noise. Only the shape of the output.
"""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

import pytest

from bench.cli import main
from bench.workloads import WORKLOADS

pytestmark = pytest.mark.subprocess  # the RSS workload runs in a fresh process (bench/rss.py)
# in-process runs, progress-triggered arrivals, and the fresh-subprocess RSS path
SMOKE_WORKLOADS = ["single", "chats8", "long_prompt", "rss"]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("bench") / "results.json"
    argv = ["--tiny", "--quick", "--repeats", "1", "--threads", "1", "--workloads", ",".join(SMOKE_WORKLOADS)]
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main([*argv, "--markdown", "--json", str(out)]) == 0
    return stdout.getvalue(), json.loads(out.read_text())


def test_markdown_table_has_a_row_with_both_engines_and_a_ratio_per_metric(smoke_run):
    text, _ = smoke_run
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert table[0] == "| workload | metric | ours | transformers | ours/transformers |"
    rows = {(cells[0], cells[1].rsplit(" (", 1)[0]): cells for cells in (_cells(line) for line in table[2:])}
    for name in SMOKE_WORKLOADS:
        for metric in WORKLOADS[name].metrics:
            ours, theirs, ratio = rows[name, metric.name][2:]
            assert ours != "n/a" and theirs != "n/a" and ratio.endswith("x"), (name, metric.name)


def test_report_describes_the_machine_and_how_to_reproduce(smoke_run):
    text, _ = smoke_run
    assert "machine:" in text and "threads" in text
    assert "reproduce: `lfm-chat bench --tiny --quick" in text
    assert "chats8: 8 chats x (128 + 128), arriving 2 steps apart. transformers: static padded batch" in text


def test_json_keeps_every_run_and_the_ratios(smoke_run):
    _, results = smoke_run
    assert results["machine"]["threads"] == 1
    assert [w["name"] for w in results["workloads"]] == SMOKE_WORKLOADS
    for workload in results["workloads"]:
        for metric in workload["metrics"]:
            assert len(metric["runs"]["ours"]) == len(metric["runs"]["transformers"]) == 1
            assert metric["ratio_ours_to_transformers"] is not None


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip("|").split("|")]
