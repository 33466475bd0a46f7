"""Downloads: --revision reaches huggingface_hub, its bars become one byte count, errors say what to do.

No network here: huggingface_hub's snapshot_download (the call that would reach the Hub) is
replaced where a download must happen, and the offline cases run the real one on a fake cache.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub.errors import LocalEntryNotFoundError, RevisionNotFoundError
from tqdm.auto import tqdm
from tqdm.contrib.concurrent import thread_map

from model.checkpoint import hub
from model.checkpoint.hub_progress import BYTES, DownloadMeter, Transfer
from model.errors import CheckpointError, ModelNotAvailableError

ROOT = Path(__file__).resolve().parents[2]
REPO_ID = "LiquidAI/LFM2.5-1.2B-Instruct"


class FakeHub:
    """snapshot_download as seen from lfm-chat: nothing cached, then a download that lands ``folder``."""

    def __init__(self, folder: Path, error: Exception | None = None) -> None:
        self.folder, self.error = folder, error
        self.calls: list[dict[str, Any]] = []

    def __call__(self, repo_id: str, **kwargs: Any) -> str:
        self.calls.append({"repo_id": repo_id, **kwargs})
        if kwargs.get("local_files_only"):
            raise LocalEntryNotFoundError("not cached")
        if self.error is not None:
            raise self.error
        bar_class = kwargs.get("tqdm_class")
        if bar_class is not None:  # as huggingface_hub >= 1 reports bytes: a byte bar whose total grows
            with bar_class(total=0, unit=BYTES, desc="Downloading") as bar:
                bar.total = 1000
                bar.refresh()
                bar.update(1000)
        return str(self.folder)


def test_revision_and_progress_reach_the_cache_lookup_and_the_download(
    tiny_ckpt: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeHub(tiny_ckpt)
    monkeypatch.setattr(hub, "snapshot_download", fake)
    transfers: list[Transfer] = []
    assert hub.resolve_checkpoint(REPO_ID, revision="v1.1", on_transfer=transfers.append) == tiny_ckpt
    lookup, download = fake.calls
    assert (lookup["revision"], lookup["local_files_only"]) == ("v1.1", True)
    assert download["revision"] == "v1.1" and issubclass(download["tqdm_class"], tqdm)
    assert "additional_chat_templates/*.jinja" in download["allow_patterns"]
    assert transfers[-1] == Transfer(1000, 1000, BYTES)


def test_download_into_a_local_dir_uses_the_hubs_own_bars(
    tiny_ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeHub(tiny_ckpt)
    monkeypatch.setattr(hub, "snapshot_download", fake)
    assert hub.download_checkpoint(REPO_ID, "main", local_dir=tmp_path / "out") == tiny_ckpt
    [call] = fake.calls  # no cache lookup: a download always asks the Hub
    assert (call["revision"], call["local_dir"], call["tqdm_class"]) == ("main", tmp_path / "out", None)


def test_an_unknown_revision_is_named_with_what_to_do(
    tiny_ckpt: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    error = RevisionNotFoundError.__new__(
        RevisionNotFoundError
    )  # its constructor's signature varies by version
    Exception.__init__(error, "404 Client Error: Revision Not Found")
    monkeypatch.setattr(hub, "snapshot_download", FakeHub(tiny_ckpt, error))
    with pytest.raises(ModelNotAvailableError) as info:
        hub.resolve_checkpoint(REPO_ID, revision="v9")
    message = str(info.value)
    assert f"{REPO_ID} has no revision 'v9'" in message and "\n" not in message
    assert f"lfm-chat download {REPO_ID} --local-dir DIR" in message


def test_a_local_directory_takes_no_revision(tiny_ckpt: Path) -> None:
    with pytest.raises(CheckpointError, match="revisions belong to Hub repos"):
        hub.resolve_checkpoint(str(tiny_ckpt), revision="main")


_RESOLVE = """
import sys
from model.checkpoint.hub import resolve_checkpoint
print(resolve_checkpoint(sys.argv[1], progress=False, revision=sys.argv[2]))
"""


def test_offline_a_cached_revision_is_found_by_branch_name(tiny_ckpt: Path, tmp_path: Path) -> None:
    """The real snapshot_download, offline, on a cache laid out as it leaves one (refs/NAME -> commit)."""
    repo_dir = tmp_path / "hub" / ("models--" + REPO_ID.replace("/", "--"))
    commit = "89abcdef0123456789abcdef0123456789abcdef"
    shutil.copytree(tiny_ckpt, repo_dir / "snapshots" / commit)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "v1.1").write_text(commit)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env.update(HF_HOME=str(tmp_path), HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-c", _RESOLVE, REPO_ID, "v1.1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()) == repo_dir / "snapshots" / commit


def test_byte_bars_fold_into_one_figure_and_print_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """huggingface_hub >= 1: a files bar, plus bars for bytes received and written that move side by side."""
    reports: list[Transfer] = []
    bar_class = DownloadMeter(reports.append, interval=0).bar_class()
    files = bar_class(total=2, desc="Fetching 2 files")
    received = bar_class(total=0, initial=0, unit=BYTES, unit_scale=True, desc="Downloading bytes")
    written = bar_class(total=0, initial=0, unit=BYTES, unit_scale=True, desc="Reconstructing")
    assert reports[-1] == Transfer(0, None, BYTES)
    for bar in (received, written):
        bar.total = 709_000_000
        bar.refresh()
    received.update(350_000_000)
    written.update(300_000_000)
    assert reports[-1] == Transfer(350_000_000, 709_000_000, BYTES)
    assert str(reports[-1]) == "350.0 MB of 709.0 MB" and reports[-1].fraction == pytest.approx(
        0.4937, abs=1e-4
    )
    files.update(2)
    for bar in (files, received, written):
        bar.close()
    assert capsys.readouterr() == ("", "")


def test_without_byte_bars_files_are_counted() -> None:
    """Older huggingface_hub passes tqdm_class only to its files bar (through tqdm's thread_map)."""
    reports: list[Transfer] = []
    bar_class = DownloadMeter(reports.append, interval=0).bar_class()
    assert thread_map(lambda name: name, ["a", "b", "c"], tqdm_class=bar_class, max_workers=2) == [
        "a",
        "b",
        "c",
    ]
    assert reports[-1] == Transfer(3, 3, "files") and str(reports[-1]) == "3 of 3 files"


def test_reports_are_throttled_but_the_last_one_always_comes() -> None:
    reports: list[Transfer] = []
    bar_class = DownloadMeter(reports.append, interval=3600).bar_class()
    with bar_class(total=100, unit=BYTES) as bar:
        for _ in range(100):
            bar.update(1)
    assert reports == [Transfer(0, 100, BYTES), Transfer(100, 100, BYTES)]
