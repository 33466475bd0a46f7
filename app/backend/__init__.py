"""The one seam between the app and whatever generates: the in-process engine or an HTTP server.

Panes, the chat screen and the dashboard see a `Backend` only (base.py), so a pane cannot tell
which one it talks to. local.py wraps the engine's worker; remote.py speaks the OpenAI API.
"""
