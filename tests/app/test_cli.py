"""The `lfm-chat` command line: help, version, validation, and the `bench` dispatch."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from app import __version__
from app.cli import build_parser, main, options_from_args


def test_help_lists_the_documented_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in (
        "--model",
        "--demo",
        "--panes",
        "--device",
        "--dtype",
        "--quantize",
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--system",
        "--temperature",
        "--top-p",
        "--max-tokens",
    ):
        assert flag in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"lfm-chat {__version__}"


def test_data_dir_comes_from_the_flag_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LFM_CHAT_DATA_DIR", "/tmp/from-env")
    assert options_from_args(build_parser().parse_args([])).data_dir == Path("/tmp/from-env")
    args = build_parser().parse_args(["--data-dir", "/tmp/from-flag"])
    assert options_from_args(args).data_dir == Path("/tmp/from-flag")


def test_flags_become_engine_and_chat_options() -> None:
    args = build_parser().parse_args(
        ["--demo", "--panes", "3", "--max-num-seqs", "4", "--system", "Be brief.", "--temperature", "0"]
    )
    options = options_from_args(args)
    assert (options.demo, options.panes, options.engine.max_num_seqs) == (True, 3, 4)
    assert (options.engine.dtype, options.engine.kv_cache_memory_mb) == ("float32", 64)  # a toy model
    assert (options.chat.system_prompt, options.chat.temperature) == ("Be brief.", 0.0)
    assert options_from_args(build_parser().parse_args(["--quantize", "int8"])).engine.quantize == "int8"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--panes", "0"], "--panes must be between 1 and"),
        (["--temperature", "-1"], "temperature must be"),
        (["--top-p", "2"], "top_p must be"),
        (["--max-num-seqs", "512"], "max_num_batched_tokens must be >= max_num_seqs"),
    ],
)
def test_bad_values_are_one_line_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_bench_is_dispatched_to_bench_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    fake = types.ModuleType("bench.cli")
    fake.main = lambda argv: seen.append(argv) or 7  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "bench.cli", fake)
    assert main(["bench", "--quick"]) == 7
    assert seen == [["--quick"]]


def test_bench_missing_is_a_one_line_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "bench.cli", None)  # import fails as if the module were absent
    assert main(["bench"]) == 1
    assert capsys.readouterr().err.count("\n") == 1
