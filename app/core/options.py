"""Everything a launch decides, in one value the CLI builds and tests construct directly."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import platformdirs

from app.core.attachment import Attachment
from app.core.conversation import ChatSettings
from engine import DEFAULT_MODEL, ModelSource, default_cache_dir

if TYPE_CHECKING:
    from engine import EngineConfig, FamilySampling

APP_NAME = "lfm-chat"
DATA_DIR_ENV = "LFM_CHAT_DATA_DIR"
MAX_PANES = 9  # beyond this a pane is too small to read on a normal terminal


def default_data_dir() -> Path:
    """Where conversations live: $LFM_CHAT_DATA_DIR (tests, portable installs) or the platform's data dir."""
    override = os.environ.get(DATA_DIR_ENV)
    return Path(override) if override else platformdirs.user_data_path(APP_NAME)


@dataclass(slots=True)
class AppOptions:
    """A launch of lfm-chat: which model, how the engine runs, chat defaults, where files go."""

    model: str = DEFAULT_MODEL
    revision: str | None = None  # a branch, tag or commit of a Hub repo; None = main
    demo: bool = False
    panes: int = 2
    # An EngineConfig, or the keyword arguments for one (what the CLI gives): building one imports
    # torch, seconds that must come after the loading screen is drawn, so the loader thread does it.
    engine: EngineConfig | dict[str, Any] = field(default_factory=dict)
    chat: ChatSettings = field(default_factory=ChatSettings)
    # Sampling set on the command line (SamplingParams field -> value): it wins over the model card's.
    sampling_flags: dict[str, float | int] = field(default_factory=dict)
    data_dir: Path = field(default_factory=default_data_dir)
    cache_dir: Path = field(default_factory=default_cache_dir)
    snapshot_interval: float = 0.25  # seconds between dashboard refreshes
    server: str | None = None  # an OpenAI-compatible server's base URL: no local model at all
    api_key: str | None = None  # the server's bearer token
    mcp_file: Path | None = None  # --mcp FILE: MCP servers beside the data directory's mcp.json
    piped: Attachment | None = None  # `cat notes.md | lfm-chat`: the first pane holds it for its message

    @property
    def source(self) -> ModelSource:
        return ModelSource(self.model, self.revision, self.demo)

    @property
    def model_label(self) -> str:
        """The model as the header names it: a repo id, a local directory's name, or a server's model."""
        if self.server is not None:
            return f"{self.model} on {self.server}" if self.model != DEFAULT_MODEL else self.server
        return self.source.label

    def sampling_defaults(self) -> FamilySampling:
        """What a new conversation samples with: the model card's values for this checkpoint, the
        command line's flags on top, and a name to show ("LFM2.5 card defaults")."""
        return self.source.sampling_defaults(self.sampling_flags)

    def card_chat(self, base: ChatSettings) -> ChatSettings:
        """`base` (system prompt, max tokens) sampling as this checkpoint's card and flags say."""
        card = self.sampling_defaults()
        return replace(base, **card.values, preset=card.name)  # type: ignore[arg-type]

    def for_model(self, source: ModelSource) -> AppOptions:
        """These options on another checkpoint (a switch, f4): new panes sample as its card says."""
        options = replace(self, model=source.model, revision=source.revision, demo=source.demo)
        options.chat = options.card_chat(self.chat)
        return options

    @property
    def store_path(self) -> Path:
        return self.data_dir / "conversations.sqlite3"

    @property
    def keymap_path(self) -> Path:
        return self.data_dir / "keymap.json"
