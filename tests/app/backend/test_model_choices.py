"""What the model picker lists: the Hugging Face cache (missing or corrupt is no choice, not a crash),
remembered --model paths (an untrusted row: bounded and cleaned), and the demo."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from app.backend.model_choices import (
    MAX_CACHE_MODELS,
    MAX_PATH_CHARS,
    MAX_RECENT_MODELS,
    clean_recent,
    hub_cache_repos,
    local_choices,
    with_recent,
)
from app.core.sanitize import strip_control
from app.store.rows import RowChecker


def cached_repo(cache: Path, repo_id: str) -> None:
    """A repo as huggingface_hub lays it out in its cache: one snapshot of one file."""
    folder = cache / f"models--{repo_id.replace('/', '--')}"
    (folder / "blobs").mkdir(parents=True)
    (folder / "blobs" / "abc").write_text("{}", encoding="utf-8")
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("0" * 40, encoding="utf-8")
    snapshot = folder / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").symlink_to(folder / "blobs" / "abc")


def test_the_cache_lists_its_lfm_repos_only(tmp_path: Path) -> None:
    for repo in ("LiquidAI/LFM2-350M", "LiquidAI/LFM2.5-1.2B-Instruct", "openai/gpt2"):
        cached_repo(tmp_path, repo)
    assert hub_cache_repos(tmp_path) == ["LiquidAI/LFM2-350M", "LiquidAI/LFM2.5-1.2B-Instruct"]


def test_a_huge_cache_lists_at_most_the_cap(tmp_path: Path) -> None:
    for n in range(MAX_CACHE_MODELS + 5):
        cached_repo(tmp_path, f"LiquidAI/LFM2-{n:03d}")
    assert len(hub_cache_repos(tmp_path)) == MAX_CACHE_MODELS


def test_a_missing_or_corrupt_cache_lists_nothing_and_the_demo_stays(tmp_path: Path) -> None:
    assert hub_cache_repos(tmp_path / "nowhere") == []
    (tmp_path / "a-file").write_text("not a cache", encoding="utf-8")
    assert hub_cache_repos(tmp_path / "a-file") == []
    (tmp_path / "models--broken").mkdir()  # no snapshots, no refs: huggingface_hub calls it corrupt
    cached_repo(tmp_path, "LiquidAI/LFM2-350M")
    assert hub_cache_repos(tmp_path) == ["LiquidAI/LFM2-350M"]  # the sound repos still list
    assert [c.source.demo for c in local_choices(None, tmp_path / "nowhere") if c.source] == [True]


def test_remembered_paths_are_bounded_newest_first_and_only_folders(tmp_path: Path) -> None:
    row = None
    folders = [tmp_path / f"ckpt-{n}" for n in range(MAX_RECENT_MODELS + 3)]
    for folder in folders:
        folder.mkdir()
        row = with_recent(row, str(folder))
    row = with_recent(row, str(folders[0]))  # used again: first, not twice
    assert with_recent(row, "LiquidAI/LFM2-350M") is None  # a Hub id is in the cache, not remembered
    kept = clean_recent(row)
    assert len(kept) == MAX_RECENT_MODELS and kept[0] == str(folders[0].resolve())
    assert len(set(kept)) == len(kept)
    folders[1].rmdir()
    labels = [c.label for c in local_choices(row, tmp_path / "no-cache")]
    assert folders[0].name in labels and folders[1].name not in labels


def test_a_tampered_row_keeps_only_clean_absolute_paths() -> None:
    row = json.dumps(
        [
            "/ok",
            "relative",
            "/evil\x1b]0;PWNED\x07",
            "/" + "x" * MAX_PATH_CHARS,
            12,
            None,
            ["/"],
            "/ok",
            "/a\nb",
        ]
    )
    assert clean_recent(row) == ["/ok"]
    assert clean_recent(b'["/ok"]') == ["/ok"]
    assert clean_recent("[" * 100_000) == [] and clean_recent(7) == [] and clean_recent("x" * 10**6) == []


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=300), st.text(max_size=300), st.lists(st.text(max_size=40), max_size=20)))
def test_any_row_gives_clean_bounded_paths(raw: object) -> None:
    row = json.dumps(raw) if isinstance(raw, list) else raw
    kept = clean_recent(row)
    assert len(kept) <= MAX_RECENT_MODELS
    assert all(strip_control(p) == p and len(p) <= MAX_PATH_CHARS and p.startswith("/") for p in kept)


def test_a_saved_pane_model_is_one_clean_bounded_line() -> None:
    check = RowChecker()
    settings_row = json.dumps({"model": "evil\x1b]52;c;cHduZWQK\x07\nid" + "x" * 5000, "temperature": 0.5})
    loaded = check.settings(settings_row, "conversation 1")
    assert "\x1b" not in loaded.model and "\n" not in loaded.model and len(loaded.model) <= 256
    assert loaded.temperature == 0.5 and any("model id" in r for r in check.repairs)
