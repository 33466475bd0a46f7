"""`lfm-chat serve`'s command line: safe binding, one-line errors, and a real start and stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from bench.served import free_port, wait_until_healthy
from cli.serve import API_KEY_ENV, api_key, build_parser, check_exposure, is_loopback
from cli.serve import run as main

ROOT = Path(__file__).resolve().parents[2]


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    code = exit_info.value.code
    return (code if isinstance(code, int) else 1), capsys.readouterr().err


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "localhost"])
def test_loopback_addresses(host: str) -> None:
    assert is_loopback(host)
    check_exposure(host, None)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "example.com"])
def test_other_addresses_need_a_key(host: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert not is_loopback(host)
    check_exposure(host, "secret")
    code, err = run_main(["--host", host, "--demo"], capsys)
    assert code == 2
    assert err.count("\n") == 1 and f"--host {host}" in err and "--api-key" in err


def test_an_empty_key_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_main(["--api-key", "", "--demo"], capsys)
    assert code == 2 and "--api-key is empty" in err


def test_an_empty_key_from_the_environment_is_named_as_such(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(API_KEY_ENV, "")
    code, err = run_main(["--demo"], capsys)
    assert code == 2 and f"${API_KEY_ENV} is empty" in err and "--api-key is empty" not in err


def test_the_key_can_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, "from-env")
    assert api_key(build_parser().parse_args([])) == ("from-env", f"${API_KEY_ENV}")
    assert api_key(build_parser().parse_args(["--api-key", "flag"])) == ("flag", "--api-key")


def test_help_lists_server_model_engine_and_sampling_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for flag in ("--host", "--port", "--api-key", "--served-model-name", "--max-tokens", "--max-waiting",
                 "--max-connections", "--header-timeout", "--body-timeout", "--max-body-bytes",
                 "--model", "--demo", "--dtype", "--max-num-seqs", "--temperature", "--top-k"):  # fmt: skip
        assert flag in out, flag
    assert "--panes" not in out and "--data-dir" not in out


def test_engine_flag_mistakes_are_the_apps_one_line_errors(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_main(["--max-num-seqs", "64", "--max-num-batched-tokens", "8"], capsys)
    assert code == 2 and "--max-num-batched-tokens (8) must be at least --max-num-seqs (64)" in err
    code, err = run_main(["--model", "/no/such/dir"], capsys)
    assert code == 1 and "no such directory" in err
    code, err = run_main(["--host", "0.0.0.0", "--api-key", "k", "--model", "/no/such/dir"], capsys)
    assert code == 1 and "no such directory" in err  # a keyed public bind gets as far as the model


def test_serve_starts_answers_and_stops_on_ctrl_c(tiny_ckpt: Path) -> None:
    port = free_port()
    argv = ["--model", str(tiny_ckpt), "--dtype", "float32", "--port", str(port)]
    argv += ["--served-model-name", "tiny-cli", "--temperature", "0"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "cli", "serve", *argv],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(process, url, "lfm-chat serve", 120)
        hello = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
        reply = httpx.post(f"{url}/v1/chat/completions", json=hello)
        assert reply.status_code == 200 and reply.json()["model"] == "tiny-cli"
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert f"tiny-cli on http://127.0.0.1:{port}/v1" in err
