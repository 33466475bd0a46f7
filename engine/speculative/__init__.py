"""Speculative decoding: proposers (n-gram, draft model) and which drafted tokens are kept."""
