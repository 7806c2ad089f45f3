"""The contract every task honours, so training, evaluation and the app treat all tasks alike.

A task owns its tokenizer and three fixed, disjoint splits of examples generated from a seed.
Training draws batches from the "train" split; evaluation scores "validation" / "test".

Batch layout (one for every architecture):
    tokens   [batch, pos]      decoder input, or encoder input (masked for MLM)
    targets  [batch, pos]      next-token / answer / masked-token ids; -100 where no loss is taken
    src      [batch, src_pos]  encoder input for encoder-decoder tasks, else None
Padding uses the tokenizer's pad id (always 0); padded target positions are -100.
A model is called as ``model(tokens)`` or, for encoder-decoder, ``model(src, tokens)``
(``Batch.inputs`` gives the right tuple), and the loss is cross-entropy with ignore_index=-100.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

IGNORE = -100


@dataclass
class Example:
    """One example, unpadded. ``meta`` carries task-specific labels (e.g. coreference indices)."""

    tokens: list[int]
    targets: list[int]
    src: list[int] | None = None
    text: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Batch:
    tokens: torch.Tensor
    targets: torch.Tensor
    src: torch.Tensor | None = None

    @property
    def inputs(self) -> tuple[torch.Tensor, ...]:
        return (self.tokens,) if self.src is None else (self.src, self.tokens)

    def to(self, device: torch.device | str) -> "Batch":
        return Batch(
            self.tokens.to(device),
            self.targets.to(device),
            None if self.src is None else self.src.to(device),
        )


def _pad(rows: list[list[int]], value: int) -> torch.Tensor:
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return out


def collate(examples: list[Example], pad_id: int | None = 0) -> Batch:
    """Right-pad a list of examples into one Batch. ``pad_id=None`` (a tokenizer without a pad
    token, e.g. GPT-2's): the examples must all have one length (nothing to pad)."""
    if not examples:
        raise ValueError("cannot make a batch from zero examples")
    if pad_id is None:
        if len({len(e.tokens) for e in examples}) > 1 or len({len(e.src or ()) for e in examples}) > 1:
            raise ValueError("examples of different lengths need a pad token, and this tokenizer "
                             "has none")
        pad_id = 0  # never written: every row is full
    tokens = _pad([e.tokens for e in examples], pad_id)
    targets = _pad([e.targets for e in examples], IGNORE)
    src = None
    if examples[0].src is not None:
        src = _pad([e.src for e in examples], pad_id)
    return Batch(tokens, targets, src)


class Task:
    """Base class. Subclasses set the class attributes and implement ``_generate``.

    Class attributes:
        name:     short id used by the CLI and checkpoints ("coref", "induction", ...)
        archs:    architectures the task suits, first = recommended
        metric:   what ``evaluate`` reports as "accuracy" (a sentence for the UI)
    """

    name: str = "task"
    archs: tuple[str, ...] = ("decoder",)
    metric: str = "share of examples whose every target token is predicted correctly"

    def __init__(self, seed: int = 0, **params: Any) -> None:
        self.seed = seed
        self.params = params

    # -- to be provided by subclasses -------------------------------------------------------
    @property
    def tokenizer(self):  # -> tfviz.tokenize.Tokenizer
        raise NotImplementedError

    def examples(self, split: str) -> list[Example]:
        """The fixed examples of "train", "validation" or "test" (disjoint, deterministic)."""
        raise NotImplementedError

    # -- shared behaviour -------------------------------------------------------------------
    def batch(self, split: str, batch_size: int, generator: torch.Generator) -> Batch:
        pool = self.examples(split)
        idx = torch.randint(len(pool), (batch_size,), generator=generator).tolist()
        return collate([pool[i] for i in idx], self.tokenizer.pad_id)

    def probe(self) -> Example:
        """A fixed input whose attention the trainer snapshots while training."""
        return self.examples("validation")[0]

    def spec(self) -> dict[str, Any]:
        """JSON-able description from which ``tfviz.tasks.make_task`` rebuilds this task."""
        return {"name": self.name, "seed": self.seed, **self.params}

    @torch.no_grad()
    def evaluate(self, model, split: str = "validation", max_examples: int = 512,
                 batch_size: int = 64) -> dict[str, float]:
        """Loss and accuracy (every target token right) over up to ``max_examples`` examples."""
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        pool = self.examples(split)[:max_examples]
        correct = total = 0
        loss_sum = 0.0
        tok_count = 0
        try:
            for start in range(0, len(pool), batch_size):
                b = collate(pool[start:start + batch_size], self.tokenizer.pad_id).to(device)
                logits = model(*b.inputs).float()
                mask = b.targets != IGNORE
                loss_sum += torch.nn.functional.cross_entropy(
                    logits[mask], b.targets[mask], reduction="sum").item()
                tok_count += int(mask.sum())
                right = (logits.argmax(-1) == b.targets) | ~mask
                correct += int(right.all(dim=1).sum())
                total += b.tokens.shape[0]
        finally:
            model.train(was_training)
        return {"loss": loss_sum / max(tok_count, 1), "accuracy": correct / max(total, 1)}
