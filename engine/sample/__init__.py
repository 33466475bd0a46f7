"""Choosing tokens: the batched sampler, logprobs and logit bias."""
