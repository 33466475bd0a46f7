"""resolve_checkpoint: local dirs, clear errors, and the offline Hub paths with the real huggingface_hub.

huggingface_hub reads HF_HOME / HF_HUB_OFFLINE once at import, so Hub cases run in a fresh
interpreter with those variables set; no network is ever contacted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from model.checkpoint.hub import resolve_checkpoint
from model.errors import CheckpointError

ROOT = Path(__file__).resolve().parents[2]
REPO_ID = "LiquidAI/LFM2-350M"
_RESOLVE = """
import sys
from model.errors import ModelNotAvailableError
from model.checkpoint.hub import resolve_checkpoint
try:
    print(resolve_checkpoint(sys.argv[1], progress=False))
except ModelNotAvailableError as exc:
    print(exc)
    sys.exit(3)
"""


def _resolve_offline(repo_id: str, hf_home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env.update(HF_HOME=str(hf_home), HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-c", _RESOLVE, repo_id],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _fake_hub_cache(hf_home: Path, repo_id: str, files_from: Path, names: list[str]) -> Path:
    """Lay out HF_HOME/hub the way snapshot_download leaves it: refs/main -> snapshots/<commit>/files."""
    repo_dir = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = repo_dir / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(commit)
    for name in names:
        shutil.copy(files_from / name, snapshot / name)
    return snapshot


def test_local_directory_is_returned_as_is(tiny_ckpt: Path) -> None:
    assert resolve_checkpoint(str(tiny_ckpt)) == tiny_ckpt


@pytest.mark.parametrize("name", ["./nope", "/x/y", "no-such-model", "~/missing/ckpt", "a/b/c"])
def test_missing_directory_is_a_one_line_error(name: str) -> None:
    with pytest.raises(CheckpointError) as info:
        resolve_checkpoint(name)
    message = str(info.value)
    assert message.startswith(f"no checkpoint directory at {name!r}") and "\n" not in message


def test_a_file_is_not_a_checkpoint(tiny_ckpt: Path) -> None:
    with pytest.raises(CheckpointError, match="is a file"):
        resolve_checkpoint(str(tiny_ckpt / "config.json"))


def test_offline_without_cache_explains_how_to_proceed(tmp_path: Path) -> None:
    result = _resolve_offline(REPO_ID, tmp_path)
    assert result.returncode == 3, result.stderr
    message = result.stdout.strip()
    assert "\n" not in message and "Traceback" not in message
    assert REPO_ID in message and "HF_HUB_OFFLINE" in message
    assert "--model" in message and "--demo" in message and f"download {REPO_ID} --local-dir" in message


def test_offline_uses_cached_snapshot(tiny_ckpt: Path, tmp_path: Path) -> None:
    names = sorted(p.name for p in tiny_ckpt.iterdir())
    snapshot = _fake_hub_cache(tmp_path, REPO_ID, tiny_ckpt, names)
    result = _resolve_offline(REPO_ID, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert Path(result.stdout.strip()) == snapshot


def test_offline_partial_snapshot_without_weights_is_not_used(tiny_ckpt: Path, tmp_path: Path) -> None:
    _fake_hub_cache(tmp_path, REPO_ID, tiny_ckpt, ["config.json", "tokenizer.json"])
    result = _resolve_offline(REPO_ID, tmp_path)
    assert result.returncode == 3 and "--model" in result.stdout
