"""Text in and out: the tokenizer, the chat template, the model cards' sampling."""
