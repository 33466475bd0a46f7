"""The in-process engine as a backend: today's EngineWorker and the checkpoint's tokenizer.

Prompts are rendered and tokenized here, with the conversation's PromptCache, so turn N+1 sends
the exact ids turn N ended with and the engine's prefix cache serves them.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.backend.base import OnEvent, Prompt
from app.core.conversation import ChatSettings, Conversation

if TYPE_CHECKING:
    from engine import Engine, EngineSnapshot, StreamHandle, Structure

# The engine thread runs this much nicer than the UI: with 8 panes streaming on 2 busy cores the
# UI thread otherwise waited for CPU, and keys took ~0.25-0.9 s to show (p50, bench.key_latency
# with every stream's redraw held) against ~0.05 s with it. Other programs are not affected.
ENGINE_NICE = 10


def forced_call(tools: list[dict[str, Any]]) -> Structure:
    """What a reply that must call one of `tools` matches: the bare list of calls, as vLLM forces it."""
    from engine import Structure, calls_schema

    functions = [tool["function"] for tool in tools]
    return Structure("json_schema", calls_schema({f["name"]: f.get("parameters", {}) for f in functions}))


class LocalBackend:
    """Owns the engine's worker thread; the engine itself is touched only by that thread."""

    def __init__(self, engine: Engine, model_name: str) -> None:
        from engine import EngineWorker

        self.engine = engine
        self.worker = EngineWorker(engine, nice=ENGINE_NICE).start()
        self.model_name = model_name
        self.per_pane_model = False  # one engine: every pane runs its model
        self.server_sampling = False  # the card's values where the user set none
        self.max_model_len: int | None = engine.max_model_len
        config = engine.config
        weights = config.dtype if config.quantize == "none" else f"{config.dtype} {config.quantize}"
        if engine.packed_12bit:
            weights += " 12-bit"
        self.architecture: str | None = engine.model_config.summary
        drafting = "" if config.draft_model is None else f" · draft {Path(config.draft_model).name}"
        self.title = (
            f"lfm-chat · {model_name} · {self.architecture} · {config.device} {weights} · "
            f"context {engine.max_model_len} · batch {config.max_num_seqs}{drafting}"
        )
        self.warning = (
            f"Native CPU kernels unavailable ({engine.kernel_fallback}): running on PyTorch's "
            "kernels, about half the speed. README: Quick start."
            if engine.kernel_fallback
            else None
        )

    def prepare(
        self,
        conversation: Conversation,
        tools: list[dict[str, Any]] | None = None,
        continue_last: bool = False,
    ) -> Prompt:
        messages = conversation.chat_messages()
        text, ids = conversation.prompt_cache.build(self.engine.tokenizer, messages, tools, continue_last)
        return Prompt(messages, text, ids, tools=tools, continues=continue_last)

    def submit(
        self,
        prompt: Prompt,
        settings: ChatSettings,
        max_tokens: int,
        tag: str,
        on_event: OnEvent,
        structure: Structure | None = None,
    ) -> StreamHandle:
        if structure is None and prompt.tools and prompt.tool_choice == "required":
            structure = forced_call(prompt.tools)
        params = replace(settings.sampling_params(max_tokens), structure=structure)  # validated already
        return self.worker.submit(prompt.ids or prompt.text, params, tag=tag, on_event=on_event)

    def remember(self, conversation: Conversation, prompt: Prompt, reply: str, ids: list[int]) -> None:
        if prompt.ids is not None:
            conversation.prompt_cache.remember(self.engine.tokenizer, (prompt.text, prompt.ids), reply, ids)

    def snapshot(self) -> EngineSnapshot:
        return self.worker.snapshot()

    def close(self) -> None:
        self.worker.shutdown()
