"""Long-range dependencies, measured: how far back a model can reach, and why a recurrent network
struggles (the ``recall`` task: remember a key symbol across d fillers, ``tfviz.tasks.recall``).

    accuracy_by_distance(model, task, distances)     accuracy on fresh sequences at each distance
    input_gradient_norms(model, tokens, targets)     ||∂L/∂e_t|| for every input position t
    gradient_by_distance(model, task, distance)      that norm against steps back from the query
    gradient_through_time(stages, task, distance)    the same for several models at several stages
                                                     (initialisation, trained), each relative to
                                                     the gradient one step back; ``through_time_summary``
    path_lengths(config, n) / max_path_length(config, n)   the longest shortest path, O(n) vs O(1)

The gradient (Bengio, Simard & Frasconi 1994; Pascanu, Mikolov & Bengio 2013): for the loss L at
the query position T and the token embedding e_t at position t ≤ T,

    ∂L/∂e_t = ∂L/∂h_T · Π_{k=t+1..T} ∂h_k/∂h_{k-1} · ∂h_t/∂e_t

in a recurrent network: a product of T - t Jacobians, whose norm shrinks (or grows) geometrically
with T - t. In self-attention the query reads e_t through one attention step per layer, whatever
T - t is. ``input_gradient_norms`` computes ∂L/∂e_t by autograd on the embedding output (tested
against central finite differences in float64); L is the summed cross-entropy over the target
positions (for ``recall``: the one answer at [SEP]).
"""
from __future__ import annotations

from collections import deque

import numpy as np
import pandas as pd
import torch

from ..model.families import lacks
from ..tasks.base import IGNORE, collate


# ------------------------------------------------------------------------------------- accuracy
def accuracy_by_distance(model, task, distances, n: int = 256, seed: int = 1000) -> pd.DataFrame:
    """Accuracy (answer right at [SEP]) and loss on ``n`` fresh sequences per distance
    (``task.at_distance(d, seed + d)``: the training task's symbols, another seed). Columns:
    distance, accuracy, loss, n, trained (d within the task's training distances), chance."""
    rows = []
    lo, hi = int(task.params["min_distance"]), int(task.params["max_distance"])
    for d in distances:
        fresh = task.at_distance(int(d), seed + int(d), n)
        ev = fresh.evaluate(model, "test", max_examples=n)
        rows.append({"distance": int(d), "accuracy": float(ev["accuracy"]), "loss": float(ev["loss"]),
                     "n": len(fresh.examples("test")), "trained": lo <= d <= hi,
                     "chance": 1.0 / int(task.params["n_keys"])})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------- gradients
def input_gradient_norms(model, tokens: torch.Tensor, targets: torch.Tensor,
                         src: torch.Tensor | None = None) -> np.ndarray:
    """||∂L/∂e_t||₂ for every position t of ``tokens`` -> [batch, pos] (float64 numpy), where
    e_t is the token embedding the model reads at t (the output of ``model.embed``) and L the
    summed cross-entropy of row b over its target positions (each row's gradient is its own
    loss's). ``src``: an encoder-decoder's source (then the norms are over the decoder's tokens).
    Eval mode; the model's parameters get no .grad."""
    captured: list[torch.Tensor] = []

    def keep(_module, _inputs, output):
        captured.append(output)

    was_training = model.training
    model.eval()
    handle = model.embed.register_forward_hook(keep)
    try:
        with torch.enable_grad():
            inputs = (tokens,) if src is None else (src, tokens)
            logits = model(*inputs)
            emb = captured[-1]  # the decoder's tokens (the last embedding lookup)
            loss = torch.nn.functional.cross_entropy(
                logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE, reduction="sum")
            (grad,) = torch.autograd.grad(loss, emb)
    finally:
        handle.remove()
        model.train(was_training)
    return grad.double().norm(dim=-1).detach().cpu().numpy()


def gradient_by_distance(model, task, distance: int, n: int = 64, seed: int = 2000) -> pd.DataFrame:
    """On ``n`` fresh recall sequences with ``distance`` fillers: the gradient norm at each input
    position against ``steps_back`` = query position - position (0 = the query [SEP] itself;
    distance + 1 = the key). Columns: steps_back, position, token_kind ("query" | "filler" |
    "key" | "bos"), grad_norm (geometric mean over the sequences), grad_norm_mean, log10_std."""
    fresh = task.at_distance(int(distance), seed + int(distance), n)
    examples = fresh.examples("test")
    b = collate(examples, fresh.tokenizer.pad_id)
    device = next(model.parameters()).device
    g = input_gradient_norms(model, b.tokens.to(device), b.targets.to(device))
    q = examples[0].meta["query_index"]
    key = examples[0].meta["key_index"]
    logs = np.log10(np.maximum(g[:, :q + 1], 1e-300))
    rows = []
    for pos in range(q + 1):
        kind = "query" if pos == q else "key" if pos == key else "bos" if pos == 0 else "filler"
        rows.append({"steps_back": q - pos, "position": pos, "token_kind": kind,
                     "grad_norm": float(10 ** logs[:, pos].mean()),
                     "grad_norm_mean": float(g[:, pos].mean()), "log10_std": float(logs[:, pos].std())})
    return pd.DataFrame(rows)


