"""What the app is about, with no I/O and no Textual: options, conversations, attachments, text."""
