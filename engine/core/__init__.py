"""What every part of the engine shares: a request, its sampling and structure, the settings,
the errors, the metrics, the events it sends; nothing here runs a model."""
