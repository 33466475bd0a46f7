"""The architectures: one module per model family and its config, and the registry by model_type."""
