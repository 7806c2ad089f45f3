"""Output heads, one class each, behind one registry (``HEADS``, ``ModelConfig.head``).

The head turns the final hidden state [batch, pos, d_model] into logits [batch, pos, vocab]:

    linear   logits = W_U h                                   (GPT-2, Llama, tfviz's own models)
    mlm      logits = W_U LN(act(W_t h + b_t)) + b_U          (BERT's masked-LM head: a dense
                                                              "transform", the activation, a norm,
                                                              then the unembedding with a bias)

``W_U`` is always ``Transformer.unembed`` (tied to the token embedding when ``tie_embeddings``);
a head class says whether it has a bias (``bias``) and builds what comes before it
(``transform(cfg)``: a module, or None). To add one: a class here and its line in ``HEADS``.
"""
from __future__ import annotations

import torch
from torch import nn

from .activations import ACTIVATIONS, make_activation
from .norms import make_norm


class LinearHead:
    """logits = W_U h."""

    name, label, bias = "linear", "linear unembedding", False

    @classmethod
    def check_config(cls, cfg) -> None:
        """Raise ValueError when ``cfg`` cannot use this head (ModelConfig calls this)."""

    @classmethod
    def transform(cls, cfg) -> nn.Module | None:
        return None


class MLMTransform(nn.Module):
    """BERT's prediction-head transform: LN(act(W_t h + b_t)), d_model -> d_model."""

    def __init__(self, cfg):
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.act = make_activation(cfg)
        self.ln = make_norm(cfg)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.ln(self.act(self.dense(h)))


class MLMHead(LinearHead):
    """BERT (Devlin et al. 2019): logits = W_U LN(act(W_t h + b_t)) + b_U."""

    name, label, bias = "mlm", "masked-LM head (dense + activation + norm, output bias)", True

    @classmethod
    def check_config(cls, cfg) -> None:
        if ACTIVATIONS[cfg.activation].gated:
            raise ValueError(f"the mlm head applies the activation to d_model values; a gated "
                             f"activation ({cfg.activation}) halves them: pick a plain one")

    @classmethod
    def transform(cls, cfg) -> nn.Module:
        return MLMTransform(cfg)


HEADS: dict[str, type[LinearHead]] = {cls.name: cls for cls in (LinearHead, MLMHead)}
"""name (``ModelConfig.head``) -> head class."""
