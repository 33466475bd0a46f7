"""Workarounds for Textual's behaviour, each naming the Textual issue it works around."""
