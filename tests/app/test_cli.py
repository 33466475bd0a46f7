"""The `lfm-chat` command line: help, version, one-line errors before the UI, and the `bench` dispatch."""

from __future__ import annotations

import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from app import __version__
from app.core.options import AppOptions
from app.store.database import Store
from cli import flags
from cli.chat import build_parser, options_from_args
from cli.flags import check_model
from cli.main import main
from engine.core.config import EngineConfig
from engine.loop.launch import engine_kwargs
from model.quant.apply import QUANTIZED_LINEARS


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
        "--weights-12bit",
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--system",
        "--temperature",
        "--top-p",
        "--top-k",
        "--min-p",
        "--repetition-penalty",
        "--revision",
        "--max-tokens",
    ):
        assert flag in out


def test_the_usage_line_names_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    """The first line is what a user reads: it must say the other commands exist."""
    with pytest.raises(SystemExit):
        main(["--help"])
    first = capsys.readouterr().out.splitlines()[0]
    assert all(command in first for command in ("chat", "serve", "download", "bench")), first


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
    assert (options.demo, options.panes) == (True, 3)
    engine = EngineConfig(**engine_kwargs(options.source, options.engine))  # as the loader thread builds it
    assert (engine.max_num_seqs, engine.dtype, engine.kv_cache_memory_mb) == (4, "float32", 64)  # a toy model
    real = EngineConfig(**engine_kwargs(replace(options.source, demo=False), options.engine))
    assert (real.dtype, real.kv_cache_memory_mb) != ("float32", 64)  # a switch to a real model drops them
    assert (options.chat.system_prompt, options.chat.temperature) == ("Be brief.", 0.0)
    quantized = options_from_args(build_parser().parse_args(["--quantize", "int8"]))
    assert EngineConfig(**quantized.engine).quantize == "int8"
    plain = options_from_args(build_parser().parse_args(["--weights-12bit", "off"]))
    assert EngineConfig(**plain.engine).weights_12bit == "off"


def test_sampling_follows_the_model_card_and_each_flag_replaces_one_value() -> None:
    lfm25 = options_from_args(build_parser().parse_args(["--model", "LiquidAI/LFM2.5-1.2B-Instruct"]))
    assert lfm25.sampling_defaults().name == "LFM2.5 card defaults"
    chat = lfm25.chat
    assert (chat.temperature, chat.top_k, chat.top_p, chat.min_p) == (0.1, 50, 0.1, 0.0)
    assert lfm25.chat.preset == "LFM2.5 card defaults"  # the name each new pane shows
    argv = ["--model", "LiquidAI/LFM2.5-1.2B-Instruct", "--top-k", "40", "--min-p", "0.05"]
    flagged = options_from_args(build_parser().parse_args(argv))
    defaults = flagged.sampling_defaults()
    assert defaults.name == "LFM2.5 card defaults + --top-k, --min-p"
    assert defaults.values == {
        "temperature": 0.1,
        "top_k": 40,
        "top_p": 0.1,
        "min_p": 0.05,
        "repetition_penalty": 1.05,
    }
    assert (flagged.chat.top_k, flagged.chat.min_p) == (40, 0.05)
    assert flagged.chat.preset == defaults.name
    lfm2 = options_from_args(build_parser().parse_args(["--demo"]))  # the toy model samples as LFM2
    assert (lfm2.sampling_defaults().name, lfm2.chat.temperature, lfm2.chat.min_p) == (
        "LFM2 card defaults",
        0.3,
        0.15,
    )


def test_every_dtype_and_scheme_the_cli_offers_is_one_the_engine_runs() -> None:
    """The names are stated once (engine/core/choices.py, model/quant/); each must be a real choice."""
    assert flags.DTYPES[0] == "auto" and flags.QUANTIZATIONS[0] == "none"
    for dtype in flags.DTYPES:
        EngineConfig(dtype=dtype)
    for scheme in flags.QUANTIZATIONS:
        EngineConfig(quantize=scheme)
    assert tuple(QUANTIZED_LINEARS) == flags.QUANTIZATIONS[1:]


