"""Conversations on disk: the SQLite store, its schema, its lock file, saving from the UI."""
