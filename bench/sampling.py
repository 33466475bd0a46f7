"""How the benchmark's requests pick their tokens, the same way in both engines.

``greedy`` (the default) is what llama-bench and most published tables measure: the argmax.
``chat`` is what a person chatting in lfm-chat gets: the app's default sampling (app/core/conversation.py's
ChatSettings: temperature, min-p and a repetition penalty over prompt and reply), which costs a
step more than an argmax; transformers runs the same settings through ``generate(do_sample=True)``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from app.core.conversation import ChatSettings
from engine import SamplingParams

SAMPLING = ("greedy", "chat")


def engine_params(sampling: str, max_tokens: int) -> SamplingParams:
    """Our engine's parameters for one request of exactly ``max_tokens`` new tokens."""
    if sampling == "greedy":
        return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    return dataclasses.replace(ChatSettings().sampling_params(max_tokens), ignore_eos=True)


def generate_kwargs(sampling: str) -> dict[str, Any]:
    """transformers' ``generate`` arguments for the same choice (top_k=0: its default of 50 off)."""
    if sampling == "greedy":
        return {"do_sample": False}
    chat = ChatSettings()
    return {
        "do_sample": True,
        "temperature": chat.temperature,
        "top_k": chat.top_k,
        "top_p": chat.top_p,
        "min_p": chat.min_p,
        "repetition_penalty": chat.repetition_penalty,
    }


def describe(sampling: str) -> str:
    """One line for the report's header."""
    if sampling == "greedy":
        return "greedy (argmax)"
    chat = ChatSettings()
    return (
        f"chat: the app's defaults (temperature {chat.temperature}, min_p {chat.min_p}, "
        f"repetition penalty {chat.repetition_penalty})"
    )