def one_error_line(capsys: pytest.CaptureFixture[str], prog: str = "lfm-chat") -> str:
    """stderr holds exactly one line, the error: no usage dump, no traceback."""
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), captured.err
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--max-num-seqs", "0"], "--max-num-seqs: must be a whole number >= 1"),
        (["--max-num-seqs", "512"], "--max-num-batched-tokens (256) must be at least --max-num-seqs (512)"),
        (["--max-num-batched-tokens", "-5"], "--max-num-batched-tokens: must be a whole number >= 1"),
        (["--max-num-batched-tokens", "lots"], "--max-num-batched-tokens: must be a whole number >= 1"),
        (["--panes", "0"], "--panes: must be a whole number from 1 to 9"),
        (["--panes", "10"], "--panes: must be a whole number from 1 to 9"),
        (["--temperature", "-1"], "--temperature must be "),
        (["--temperature", "warm"], "--temperature: invalid float value"),
        (["--top-p", "2"], "--top-p must be a number in (0, 1]"),
        (["--top-p", "0"], "--top-p must be a number in (0, 1]"),
        (["--top-k", "-2"], "--top-k must be an int >= -1 (0 or -1 = off), got -2"),
        (["--top-k", "0.5"], "--top-k: invalid int value"),
        (["--min-p", "1.5"], "--min-p must be a number in [0, 1]"),
        (["--min-p", "nan"], "--min-p must be a number in [0, 1]"),
        (["--repetition-penalty", "0"], "--repetition-penalty must be a number in [0.01, 100]"),
        (["--repetition-penalty", "high"], "--repetition-penalty: invalid float value"),
        (["--max-tokens", "0"], "--max-tokens: must be a whole number >= 1"),
        (["--device", "gpu"], "--device: must be cpu, cuda or cuda:N"),
        (["--dtype", "float16"], "--dtype: invalid choice"),
        (["--quantize", "int3"], "--quantize: invalid choice"),
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["--demo", "--revision", "v1"], "--revision picks a version of a Hub repo, not of --demo"),
        (["--model", "/tmp", "--demo"], "--demo runs a tiny random checkpoint, not --model /tmp"),
        (["download"], "the following arguments are required: MODEL"),
        (["download", "no-such-model"], "'no-such-model' is not a Hub repo id"),
        (["download", "LiquidAI/LFM2-350M", "--nope"], "unrecognized arguments: --nope"),
    ],
)
def test_a_bad_value_is_one_line_that_names_the_flag(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    prog = "lfm-chat download" if argv[:1] == ["download"] else "lfm-chat"
    line = one_error_line(capsys, prog)
    assert says in line and line.endswith(f"(see {prog} --help)")


@pytest.fixture
def no_ui(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """main must stop before the UI: importing app.app (the Textual app) now fails loudly."""
    monkeypatch.setitem(sys.modules, "app.app", None)
    monkeypatch.setenv("LFM_CHAT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)


def fails_before_the_ui(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line of a launch this machine cannot honour (exit code 1)."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 1
    return one_error_line(capsys)


@pytest.mark.usefixtures("no_ui")
@pytest.mark.parametrize("model", ["./LFM2-350M", "../LFM2-350M", "~/no-such-lfm2", "/no/such/lfm2", "LFM2"])
def test_a_missing_model_path_fails_before_the_ui(model: str, capsys: pytest.CaptureFixture[str]) -> None:
    line = fails_before_the_ui(["--model", model], capsys)
    assert f"--model {model}: no such directory" in line and "LiquidAI/LFM2-350M" in line


@pytest.mark.usefixtures("no_ui")
def test_a_missing_draft_model_path_fails_before_the_ui(capsys: pytest.CaptureFixture[str]) -> None:
    line = fails_before_the_ui(["--demo", "--draft-model", "./no-such-draft"], capsys)
    assert "--draft-model ./no-such-draft: no such directory" in line and "--demo" not in line


@pytest.mark.usefixtures("no_ui")
def test_a_model_directory_without_config_fails_before_the_ui(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "model.safetensors").touch()
    assert "that directory has no config.json" in fails_before_the_ui(["--model", "weights"], capsys)
    assert "that is a file" in fails_before_the_ui(["--model", "weights/model.safetensors"], capsys)


def test_hub_ids_and_checkpoint_directories_pass_the_model_check(tiny_ckpt: Path) -> None:
    """Only a local path is checked before the UI: a Hub id is the loader's to fetch."""
    check_model("LiquidAI/LFM2-350M")
    check_model(str(tiny_ckpt))


@pytest.mark.usefixtures("no_ui")
@pytest.mark.skipif(torch.backends.cuda.is_built(), reason="this PyTorch has CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_on_a_cpu_only_torch_fails_before_the_ui(
    device: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = fails_before_the_ui(["--device", device], capsys)
    assert f"--device {device}: this PyTorch build has no CUDA; use --device cpu or install a CUDA" in line


@pytest.mark.usefixtures("no_ui")
def test_a_data_dir_that_is_a_file_fails_before_the_ui(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").touch()
    for data_dir in (tmp_path / "a-file", tmp_path / "a-file" / "below"):
        line = fails_before_the_ui(["--demo", "--data-dir", str(data_dir)], capsys)
        assert "--data-dir" in line and "a-file" in line


@pytest.mark.usefixtures("no_ui")
def test_a_data_dir_another_lfm_chat_uses_fails_before_the_ui(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "shared"
    other = Store(AppOptions(data_dir=data_dir).store_path)
    try:
        line = fails_before_the_ui(["--demo", "--data-dir", str(data_dir)], capsys)
    finally:
        other.close()
    assert "Another lfm-chat" in line and "--data-dir" in line


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
