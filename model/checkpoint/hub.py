"""Resolve ``--model``: a local checkpoint directory, or a Hugging Face Hub repo id fetched into the cache.

The cache is tried first without touching the network, so a model downloaded once starts
offline (``download_checkpoint``, behind ``lfm-chat download``, always asks the Hub: that is how
a cached copy is refreshed). Every failure becomes one short paragraph the user can act on,
because the usual causes (no network, HF_HUB_OFFLINE, a typo in the name or revision, a gated
repo) all have simple fixes that a traceback would hide.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from huggingface_hub import constants, snapshot_download
from huggingface_hub.errors import (
    GatedRepoError,
    HFValidationError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import (
    are_progress_bars_disabled,
    disable_progress_bars,
    enable_progress_bars,
    validate_repo_id,
)

from model.checkpoint.hub_progress import DownloadMeter, Transfer
from model.checkpoint.progress import Progress
from model.errors import CheckpointError, ModelNotAvailableError

DEFAULT_MODEL = "LiquidAI/LFM2-350M"
# Only what lfm-chat reads: never the GGUF/ONNX variants or README images some repos carry.
CHECKPOINT_FILES = [
    "config.json",
    "*.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "additional_chat_templates/*.jinja",  # named templates ("tool_use"), as transformers reads them
    "special_tokens_map.json",
    "generation_config.json",
]


def resolve_checkpoint(
    name_or_path: str = DEFAULT_MODEL,
    progress: bool = True,
    revision: str | None = None,
    on_transfer: Callable[[Transfer], None] | None = None,
) -> Path:
    """The local checkpoint directory: ``name_or_path`` itself, or the Hub snapshot of that repo id.

    ``revision`` (a branch, tag or commit of a Hub repo) defaults to main. A download shows
    huggingface_hub's terminal bars if ``progress``, or reports to ``on_transfer`` instead.
    Raises CheckpointError for a path that is not a directory, ModelNotAvailableError when the
    Hub cannot provide the repo.
    """
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if revision is not None:
            raise CheckpointError(f"{name_or_path!r} is a local directory: revisions belong to Hub repos")
        return path
    if path.exists():
        raise CheckpointError(
            f"{name_or_path!r} is a file; --model takes a checkpoint directory or a Hub repo id"
        )
    if not is_repo_id(name_or_path):
        raise CheckpointError(
            f"no checkpoint directory at {name_or_path!r} (and it is not a Hub repo id like {DEFAULT_MODEL})"
        )
    cached = _cached_snapshot(name_or_path, revision)
    if cached is not None and _is_complete(cached):
        return cached
    return download_checkpoint(name_or_path, revision, progress=progress, on_transfer=on_transfer)


def locate_checkpoint(name_or_path: str, progress: Progress | None, revision: str | None = None) -> Path:
    """The load path's first stage (engine/loop/build.py): the checkpoint directory of a local path or Hub
    repo id (at `revision`), found in the Hub cache or downloaded.

    A download reports its bytes to `progress`; without one, huggingface_hub's own bars show in the
    terminal. Torch-free, so that a launch can run it before importing torch.
    """
    if progress is None:
        return resolve_checkpoint(name_or_path, revision=revision)
    progress("locating checkpoint", None)
    label = checkpoint_label(name_or_path, revision)
    return resolve_checkpoint(
        name_or_path,
        revision=revision,
        on_transfer=lambda transfer: progress(f"downloading {label}: {transfer}", transfer.fraction),
    )


def checkpoint_label(name_or_path: str, revision: str | None = None) -> str:
    """A checkpoint as a title names it: a repo id (@revision), or a local directory's name."""
    if Path(name_or_path).expanduser().is_dir():
        return Path(name_or_path).name
    return name_or_path if revision is None else f"{name_or_path}@{revision}"


