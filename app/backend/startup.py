"""Getting a backend off the UI thread: the local engine (engine.launch: the --demo checkpoint, the
Hub download, the load) or a server's.

torch and the model code are imported on the loader thread, not where the app starts: importing
them takes seconds, and the loading screen should be on screen meanwhile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.backend.http_errors import ServerError
from app.backend.local import LocalBackend
from app.core.options import AppOptions
from engine import DEFAULT_MODEL, CheckpointError, ModelNotAvailableError, load_engine

if TYPE_CHECKING:
    from app.backend.base import Backend
    from engine import Progress

STARTUP_ERRORS = (
    CheckpointError,
    ModelNotAvailableError,
    ServerError,
)  # their message is the user's paragraph


def load_backend(options: AppOptions, progress: Progress) -> Backend:
    """Blocking: run in a thread. Raises one of STARTUP_ERRORS for the user."""
    if options.server is None:
        engine = load_engine(options.source, options.engine, options.cache_dir, progress)
        return LocalBackend(engine, options.model_label)
    from app.backend.remote import RemoteBackend

    progress(f"asking {options.server} for its models", None)
    named = options.model if options.model != DEFAULT_MODEL else None  # else: whichever it serves
    return RemoteBackend.connect(options.server, options.api_key, named, options.snapshot_interval)
