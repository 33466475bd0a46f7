"""What the model picker lists: local checkpoints (the Hugging Face cache, `--model` paths used
before, the demo) or a server's `/v1/models`.

Torch-free: the picker lists on a thread while the chat stays responsive. Everything listed comes
from outside (the cache's folder names, a database row, a server's answer), so it is bounded and
cleaned here, where it enters: a row that is not a clean path is dropped, never repaired into a
different path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from app.core.sanitize import strip_control
from engine import ModelSource

RECENT_MODELS_KEY = "recent_models"
MAX_RECENT_MODELS = 10  # --model paths remembered, newest first
MAX_PATH_CHARS = 1024  # a remembered path longer than this is dropped
MAX_CACHE_MODELS = 50  # LFM repos listed from the Hugging Face cache
RECENT_STATE_CHARS = MAX_RECENT_MODELS * (MAX_PATH_CHARS + 8) + 2  # the JSON row itself


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """One line of the picker: what it shows (a local model as the title bar names it), and what
    choosing it runs.

    `source` for a local checkpoint (a path, a Hub repo id, the demo); `model_id` for a server's model.
    """

    label: str
    detail: str
    source: ModelSource | None = None
    model_id: str = ""


class ListsModels(Protocol):
    def list_models(self) -> list[dict[str, Any]]: ...


def clean_recent(raw: object) -> list[str]:
    """The remembered paths in a state row, as far as they are sound: a JSON list of clean, absolute
    paths, at most MAX_RECENT_MODELS; anything else in the row is left out."""
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    if not isinstance(raw, str) or len(raw) > RECENT_STATE_CHARS:
        return []
    try:
        rows = json.loads(raw)
    except (ValueError, RecursionError):
        return []
    paths = [row for row in rows if _clean_path(row)] if isinstance(rows, list) else []
    return list(dict.fromkeys(paths))[:MAX_RECENT_MODELS]


def _clean_path(row: object) -> bool:
    return (
        isinstance(row, str)
        and 0 < len(row) <= MAX_PATH_CHARS
        and strip_control(row) == row
        and "\n" not in row
        and "\t" not in row
        and Path(row).is_absolute()
    )


def with_recent(raw: object, path: str) -> str | None:
    """The state row with `path` (a checkpoint directory) remembered first; None when it is not a
    path worth remembering (a Hub id, a path too long to keep)."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        return None
    resolved = str(folder.resolve())
    if not _clean_path(resolved):
        return None
    kept = [p for p in clean_recent(raw) if p != resolved]
    return json.dumps([resolved, *kept][:MAX_RECENT_MODELS])


def hub_cache_repos(cache_dir: Path | None = None) -> list[str]:
    """LFM model repos in the Hugging Face cache, by name; none when the cache is missing or
    unreadable (a corrupt cache is not the picker's problem: the other choices still show)."""
    from huggingface_hub import scan_cache_dir

    try:
        info = scan_cache_dir(cache_dir)
    except Exception:  # CacheNotFound, CorruptedCacheException, OSError: the cache is just not listed
        return []
    names = sorted(
        repo.repo_id
        for repo in info.repos
        if repo.repo_type == "model" and "lfm" in repo.repo_id.lower() and repo.revisions
    )
    return [name for name in names if strip_control(name) == name][:MAX_CACHE_MODELS]


def local_choices(recent_row: object, cache_dir: Path | None = None) -> list[ModelChoice]:
    """Remembered checkpoint folders that still exist, the cache's LFM repos, then the demo."""
    folders = [(ModelSource(p), p) for p in clean_recent(recent_row) if Path(p).is_dir()]
    cached = [(ModelSource(repo), "Hugging Face cache") for repo in hub_cache_repos(cache_dir)]
    demo = (ModelSource(demo=True), "for trying the app")
    return [ModelChoice(source.label, detail, source) for source, detail in [*folders, *cached, demo]]


def server_choices(server: ListsModels) -> list[ModelChoice]:
    """The server's models (ids cleaned by the remote backend), with their context when it says."""
    from app.backend.remote import context_length

    choices = []
    for entry in server.list_models():
        length = context_length(entry)
        detail = f"context {length}" if length else "context not given"
        choices.append(ModelChoice(entry["id"], detail, model_id=entry["id"]))
    return choices
