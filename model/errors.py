"""Errors a user can act on. Their message is shown as-is, on one line, without a traceback."""


class CheckpointError(ValueError):
    """A checkpoint is missing, unreadable, or not a model lfm-chat runs."""


class ModelNotAvailableError(RuntimeError):
    """A Hub model could not be fetched (offline, unknown repo, no permission)."""


class ChatTemplateError(ValueError):
    """A chat template refused a conversation (``raise_exception``), failed, or ran past its time limit."""


class TemplateRefusal(ChatTemplateError):
    """The template's own ``raise_exception``: its message is for the user, as it stands."""


class TokenizerCrash(ValueError):
    """The checkpoint's tokenizer crashed inside its native library on this text (a Rust panic, e.g.
    a pre-tokenizer regex past its backtracking limit): that one request fails, the process lives."""
