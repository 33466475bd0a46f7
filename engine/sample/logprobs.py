"""Log-probabilities of the tokens a request emits, for the requests that ask (SamplingParams.logprobs).

They are the log-softmax of the model's RAW logits for that position: before logit_bias, the
penalties, temperature and the top-k / top-p / min-p filters. That is vLLM's default
(``logprobs_mode="raw_logprobs"``) and what the model itself says, so they compare across requests
whatever their sampling settings (and a token the filters excluded still has a finite logprob).
Each row is its own log-softmax and top-k, so a request's logprobs never depend on its batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from engine.core.events import TokenLogprob


def token_logprobs(logits: torch.Tensor, tokens: Sequence[int], top: int) -> list[TokenLogprob]:
    """One entry per token: ``tokens[i]`` was emitted from row i of ``logits`` [len(tokens), V]."""
    logprobs = logits.float().log_softmax(dim=-1)
    index = torch.tensor(tokens, dtype=torch.long, device=logits.device).unsqueeze(1)
    chosen = logprobs.gather(1, index).squeeze(1).tolist()
    if top == 0:
        return [TokenLogprob(token, value, ()) for token, value in zip(tokens, chosen, strict=True)]
    values, ids = logprobs.topk(min(top, logprobs.shape[-1]), dim=-1)
    tops = [tuple(zip(i, v, strict=True)) for i, v in zip(ids.tolist(), values.tolist(), strict=True)]
    return [TokenLogprob(*entry) for entry in zip(tokens, chosen, tops, strict=True)]
