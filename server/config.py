"""What `lfm-chat serve` was started with, beside the engine's own EngineConfig."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from server.limits import MAX_BODY_BYTES, per_client_share
from server.protocol import Limits


@dataclass(frozen=True, slots=True)
class ServerConfig:
    model_name: str  # what /v1/models lists and requests may name
    api_key: str | None = None  # None: no Authorization needed (the CLI allows that on loopback only)
    max_tokens: int = 4096  # the most new tokens one request may ask for, and what it gets by default
    max_waiting: int = 64  # requests queued beyond the running batch before new ones get 503
    max_per_client: int | None = None  # requests one client may have admitted; None: per_client_share
    max_body_bytes: int = MAX_BODY_BYTES
    sampling: Mapping[str, float | int] = field(default_factory=dict)  # defaults for fields a request omits

    def per_client(self, max_num_seqs: int) -> int:
        """What one client may have running or waiting before 429 (server/bridge.py)."""
        if self.max_per_client is not None:
            return self.max_per_client
        return per_client_share(max_num_seqs, self.max_waiting)

    @property
    def limits(self) -> Limits:
        return Limits(max_tokens=self.max_tokens, sampling=self.sampling)
