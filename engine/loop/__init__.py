"""The engine's loop: build the parts, schedule a step, run the model, turn tokens into outputs."""
