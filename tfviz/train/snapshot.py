"""Attention snapshots: the task's fixed probe input, recorded every N steps while training, so the
app can replay heads specialising.

One snapshot ≈ layers x heads x pos² float16 values (2 layers x 4 heads x 40² ≈ 26 kB).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..model.hooks import layer_template, parse_hook_name, stack_layers
from ..recording import record
from ..tasks.base import Example, collate


def is_pattern(name: str) -> bool:
    return name.endswith("hook_pattern")


@dataclass(frozen=True)
class AttentionSnapshot:
    """step: optimizer steps done when recorded (0 = at initialisation).
    patterns: hook name -> float16 array [head, q_pos, k_pos] (the probe's batch axis dropped);
    e.g. "blocks.0.attn.hook_pattern", or for encoder-decoder "encoder.blocks.0.attn.hook_pattern",
    "decoder.blocks.0.cross_attn.hook_pattern" (q = decoder positions, k = source positions).
    tokens: the probe's (decoder) token strings; src_tokens: its source tokens (encoder-decoder)."""

    step: int
    patterns: dict[str, np.ndarray]
    tokens: list[str]
    src_tokens: list[str] | None = None

    def layers(self, template: str = layer_template("attn.hook_pattern")) -> np.ndarray:
        """Stack one per-layer name over layers -> [layer, head, q_pos, k_pos]."""
        try:
            return stack_layers(self.patterns, template)
        except KeyError:
            raise KeyError(f"no pattern matches {template!r}; have {sorted(self.patterns)}") from None

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.patterns.values())


class Prober:
    """Holds the probe batch and its token strings; ``take(model, step)`` records a snapshot."""

    def __init__(self, task, device: torch.device):
        probe: Example = task.probe()
        tok = task.tokenizer
        self.batch = collate([probe], tok.pad_id).to(device)
        self.tokens = tok.tokens_of(probe.tokens)
        self.src_tokens = None if probe.src is None else tok.tokens_of(probe.src)

    @staticmethod
    def applies(model) -> bool:
        """Whether ``model`` has attention patterns to snapshot (a plain RNN has none)."""
        return any(is_pattern(name) for name in model.hook_points())

    def take(self, model, step: int) -> AttentionSnapshot:
        rec = record(model, *self.batch.inputs, names=is_pattern)
        patterns = {name: t[0].float().numpy().astype(np.float16) for name, t in rec.items()}
        return AttentionSnapshot(step, patterns, list(self.tokens),
                                 None if self.src_tokens is None else list(self.src_tokens))


# ---------------------------------------------------------------------------------- in checkpoints
# Tensors "snapshots.{i}.{hook name}" (float16 [head, q_pos, k_pos]) + JSON metadata "snapshots":
# [{"step", "tokens", "src_tokens", "names"}]. Kept to at most MAX_SAVED evenly spaced snapshots
# (always the first and the last) within SAVED_BYTES, so a checkpoint stays small.
PREFIX = "snapshots."
MAX_SAVED = 32
SAVED_BYTES = 8 * 2**20


def thin(snaps: list[AttentionSnapshot], max_count: int = MAX_SAVED,
         max_bytes: int = SAVED_BYTES) -> list[AttentionSnapshot]:
    """At most ``max_count`` snapshots (and ``max_bytes``), evenly spaced, first and last kept."""
    if not snaps:
        return []
    keep = max(2, min(max_count, max_bytes // max(snaps[-1].nbytes, 1)))
    if len(snaps) <= keep:
        return list(snaps)
    idx = sorted({round(i * (len(snaps) - 1) / (keep - 1)) for i in range(keep)})
    return [snaps[i] for i in idx]


def to_tensors(snaps: list[AttentionSnapshot]) -> tuple[dict[str, torch.Tensor], list[dict]]:
    tensors, meta = {}, []
    for i, s in enumerate(snaps):
        meta.append({"step": s.step, "tokens": s.tokens, "src_tokens": s.src_tokens, "names": sorted(s.patterns)})
        for name, a in s.patterns.items():
            tensors[f"{PREFIX}{i}.{name}"] = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float16))
    return tensors, meta


def expected_tensors(meta, n_heads: int) -> dict[str, tuple[torch.dtype, tuple]]:
    """Names, dtypes and shapes the saved snapshots must have; ValueError for malformed metadata."""
    if not isinstance(meta, list):
        raise ValueError("snapshots must be a JSON array")
    want = {}
    for i, s in enumerate(meta):
        ok = (isinstance(s, dict) and isinstance(s.get("step"), int)
              and all(isinstance(s.get(k), list) and all(isinstance(t, str) for t in s[k]) for k in ("tokens", "names"))
              and (s.get("src_tokens") is None or isinstance(s["src_tokens"], list)))
        if not ok:
            raise ValueError(f"snapshot {i} needs step, tokens, names (and optionally src_tokens)")
        for name in s["names"]:
            if not is_pattern(name):
                raise ValueError(f"snapshot {i}: {name!r} is not an attention pattern")
            where = parse_hook_name(name)
            q = len(s["tokens"])
            k = len(s["src_tokens"]) if where.attention == "cross_attn" and s.get("src_tokens") is not None else q
            if where.stack == "encoder" and s.get("src_tokens") is not None:
                q = k = len(s["src_tokens"])
            want[f"{PREFIX}{i}.{name}"] = (torch.float16, (n_heads, q, k))
    return want


def from_tensors(tensors: dict[str, torch.Tensor], meta: list[dict] | None) -> list[AttentionSnapshot]:
    return [AttentionSnapshot(s["step"], {n: tensors[f"{PREFIX}{i}.{n}"].numpy() for n in s["names"]},
                              list(s["tokens"]), s.get("src_tokens"))
            for i, s in enumerate(meta or [])]
