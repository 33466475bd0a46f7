"""The engine on a background thread, and its events on an asyncio loop."""
