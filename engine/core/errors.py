"""Errors the engine raises at its API boundary; their message is shown to the user as-is."""


class RequestError(ValueError):
    """A request the engine cannot serve (empty, too long, bad token ids); the engine is unaffected."""


class PromptTooLong(RequestError):
    """A prompt the context cannot hold with one generated token: its own type, because OpenAI's API
    gives it its own error code (context_length_exceeded) and serve answers with it."""