def download_checkpoint(
    repo_id: str,
    revision: str | None = None,
    local_dir: Path | None = None,
    progress: bool = True,
    on_transfer: Callable[[Transfer], None] | None = None,
) -> Path:
    """Fetch or refresh the files lfm-chat reads from a Hub repo, into the HF cache or ``local_dir``.

    Progress as in resolve_checkpoint. Raises ModelNotAvailableError, saying how to proceed.
    """
    tqdm_class = DownloadMeter(on_transfer).bar_class() if on_transfer is not None else None
    try:
        with _progress_bars(progress and tqdm_class is None):
            folder = Path(
                snapshot_download(
                    repo_id,
                    allow_patterns=CHECKPOINT_FILES,
                    revision=revision,
                    local_dir=local_dir,
                    tqdm_class=tqdm_class,
                )
            )
    # The HTTP client behind huggingface_hub changed across versions (requests, httpx, httpx2),
    # so network failures have no common type: any failure of the download is reported.
    except Exception as exc:
        raise ModelNotAvailableError(_not_available(repo_id, _failure(repo_id, revision, exc))) from None
    if not _is_complete(folder):
        raise ModelNotAvailableError(_not_available(repo_id, _incomplete(repo_id)))
    return folder


def is_repo_id(name: str) -> bool:
    """``org/name`` as the Hub spells it. Bare names are taken as mistyped local paths."""
    if name.count("/") != 1:
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def _cached_snapshot(repo_id: str, revision: str | None) -> Path | None:
    """The repo's snapshot in the local HF cache, found without any network access."""
    try:
        return Path(
            snapshot_download(
                repo_id, allow_patterns=CHECKPOINT_FILES, revision=revision, local_files_only=True
            )
        )
    except LocalEntryNotFoundError:
        return None


def _is_complete(folder: Path) -> bool:
    """An interrupted download can leave a snapshot without weights; such a folder is not usable."""
    return (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))


@contextmanager
def _progress_bars(enabled: bool) -> Iterator[None]:
    """Hide huggingface_hub's tqdm bars for one call, leaving a user's own setting alone."""
    if enabled or are_progress_bars_disabled():
        yield
        return
    disable_progress_bars()
    try:
        yield
    finally:
        enable_progress_bars()


def _failure(repo_id: str, revision: str | None, exc: Exception) -> str:
    """What went wrong, in the user's terms."""
    if isinstance(exc, RevisionNotFoundError):
        return f"{repo_id} has no revision {revision!r} on the Hugging Face Hub (a branch, tag or commit)."
    if isinstance(exc, GatedRepoError):
        return f"{repo_id} is gated: accept its license on huggingface.co, then log in with `hf auth login`."
    if isinstance(exc, RepositoryNotFoundError):
        return f"the Hugging Face Hub has no model {repo_id} (check the name; a private repo needs a login)."
    if constants.HF_HUB_OFFLINE or isinstance(exc, OfflineModeIsEnabled):
        return (
            f"{repo_id} is not in the local Hugging Face cache ({constants.HF_HUB_CACHE}) "
            "and HF_HUB_OFFLINE is set, so it cannot be downloaded."
        )
    cause = exc.__cause__ or exc  # huggingface_hub wraps connection errors; the cause names the problem
    detail = str(cause).splitlines()[0] if str(cause) else ""
    return f"could not download {repo_id} from the Hugging Face Hub ({type(cause).__name__}: {detail})."


def _incomplete(repo_id: str) -> str:
    if constants.HF_HUB_OFFLINE:
        return (
            f"the local Hugging Face cache ({constants.HF_HUB_CACHE}) holds only part of {repo_id} "
            "and HF_HUB_OFFLINE is set, so the rest cannot be downloaded."
        )
    return (
        f"{repo_id} has no config.json with *.safetensors weights (lfm-chat needs the Transformers format)."
    )


def _not_available(repo_id: str, what: str) -> str:
    """One paragraph: what failed, then how to run anyway."""
    return (
        f"Model not available: {what} To use a copy made elsewhere, run "
        f"`lfm-chat download {repo_id} --local-dir DIR` (or `hf download {repo_id} --local-dir DIR`) "
        "on a machine with network access, copy DIR here and pass `--model DIR`; "
        "or try `lfm-chat --demo` for a tiny random model that needs no download."
    )
