"""Errors the engine raises at its API boundary; their message is shown to the user as-is."""


class RequestError(ValueError):
    """A request the engine cannot serve (empty, too long, bad token ids); the engine is unaffected."""
