"""Optimizer, learning-rate schedule and their (pickle-free) state.

Learning rate at optimizer step s = 1, 2, ..., S with warmup w and peak lr:

    warmup (s <= w, all schedules)   lr * s / w
    constant                         lr
    cosine                           lr * (r + (1 - r) * (1 + cos(pi * p)) / 2),
                                     p = (s - w) / (S - w), r = 0.1 (ends at lr / 10)
    inverse_sqrt                     Vaswani et al. 2017: d_model^-0.5 * min(s^-0.5, s * w^-1.5);
                                     its peak d_model^-0.5 * w^-0.5 is rescaled to lr, giving
                                     lr * min(sqrt(w / s), s / w)   (d_model cancels)

The schedule is a pure function of the step, so "scheduler state" is just the step number.
AdamW's state is tensors per parameter (exp_avg, exp_avg_sq) plus one step count: the tensors go
into the checkpoint's safetensors under ``optim.<param name>.<slot>``, the count into its JSON.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .config import TrainConfig

COSINE_FLOOR = 0.1
BETAS = (0.9, 0.98)
SLOTS = ("exp_avg", "exp_avg_sq")


def lr_at(step: int, cfg: TrainConfig) -> float:
    """The learning rate used by optimizer step ``step`` (1-based)."""
    s, w, peak = max(step, 1), cfg.warmup, cfg.lr
    if cfg.schedule == "inverse_sqrt":
        w = max(w, 1)
        return peak * min(math.sqrt(w / s), s / w)
    if s <= w:
        return peak * s / w
    if cfg.schedule == "constant":
        return peak
    p = min((s - w) / max(cfg.steps - w, 1), 1.0)
    return peak * (COSINE_FLOOR + (1 - COSINE_FLOOR) * 0.5 * (1 + math.cos(math.pi * p)))


def named_unique_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """(name, parameter) once per parameter: a tied weight appears under its first name."""
    return list(model.named_parameters())  # named_parameters already skips duplicates


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Standard AdamW split: decay Linear weight matrices; never biases, norms or embeddings
    (shrinking an embedding towards 0 or a LayerNorm gain towards 0 is not regularisation)."""
    no_decay_ids = set()
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            no_decay_ids.add(id(module.weight))
    decay, no_decay = [], []
    for _, p in named_unique_parameters(model):
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 and id(p) not in no_decay_ids else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW over ``param_groups``; on CUDA the fused kernel (one launch for every parameter: a
    small model's step is bound by kernel launches there). Same math, same state."""
    fused = all(p.is_cuda for p in model.parameters())
    return torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=lr_at(1, cfg), betas=BETAS,
                             fused=fused or None)


def _names_in_order(model: nn.Module, opt: torch.optim.Optimizer) -> list[str]:
    name_of = {id(p): n for n, p in named_unique_parameters(model)}
    return [name_of[id(p)] for g in opt.param_groups for p in g["params"]]


def optimizer_state(model: nn.Module, opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    """-> (tensors for safetensors, JSON-able scalars)."""
    tensors, steps = {}, {}
    params = [p for g in opt.param_groups for p in g["params"]]
    for name, p in zip(_names_in_order(model, opt), params):
        state = opt.state.get(p)
        if not state:
            continue
        for slot in SLOTS:
            tensors[f"optim.{name}.{slot}"] = state[slot].detach().to("cpu", torch.float32).contiguous()
        steps[name] = float(state["step"])
    return tensors, {"param_steps": steps}


def load_optimizer_state(model: nn.Module, opt: torch.optim.Optimizer,
                         tensors: dict[str, torch.Tensor], info: dict) -> None:
    """Inverse of :func:`optimizer_state` (shapes were checked when the checkpoint was loaded)."""
    sd = opt.state_dict()
    state = {}
    for i, name in enumerate(_names_in_order(model, opt)):
        if name not in info.get("param_steps", {}):
            continue
        state[i] = {"step": torch.tensor(float(info["param_steps"][name])),
                    **{slot: tensors[f"optim.{name}.{slot}"] for slot in SLOTS}}
    sd["state"] = state
    opt.load_state_dict(sd)
