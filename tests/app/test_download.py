"""`lfm-chat download`, --revision, and a first download's bytes on the loading screen (no network used)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Label, ProgressBar

from app.app import LfmChatApp
from app.ui.screens.loading import LoadingScreen
from cli.chat import build_parser, options_from_args
from cli.main import main
from model.checkpoint import hub
from model.checkpoint.hub_progress import BYTES, Transfer
from tests.app.pilot_helpers import MakeOptions, chat_screen, wait_until
from tests.waiting import HANG_GUARD

ROOT = Path(__file__).resolve().parents[2]
REPO_ID = "LiquidAI/LFM2.5-1.2B-Instruct"


def fake_snapshot_download(folder: Path, calls: list[dict[str, Any]]) -> Any:
    """huggingface_hub's download call, landing ``folder`` (the network is what it would have used)."""

    def download(repo_id: str, **kwargs: Any) -> str:
        calls.append({"repo_id": repo_id, **kwargs})
        return str(folder)

    return download


def test_download_says_where_the_files_are_and_how_to_run_them(
    tiny_ckpt: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(hub, "snapshot_download", fake_snapshot_download(tiny_ckpt, calls))
    assert main(["download", REPO_ID, "--revision", "v1.1"]) == 0
    out = capsys.readouterr().out
    assert f"Downloaded {REPO_ID} (revision v1.1) into the Hugging Face cache: {tiny_ckpt}" in out
    assert f"lfm-chat --model {REPO_ID} --revision v1.1" in out
    assert [(c["repo_id"], c["revision"], c["local_dir"]) for c in calls] == [(REPO_ID, "v1.1", None)]


def test_download_to_a_local_dir_for_an_air_gapped_machine(
    tiny_ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(hub, "snapshot_download", fake_snapshot_download(tiny_ckpt, calls))
    assert main(["download", REPO_ID, "--local-dir", str(tmp_path / "copy")]) == 0
    assert calls[0]["local_dir"] == tmp_path / "copy" and calls[0]["revision"] is None
    assert f"Run it: lfm-chat --model {tiny_ckpt}" in capsys.readouterr().out


def test_download_offline_is_one_paragraph_that_says_what_to_do(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env.update(HF_HOME=str(tmp_path), HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-m", "cli", "download", REPO_ID],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("lfm-chat download: Model not available: ") and "HF_HUB_OFFLINE" in line


def test_revision_is_a_hub_option(tiny_ckpt: Path, capsys: pytest.CaptureFixture[str]) -> None:
    options = options_from_args(build_parser().parse_args(["--model", REPO_ID, "--revision", "v1.1"]))
    assert (options.revision, options.model_label) == ("v1.1", f"{REPO_ID}@v1.1")
    with pytest.raises(SystemExit):
        main(["--model", str(tiny_ckpt), "--revision", "main"])
    [line] = capsys.readouterr().err.splitlines()
    assert "--revision picks a version of a Hub repo, not of --model" in line


async def test_a_first_download_shows_its_bytes_on_the_loading_screen(
    make_options: MakeOptions, tiny_ckpt: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    finish = threading.Event()
    seen: dict[str, Any] = {}

    def resolve(model: str, **kwargs: Any) -> Path:
        seen.update(model=model, **kwargs)
        kwargs["on_transfer"](Transfer(350_000_000, 709_000_000, BYTES))
        finish.wait(HANG_GUARD)
        return tiny_ckpt

    monkeypatch.setattr(hub, "resolve_checkpoint", resolve)
    app = LfmChatApp(make_options(model=REPO_ID, revision="v1.1"))
    async with app.run_test() as pilot:
        screen = app.screen
        assert isinstance(screen, LoadingScreen)
        stage = screen.query_one("#loading-stage", Label)
        await wait_until(pilot, lambda: "MB" in str(stage.render()), "the byte count")
        assert str(stage.render()) == f"downloading {REPO_ID}@v1.1: 350.0 MB of 709.0 MB…"
        assert screen.query_one(ProgressBar).percentage == pytest.approx(350 / 709)
        finish.set()
        await chat_screen(app, pilot)
    assert (seen["model"], seen["revision"]) == (REPO_ID, "v1.1")
