"""Stand-ins shared by several test files: objects that play a model or a task with a behaviour
the test fixes in advance (import them from here; never copy them into a test file)."""
from __future__ import annotations

import torch


class InductionOracle(torch.nn.Module):
    """The induction rule written out: logit 10 on the token after the last earlier occurrence
    of the current token, else uniform (all zeros)."""

    def __init__(self, vocab):
        super().__init__()
        self.vocab = vocab
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, tokens):
        logits = torch.zeros(*tokens.shape, self.vocab)
        for b in range(tokens.shape[0]):
            for p in range(tokens.shape[1]):
                earlier = (tokens[b, :p] == tokens[b, p]).nonzero()
                if len(earlier):
                    logits[b, p, tokens[b, earlier[-1, 0] + 1]] = 10.0
        return logits


class ExplodingTask:
    """A task whose batches raise (the worker thread dies mid-job); everything else is ``task``'s."""

    def __init__(self, task):
        self._task, self.name, self.tokenizer = task, "exploding", task.tokenizer

    def __getattr__(self, name):
        return getattr(self._task, name)

    def batch(self, *a, **k):
        raise RuntimeError("the data loader exploded")

    def evaluate(self, *a, **k):
        return self._task.evaluate(*a, **k)
