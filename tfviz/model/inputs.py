"""The one check of token inputs that every model family runs before a forward: a readable
``ValueError`` instead of an index error deep inside torch."""
from __future__ import annotations

import torch

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool)


def check_tokens(config, t, what: str, offset: int = 0) -> None:
    """``t`` must be a [batch, pos] tensor of ids in [0, vocab_size) that fits the model's length
    limit (``config.max_positions``; None = any length) after ``offset`` cached positions."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{what} must be a torch tensor of token ids, not {type(t).__name__}")
    if t.dtype in FLOATS:
        raise ValueError(f"{what} must hold integer token ids, not {t.dtype}")
    if t.dim() != 2:
        raise ValueError(f"{what} must have shape [batch, pos], got {tuple(t.shape)}")
    if t.shape[0] == 0 or t.shape[1] == 0:
        raise ValueError(f"{what} is empty (shape {tuple(t.shape)}): give at least one token")
    lo, hi = torch.stack(torch.aminmax(t)).tolist()  # one host sync, not two
    if lo < 0 or hi >= config.vocab_size:
        bad = lo if lo < 0 else hi
        raise ValueError(f"token id {bad} in {what} is outside the vocabulary [0, {config.vocab_size})")
    limit = config.max_positions
    if limit is not None and offset + t.shape[1] > limit:
        raise ValueError(f"{what} reaches position {offset + t.shape[1]}, but "
                         f"{config.scheme.length_limit(config)}")


def find_padding(config, tokens: torch.Tensor, padding_mask: torch.Tensor | None):
    """[batch, pos] bool, True = padding: ``padding_mask`` when given (checked), else the tokens
    equal to ``config.pad_id``; None when there is no padding at all. Each model family then
    checks what padding it can handle."""
    if padding_mask is not None:
        if padding_mask.shape != tokens.shape or padding_mask.dtype != torch.bool:
            raise ValueError("padding_mask must be a bool tensor shaped like the tokens (True = padding)")
        pads = padding_mask
    elif config.pad_id is None:
        return None
    else:
        pads = tokens == config.pad_id
    return pads if bool(pads.any()) else None


def check_arity(config, inputs: tuple) -> tuple:
    """``inputs`` unchanged when their number fits the architecture: two (src, tgt) for an
    encoder-decoder, one (tokens) otherwise; else a ValueError saying how to call the model."""
    if config.arch == "encoder-decoder":
        if len(inputs) != 2:
            raise ValueError(f"an encoder-decoder model takes two inputs, model(src, tgt); got {len(inputs)}")
    elif len(inputs) != 1:
        raise ValueError(f"a {config.arch} model takes one input, model(tokens); got {len(inputs)}")
    return inputs