def decay_per_step(df: pd.DataFrame, kinds=("filler",)) -> float:
    """The slope of log10(grad_norm) against steps_back over the ``kinds`` rows (a least-squares
    line): log10 of the factor by which the gradient shrinks per step back (0 = no decay)."""
    d = df[df["token_kind"].isin(kinds)]
    return float(np.polyfit(d["steps_back"], np.log10(d["grad_norm"]), 1)[0])


def gradient_through_time(stages: dict, task, distance: int, n: int = 64, seed: int = 2000) -> pd.DataFrame:
    """The vanishing gradient as the lecture means it: how the answer's loss gradient reaching the
    input shrinks with the distance back through time, for each model at each stage (``stages``:
    stage -> {label: model}, e.g. {"initialisation": ..., "trained": ...}), all on the same ``n``
    fresh sequences with ``distance`` fillers. ``gradient_by_distance``'s columns plus ``model``,
    ``stage``, ``relative`` (grad_norm / grad_norm one step back from the query: the curve's shape,
    free of the loss's size — a trained model near zero loss has a tiny gradient everywhere) and
    ``loss`` (the mean loss of the model on those sequences: why the absolute level differs)."""
    frames = []
    for stage, models in stages.items():
        for label, m in models.items():
            g = gradient_by_distance(m, task, distance, n=n, seed=seed)
            near = float(g.loc[g["steps_back"] == 1, "grad_norm"].iloc[0])
            ev = task.at_distance(int(distance), seed + int(distance), n).evaluate(m, "test", max_examples=n)
            frames.append(g.assign(model=label, stage=stage, relative=g["grad_norm"] / near,
                                   loss=float(ev["loss"])))
    return pd.concat(frames, ignore_index=True)


def through_time_summary(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (stage, model) of a ``gradient_through_time`` frame: ``key_steps_back`` (how far
    back the key is), ``key_over_near`` (the gradient at the key / one step back from the query;
    below 1 it faded on the way), ``decay_per_step`` (log10 factor per step over the fillers),
    ``near`` (the gradient one step back), ``loss``."""
    rows = []
    for (stage, model), g in df.groupby(["stage", "model"], sort=False):
        key = g[g["token_kind"] == "key"].iloc[0]
        rows.append({"stage": stage, "model": model, "key_steps_back": int(key["steps_back"]),
                     "key_over_near": float(key["relative"]), "decay_per_step": decay_per_step(g),
                     "near": float(g.loc[g["steps_back"] == 1, "grad_norm"].iloc[0]),
                     "loss": float(g["loss"].iloc[0])})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------- path length
def max_path_length(config, n: int) -> int:
    """The longest, over input position i ≤ output position j, shortest path from the input at i to
    the top layer's output at j, counting one step per cell application or attention hop
    (Vaswani et al. 2017, table 1). Recurrent: climb L layers and walk j - i steps, so L + n - 1:
    O(n). Self-attention: every layer lets j read i directly, so L hops whatever n: O(1) in n.
    (``path_lengths`` finds the same numbers by search on the dependency graph.)"""
    L = config.n_layers
    return L + n - 1 if lacks(config, "self_attention") else L


def path_lengths(config, n: int) -> np.ndarray:
    """[i, j] shortest path lengths (i ≤ j; -1 where j < i: a causal model has none) from input i to
    the top layer's output j, by breadth-first search on the model's dependency graph: nodes
    (layer ℓ, position t), ℓ = 0 the inputs; recurrent: (ℓ-1, t) -> (ℓ, t) and (ℓ, t-1) -> (ℓ, t);
    causal self-attention (with the residual and MLP at t): (ℓ-1, s) -> (ℓ, t) for every s ≤ t."""
    L, recurrent = config.n_layers, lacks(config, "self_attention") is not None

    def successors(layer: int, t: int):
        if layer < L:
            if recurrent:
                yield layer + 1, t
            else:
                yield from ((layer + 1, u) for u in range(t, n))
        if recurrent and layer > 0 and t + 1 < n:
            yield layer, t + 1

    out = np.full((n, n), -1, dtype=int)
    for i in range(n):
        dist = {(0, i): 0}
        todo = deque([(0, i)])
        while todo:
            node = todo.popleft()
            for nxt in successors(*node):
                if nxt not in dist:
                    dist[nxt] = dist[node] + 1
                    todo.append(nxt)
        for j in range(i, n):
            out[i, j] = dist[(L, j)]
    return out
