"""A model's weights in TransformerLens's shapes, a head's factored QK and OV matrices with their
singular values, and composition scores between heads (Elhage et al. 2021, "A Mathematical
Framework for Transformer Circuits").

    w = weights(model)            # W_E, W_pos, W_Q, W_K, W_V, W_O, b_*, W_in, W_out, W_U, b_U
    w.W_Q                         # [layer, head, d_model, d_head]   (x @ W_Q[l, h] = head h's query)
    qk = qk_matrix(model, 1, 3)   # Factored: A [d_model, d_head] @ B [d_head, d_model] = W_Q W_K^T
    qk.singular_values()          # [d_head], from the small core (never the d_model x d_model product)
    composition_scores(model, "K")  # [layer, head, layer, head]: how much an earlier head's output
                                    # feeds a later head's keys

Conventions (TransformerLens's, so numbers carry over): vectors are rows (``x @ W``); W_K / W_V
and their biases are given per *query* head (a GQA model's key/value heads repeated, as
TransformerLens's ``W_K`` property does; ``kv=True`` gives them per key/value head); QK = W_Q
W_K^T and OV = W_V W_O, biases, positions (RoPE, ALiBi, T5) and norms left out unless asked
(``fold_ln=True`` multiplies the block's ln1 weight into W_Q / W_K / W_V, which is what a head
actually reads up to the norm's centring and scale). Composition scores (Elhage et al. 2021, §
"Virtual weights and composition"): for an earlier head 1 and a later head 2,

    Q: ||OV_1 QK_2||_F / (||OV_1||_F ||QK_2||_F)        (head 1 writes what head 2's queries read)
    K: ||OV_1 QK_2^T||_F / (||OV_1||_F ||QK_2||_F)      (... what its keys read)
    V: ||OV_1 OV_2||_F / (||OV_1||_F ||OV_2||_F)        (... what its values read)

zero where head 2 is not in a later layer (TransformerLens's ``all_composition_scores``). Random
matrices of these shapes already score about sqrt(d_head / d_model)-ish: compare against
``random_baseline`` before calling a score large.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

MODES = ("Q", "K", "V")


def _stack(model, stack: str | None):
    s = stack if stack is not None else ("decoder" if model.config.arch == "encoder-decoder" else "")
    if s not in model.stacks:
        raise ValueError(f"stack must be one of {', '.join(repr(k) for k in model.stacks)}, not {s!r}")
    return s, model.stacks[s]


class Weights:
    """A model's weights as TransformerLens names and shapes (copies in float32 or the model's
    wider dtype, computed on first use). Self-attention of ``stack`` (default: the one that
    reaches the output)."""

    def __init__(self, model, stack: str | None = None, fold_ln: bool = False, kv: bool = False):
        self.model, self.fold_ln, self.kv = model, fold_ln, kv
        self.stack_name, self.stack = _stack(model, stack)
        cfg = model.config
        self.L, self.H, self.Hkv, self.d_head, self.d_model = (cfg.n_layers, cfg.n_heads, cfg.n_kv_heads,
                                                               cfg.d_head, cfg.d_model)
        self.dtype = torch.promote_types(model.embed.weight.dtype, torch.float32)
        self._memo: dict = {}

    def _get(self, key, fn):
        if key not in self._memo:
            with torch.no_grad():
                self._memo[key] = fn()
        return self._memo[key]

    def _t(self, t):
        return t.detach().to(self.dtype)

    # ------------------------------------------------------------------ embeddings and unembedding
    @property
    def W_E(self) -> torch.Tensor:
        """[d_vocab, d_model] token embeddings (times the scheme's embed scale, e.g. sqrt(d_model)
        for sinusoidal: what the residual stream receives)."""
        return self._get("W_E", lambda: self._t(self.model.embed.weight) * self.stack.embed_scale)

    @property
    def W_pos(self) -> torch.Tensor:
        """[n_ctx, d_model] additive positional vectors (learned or sinusoidal; ValueError for a
        scheme that adds none: RoPE rotates q and k, ALiBi / T5 bias the scores)."""
        def build():
            if not self.stack.pos.embeds:
                raise ValueError(f"{self.stack.pos.name} positions add no vectors to the residual stream: "
                                 "no W_pos")
            n = self.model.config.max_len
            return self._t(self.stack.pos.embed(torch.arange(n, device=self.model.embed.weight.device)))
        return self._get("W_pos", build)

    @property
    def W_U(self) -> torch.Tensor:
        """[d_model, d_vocab] the unembedding (without the final norm's weight)."""
        return self._get("W_U", lambda: self._t(self.model.unembed.weight).T)

    @property
    def b_U(self) -> torch.Tensor:
        """[d_vocab] (zeros when the head has no bias)."""
        b = self.model.unembed.bias
        return self._get("b_U", lambda: torch.zeros(self.W_U.shape[1], dtype=self.dtype) if b is None else self._t(b))

    # ------------------------------------------------------------------ attention
    def _qkv(self, l: int):
        attn = self.stack.blocks[l].attn
        W = self._t(attn.W_qkv.weight)  # [(H + 2 Hkv) d_head, d_model]
        b = attn.W_qkv.bias
        b = torch.zeros(W.shape[0], dtype=self.dtype) if b is None else self._t(b)
        H, Hkv, d = self.H, self.Hkv, self.d_head
        ws = W.split([H * d, Hkv * d, Hkv * d])
        bs = b.split([H * d, Hkv * d, Hkv * d])
        if self.fold_ln and self.stack.blocks[l].pre_norm:
            g = self._t(self.stack.blocks[l].ln1.weight)
            ws = tuple(w * g for w in ws)
        return ws, bs

    def _heads(self, which: int, bias: bool):
        def build():
            out = []
            for l in range(self.L):
                ws, bs = self._qkv(l)
                n_own = self.H if which == 0 else self.Hkv
                if bias:
                    t = bs[which].view(n_own, self.d_head)
                else:
                    t = ws[which].view(n_own, self.d_head, self.d_model).transpose(1, 2)  # [head, d_model, d_head]
                if which and not self.kv and self.Hkv != self.H:
                    t = t.repeat_interleave(self.H // self.Hkv, dim=0)  # query head h reads kv head h // group
                out.append(t)
            return torch.stack(out)
        return self._get(("qkv", which, bias), build)

    @property
    def W_Q(self) -> torch.Tensor:
        """[layer, head, d_model, d_head]"""
        return self._heads(0, False)

    @property
    def W_K(self) -> torch.Tensor:
        """[layer, head, d_model, d_head] (per query head; ``kv=True``: [layer, kv_head, ...])"""
        return self._heads(1, False)

    @property
    def W_V(self) -> torch.Tensor:
        """[layer, head, d_model, d_head] (per query head; ``kv=True``: [layer, kv_head, ...])"""
        return self._heads(2, False)

    @property
    def b_Q(self) -> torch.Tensor:
        """[layer, head, d_head]"""
        return self._heads(0, True)

    @property
    def b_K(self) -> torch.Tensor:
        return self._heads(1, True)

    @property
    def b_V(self) -> torch.Tensor:
        return self._heads(2, True)

    @property
    def W_O(self) -> torch.Tensor:
        """[layer, head, d_head, d_model]"""
        def build():
            return torch.stack([self._t(b.attn.W_o.weight).view(self.d_model, self.H, self.d_head).permute(1, 2, 0)
                                for b in self.stack.blocks])
        return self._get("W_O", build)

    @property
    def b_O(self) -> torch.Tensor:
        """[layer, d_model] (zeros without biases)"""
        def build():
            return torch.stack([torch.zeros(self.d_model, dtype=self.dtype) if b.attn.W_o.bias is None
                                else self._t(b.attn.W_o.bias) for b in self.stack.blocks])
        return self._get("b_O", build)

    # ------------------------------------------------------------------ MLP
    def _mlp(self, what: str):
        def build():
            if not all(b.has_mlp for b in self.stack.blocks):
                raise ValueError("this model has no MLPs (attention only)")
            out = []
            for b in self.stack.blocks:
                W_in, W_out = b.mlp.W_in, b.mlp.W_out
                d_ff = W_out.weight.shape[1]
                if what == "W_out":
                    out.append(self._t(W_out.weight).T)  # [d_mlp, d_model]
                elif what == "b_out":
                    out.append(torch.zeros(self.d_model, dtype=self.dtype) if W_out.bias is None else self._t(W_out.bias))
                else:
                    w = self._t(W_in.weight)  # [d_ff or 2 d_ff, d_model]; gated: [gate; value]
                    bias = torch.zeros(w.shape[0], dtype=self.dtype) if W_in.bias is None else self._t(W_in.bias)
                    gated = w.shape[0] == 2 * d_ff
                    if what in ("W_gate", "b_gate") and not gated:
                        raise ValueError("this model's MLP has no gate (not SwiGLU)")
                    sl = slice(0, d_ff) if what in ("W_gate", "b_gate") else slice(d_ff, 2 * d_ff) if gated else slice(0, d_ff)
                    out.append(w[sl].T if what.startswith("W") else bias[sl])
            return torch.stack(out)
        return self._get(("mlp", what), build)

    @property
    def W_in(self) -> torch.Tensor:
        """[layer, d_model, d_mlp] (SwiGLU: the value half; the gate is ``W_gate``)"""
        return self._mlp("W_in")

    @property
    def b_in(self) -> torch.Tensor:
        return self._mlp("b_in")

    @property
    def W_gate(self) -> torch.Tensor:
        """[layer, d_model, d_mlp] (SwiGLU only)"""
        return self._mlp("W_gate")

    @property
    def b_gate(self) -> torch.Tensor:
        """[layer, d_mlp] (SwiGLU only)"""
        return self._mlp("b_gate")

    @property
    def W_out(self) -> torch.Tensor:
        """[layer, d_mlp, d_model]"""
        return self._mlp("W_out")

    @property
    def b_out(self) -> torch.Tensor:
        return self._mlp("b_out")

    # ------------------------------------------------------------------ circuits
    @property
    def QK(self) -> "Factored":
        """[layer, head] factored W_Q W_K^T ([d_model, d_model] each)."""
        return Factored(self.W_Q, self.W_K.transpose(-1, -2))

    @property
    def OV(self) -> "Factored":
        """[layer, head] factored W_V W_O ([d_model, d_model] each)."""
        return Factored(self.W_V, self.W_O)


def weights(model, stack: str | None = None, fold_ln: bool = False, kv: bool = False) -> Weights:
    """The model's weights in TransformerLens's names and shapes (see ``Weights``)."""
    if getattr(model.config, "arch", None) is None:
        raise ValueError("weights are given for transformers (a recurrent model has no heads)")
    if kv and model.config.n_kv_heads == model.config.n_heads:
        kv = False
    return Weights(model, stack, fold_ln, kv)


@dataclass
class Factored:
    """A low-rank matrix kept as two factors, ``A`` [..., m, r] @ ``B`` [..., r, n] (TransformerLens's
    ``FactoredMatrix``): its product, singular values and norm without forming m x n when r is
    small."""
    A: torch.Tensor
    B: torch.Tensor

    def __post_init__(self):
        if self.A.shape[-1] != self.B.shape[-2]:
            raise ValueError(f"factors do not chain: {tuple(self.A.shape)} @ {tuple(self.B.shape)}")

    @property
    def AB(self) -> torch.Tensor:
        """The full product [..., m, n]."""
        return self.A @ self.B

    @property
    def T(self) -> "Factored":
        return Factored(self.B.transpose(-1, -2), self.A.transpose(-1, -2))

    def __getitem__(self, idx) -> "Factored":
        return Factored(self.A[idx], self.B[idx])

    def svd(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """U [..., m, r], S [..., r], Vh [..., r, n] with A B = U diag(S) Vh: QR of each factor,
        then the SVD of the r x r core (exact up to rounding)."""
        Qa, Ra = torch.linalg.qr(self.A)                       # A = Qa Ra
        Qb, Rb = torch.linalg.qr(self.B.transpose(-1, -2))     # B^T = Qb Rb
        U, S, Vh = torch.linalg.svd(Ra @ Rb.transpose(-1, -2))  # the core [r, r]
        return Qa @ U, S, Vh @ Qb.transpose(-1, -2)

    def singular_values(self) -> torch.Tensor:
        """[..., r], largest first."""
        return self.svd()[1]

    def norm(self) -> torch.Tensor:
        """The Frobenius norm of the product, from its singular values [...]."""
        return self.singular_values().pow(2).sum(-1).sqrt()

    def __matmul__(self, other: "Factored | torch.Tensor") -> "Factored":
        if isinstance(other, Factored):  # keep the inner rank small: A (B A') B'
            return Factored(self.A, (self.B @ other.A) @ other.B)
        return Factored(self.A, self.B @ other)


def qk_matrix(model, layer: int, head: int, stack: str | None = None, fold_ln: bool = False) -> Factored:
    """Head ``head`` of ``layer``: W_Q W_K^T [d_model, d_model] factored."""
    w = weights(model, stack, fold_ln)
    _check_head(w, layer, head)
    return w.QK[layer, head]


def ov_matrix(model, layer: int, head: int, stack: str | None = None, fold_ln: bool = False) -> Factored:
    """Head ``head`` of ``layer``: W_V W_O [d_model, d_model] factored."""
    w = weights(model, stack, fold_ln)
    _check_head(w, layer, head)
    return w.OV[layer, head]


def _check_head(w: Weights, layer, head) -> None:
    if not (isinstance(layer, (int, np.integer)) and 0 <= layer < w.L and isinstance(head, (int, np.integer))
            and 0 <= head < w.H):
        raise ValueError(f"the model has {w.L} layers of {w.H} heads: no layer {layer!r}, head {head!r}")


def composition_scores(model, mode: str, stack: str | None = None, fold_ln: bool = False) -> np.ndarray:
    """``mode`` "Q", "K" or "V" -> [layer, head, layer, head]: entry (l1, h1, l2, h2) is how much
    head (l1, h1)'s output composes into head (l2, h2)'s queries, keys or values (see the module
    docstring); 0 unless l2 > l1. Float64."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)} (query, key or value composition), not {mode!r}")
    w = weights(model, stack, fold_ln)
    L, H = w.L, w.H
    ov = w.OV
    right = w.QK if mode == "Q" else w.QK.T if mode == "K" else w.OV
    ov_A, ov_B = ov.A.double(), ov.B.double()
    r_A, r_B = right.A.double(), right.B.double()
    ov_norm = Factored(ov_A, ov_B).norm()   # [layer, head]
    r_norm = Factored(r_A, r_B).norm()
    out = np.zeros((L, H, L, H))
    for l1 in range(L - 1):
        # OV_1 @ right_2 = A1 (B1 A2) B2: the norm of a product of thin factors, via its small core
        core = torch.einsum("hrd,gdq->hgrq", ov_B[l1], r_A[l1 + 1:].reshape(-1, *r_A.shape[2:]))  # [h1, (l2 h2), r, r]
        prod = Factored(ov_A[l1][:, None].expand(-1, core.shape[1], -1, -1) @ core,
                        r_B[l1 + 1:].reshape(-1, *r_B.shape[2:])[None].expand(H, -1, -1, -1))
        norms = prod.norm().view(H, L - l1 - 1, H)  # [h1, l2, h2]
        denom = ov_norm[l1][:, None, None] * r_norm[l1 + 1:][None]
        out[l1, :, l1 + 1:] = (norms / denom).numpy()
    return out


def random_baseline(model, mode: str, n: int = 64, seed: int = 0) -> float:
    """The mean composition score of random Gaussian factors of the model's shapes: what a
    score needs to clear before it says anything (Elhage et al. 2021 compare against one)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    cfg = model.config
    g = torch.Generator().manual_seed(seed)
    d, r = cfg.d_model, cfg.d_head

    def f():
        return Factored(torch.randn(d, r, generator=g, dtype=torch.float64),
                        torch.randn(r, d, generator=g, dtype=torch.float64))
    scores = []
    for _ in range(n):
        a, b = f(), f()
        scores.append(float((a @ b).norm() / (a.norm() * b.norm())))
    return float(np.mean(scores))


__all__ = ["Factored", "MODES", "Weights", "composition_scores", "ov_matrix", "qk_matrix",
           "random_baseline", "weights"]
