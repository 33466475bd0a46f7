"""LFM2, written from scratch: config, weights, the packed-batch network, tokenizer, Hub access."""
