"""Models side by side: 2-4 checkpoints that share a task or a tokenizer, aligned.

    basis = common_basis([("pre", ck_a), ("post", ck_b)])   # "task" | "tokenizer", or ValueError
    curves_frame({"pre": ck_a.history, ...})    # model, step, metric, value: one set of axes
    grad_norm_frame(ck.history)                 # step, group, layer, part, norm (per layer)
    attention_views({"pre": cfg_a, ...})        # the kinds of attention they share (+ a note)
    patterns_on({"pre": model_a, ...}, ids, view, src)  # name -> [layer, head, q_pos, k_pos]
    head_roles({"pre": model_a, ...}, task, view)  # layer, head, one label column per model, differs
    position_frame({"pre": model_a, ...}, batch)  # model, position, loss, accuracy, tokens
    length_frame([("pre", ck_a), ...], lengths) # = positional.extrapolation_table (one place)
    cost_frame({"pre": model_a, ...}, pos)      # parameters, KV-cache bytes (analysis.cost)
    loss_spikes(history)                        # the steps where the training loss jumped

Measured step time is the bench's (``tfviz.bench.measure.step_seconds``): analysis sits below it.
Checkpoints are duck-typed (``.model``, ``.config``, ``.tokenizer``, ``.task``, ``.history``) so an
imported model (no task, no history) compares on its tokenizer.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from ..model.families import kind_of
from ..tasks.base import IGNORE, Batch, collate
from .cost import kv_cache_bytes, recurrent_state_bytes
from .explorer import Site, head_table, sites
from .gradients import layer_of
from .heads import score_model
from .positional import extrapolation_table, is_positional_family, same_task

MIN_MODELS, MAX_MODELS = 2, 4
CURVE_METRICS = ("train_loss", "val_loss", "val_accuracy", "grad_norm", "lr")
SPIKE_RISE = 0.5     # a spike: the training loss this far (nats) above its lowest value so far
SPIKE_SETTLE = 0.25  # ... and back within this of that lowest value before the next spike counts


@dataclass(frozen=True)
class Basis:
    """What the compared checkpoints share: ``kind`` "task" (the same task spec, so the same
    tokenizer and validation data) or "tokenizer" (the same vocabulary only: one input for all,
    but no common data set); ``task``: the spec when shared."""

    kind: str
    task: dict | None
    tokenizer: object

    def sentence(self) -> str:
        if self.kind == "task":
            params = ", ".join(f"{k}={v}" for k, v in self.task.items()
                               if k != "name" and v not in (None, ""))  # unset: nothing to say
            return f"they share the task {self.task['name']} ({params})"
        return "they share a tokenizer (different tasks or none): one input for all, no common data set"


def _tok_json(ck) -> str | None:
    tok = getattr(ck, "tokenizer", None)
    return None if tok is None else tok.to_json()


def common_basis(checkpoints: Sequence[tuple[str, object]]) -> Basis:
    """The task or tokenizer that 2-4 (name, checkpoint) pairs share; ValueError naming what
    differs when they share neither (different vocabularies make one input meaningless)."""
    n = len(checkpoints)
    if not MIN_MODELS <= n <= MAX_MODELS:
        raise ValueError(f"compare {MIN_MODELS} to {MAX_MODELS} models, not {n}")
    names = [name for name, _ in checkpoints]
    if len(set(names)) != n:
        raise ValueError("pick each model once")
    toks = [_tok_json(ck) for _, ck in checkpoints]
    missing = [name for name, t in zip(names, toks) if t is None]
    if missing:
        raise ValueError(f"{', '.join(missing)} carries no tokenizer, so no input can be given to "
                         "it and the others alike")
    first_name, first = checkpoints[0]
    for name, ck in checkpoints[1:]:
        if _tok_json(ck) != toks[0]:
            raise ValueError(
                f"{first_name} and {name} share neither a task nor a tokenizer "
                f"({_describe(first)} vs {_describe(ck)}): the same token id means different "
                "things to them. Compare models trained on one task, or with one tokenizer.")
    tasks = [getattr(ck, "task", None) for _, ck in checkpoints]
    if all(t is not None for t in tasks) and all(t == tasks[0] for t in tasks):
        return Basis("task", dict(tasks[0]), first.tokenizer)
    return Basis("tokenizer", None, first.tokenizer)


def _describe(ck) -> str:
    task = getattr(ck, "task", None)
    what = f"task {task.get('name')}" if isinstance(task, dict) else "no task"
    return f"{what}, {getattr(ck, 'tokenizer', None)!r}"


SCHEME_ORDER = ("sinusoidal", "learned", "rope", "alibi", "t5", "none")  # Press et al.'s four first


def suggest(cards: Mapping[str, dict], selected: str | None = None) -> list[str]:
    """Which 2-4 checkpoints to open side by side (``cards``: key -> checkpoint metadata,
    ``tfviz.train.checkpoint.read_metadata``), given the one ``selected`` elsewhere: its
    positional family (sinusoidal, learned, rope, alibi first) when it belongs to one; else the
    models trained on its task with its tokenizer (it first); else the shipped pre/post-norm pair
    (family "norm"); else none."""
    def family(card):
        extra = card.get("extra")
        return extra.get("family") if isinstance(extra, dict) else None

    def scheme(key):
        pos = (cards[key].get("model_config") or {}).get("pos")
        return SCHEME_ORDER.index(pos) if pos in SCHEME_ORDER else len(SCHEME_ORDER)

    mine = cards.get(selected) if selected is not None else None
    if mine is not None and is_positional_family(mine):
        return sorted((k for k, c in cards.items() if is_positional_family(c)), key=scheme)[:MAX_MODELS]
    if mine is not None:
        same = [k for k, c in cards.items() if k != selected and same_task(c, mine)]
        if same:
            return [selected, *same][:MAX_MODELS]
    return [k for k, c in cards.items() if family(c) == "norm"][:MAX_MODELS]


# ------------------------------------------------------------------------------ history
def curves_frame(histories: Mapping[str, Sequence[Mapping]],
                 metrics: Sequence[str] = CURVE_METRICS) -> pd.DataFrame:
    """Long form of each model's training history: model, step, metric, value (missing values
    left out: validation only every k steps)."""
    rows = [(name, int(h["step"]), m, float(h[m])) for name, hist in histories.items()
            for h in hist if "step" in h for m in metrics
            if isinstance(h.get(m), (int, float)) and not isinstance(h.get(m), bool)]
    return pd.DataFrame(rows, columns=["model", "step", "metric", "value"])


def _part(group: str) -> str:
    return group.rsplit(".", 1)[-1] if layer_of(group) is not None else group


def grad_norm_frame(history: Sequence[Mapping]) -> pd.DataFrame:
    """The per-group gradient norms a run recorded (``tfviz.analysis.gradients``; the metrics'
    ``grad_norms``): step, group, layer (None for embed/head), part (attn, mlp, cross, embed,
    head, ...), norm. Empty for histories from before they were recorded."""
    rows = [(int(h["step"]), g, layer_of(g), _part(g), float(v)) for h in history
            if isinstance(h.get("grad_norms"), Mapping) for g, v in h["grad_norms"].items()]
    return pd.DataFrame(rows, columns=["step", "group", "layer", "part", "norm"])


def layer_grad_norms(history: Sequence[Mapping], until: int | None = None) -> pd.DataFrame:
    """Per block: the gradient norm of the whole block (attention, cross-attention and MLP
    together, ``sqrt(sum of squares)``) averaged over the logged steps up to ``until`` (all when
    None): layer, norm, steps. (An encoder-decoder's two stacks share layer numbers: their
    blocks are summed together.) What "larger gradients in early layers" is measured with."""
    df = grad_norm_frame(history)
    df = df[df["layer"].notna()]
    if until is not None:
        df = df[df["step"] <= until]
    if df.empty:
        return pd.DataFrame(columns=["layer", "norm", "steps"])
    block = df.assign(sq=df["norm"] ** 2).groupby(["step", "layer"], as_index=False)["sq"].sum()
    block["norm"] = block["sq"] ** 0.5
    out = block.groupby("layer", as_index=False).agg(norm=("norm", "mean"), steps=("norm", "count"))
    out["layer"] = out["layer"].astype(int)
    return out



def gradient_frames(histories: Mapping[str, Sequence[Mapping]]):
    """The gradient norms each compared run recorded, or None when none recorded any: (per block,
    averaged over training: model, layer, norm, steps; every group at every step: the model's
    ``grad_norm_frame`` with a model column; {model: grad_norm_frame})."""
    grads = {n: grad_norm_frame(h) for n, h in histories.items()}
    if not any(len(g) for g in grads.values()):
        return None
    bars = pd.concat([layer_grad_norms(h).assign(model=n) for n, h in histories.items()])
    return bars, pd.concat([g.assign(model=n) for n, g in grads.items()]), grads

def loss_spikes(history: Sequence[Mapping], rise: float = SPIKE_RISE,
                settle: float = SPIKE_SETTLE, key: str = "train_loss") -> pd.DataFrame:
    """Loss spikes of one run: each time the logged training loss rose more than ``rise`` nats
    above the lowest value it had reached so far (after having been within ``settle`` of that
    lowest value). Columns: step, loss, best_before, rise. A run that diverged to NaN/inf has its
    last finite point as the history's end (the loop stops there)."""
    best, armed, rows = math.inf, True, []
    for h in history:
        x = h.get(key)
        if not isinstance(x, (int, float)) or not math.isfinite(x):
            continue
        if armed and x > best + rise:
            rows.append((int(h["step"]), float(x), best, float(x - best)))
            armed = False
        elif x <= best + settle:
            armed = True
        best = min(best, x)
    return pd.DataFrame(rows, columns=["step", "loss", "best_before", "rise"])


def history_summary(history: Sequence[Mapping], final: Mapping | None = None) -> dict:
    """Scalars of one run's history: last train/validation loss, the best validation loss,
    spikes (count and largest rise), the largest training loss after the first logged step."""
    tl = [h["train_loss"] for h in history if isinstance(h.get("train_loss"), (int, float))]
    vl = [h["val_loss"] for h in history if isinstance(h.get("val_loss"), (int, float))]
    spikes = loss_spikes(history)
    out = {"steps": int(history[-1]["step"]) if history else 0,
           "last_train_loss": tl[-1] if tl else math.nan,
           "last_val_loss": vl[-1] if vl else math.nan,
           "best_val_loss": min(vl) if vl else math.nan,
           "spikes": len(spikes), "largest_rise": float(spikes["rise"].max()) if len(spikes) else 0.0}
    for k, v in (final or {}).items():
        out[f"final_{k}"] = v
    return out


# ------------------------------------------------------------------------------ one input
SHARED_VIEW = "decoder self-attention"  # what an encoder-decoder shares with a decoder-only model


def attention_views(configs: Mapping[str, object]) -> tuple[list[str], str]:
    """The kinds of attention (``explorer.sites`` labels) to draw side by side for the compared
    models with heads (name -> config), and a sentence when some are left out ("" else).

    Single-stack models only: [] (each model's one self-attention, nothing to choose).
    Encoder-decoders only: encoder self-attention, decoder self-attention, cross-attention.
    Both: decoder self-attention only — the one kind every model has, on the target tokens."""
    enc_dec = [n for n, c in configs.items() if c.arch == "encoder-decoder"]
    if not enc_dec:
        return [], ""
    if len(enc_dec) == len(configs):
        return [s.label for s in sites(configs[enc_dec[0]])], ""
    single = [n for n in configs if n not in enc_dec]
    return [SHARED_VIEW], (
        f"{', '.join(single)} {'reads' if len(single) == 1 else 'read'} one sequence and "
        f"{', '.join(enc_dec)} a source and a target: the attention they share is decoder "
        "self-attention (on the target tokens), shown here; the encoder's self-attention and "
        "cross-attention are on the Attention page.")


def view_site(config, view: str | None = None) -> Site:
    """Where ``view`` (an ``attention_views`` label) is recorded in a model: an encoder-decoder's
    site of that label; a single-stack model's one self-attention (``view`` None or the decoder
    self-attention it shares with encoder-decoders)."""
    found = sites(config)
    if config.arch != "encoder-decoder":
        if view not in (None, SHARED_VIEW):
            raise ValueError(f"a single-stack model has no {view}")
        return found[0]
    for site in found:
        if site.label == view:
            return site
    raise ValueError(f"pick one of {', '.join(s.label for s in found)} for an encoder-decoder, "
                     f"not {view!r}")


def patterns_on(models: Mapping[str, object], ids: Sequence[int], view: str | None = None,
                src: Sequence[int] | None = None) -> dict[str, np.ndarray]:
    """Each model's attention of kind ``view`` (``view_site``) on the same input: name ->
    [layer, head, q_pos, k_pos] (recorded, batch of one). ``ids``: the tokens (an
    encoder-decoder's decoder input); ``src``: the source, read by encoder-decoders only. The
    caller holds shared models' locks."""
    out = {}
    for name, model in models.items():
        cfg = model.config
        site = view_site(cfg, view)
        inputs = [ids]
        if cfg.arch == "encoder-decoder":
            if src is None:
                raise ValueError(f"{name} is an encoder-decoder: the input needs a source")
            inputs = [src, ids]
        if cfg.max_positions is not None and max(len(x) for x in inputs) > cfg.max_positions:
            raise ValueError(f"{name}: {cfg.scheme.length_limit(cfg)}; use at most "
                             f"{cfg.max_positions} tokens")
        device = next(model.parameters()).device
        out[name] = site.patterns(model, *[torch.tensor([list(x)], device=device)
                                           for x in inputs])[:, 0].numpy()
    return out


def head_roles(models: Mapping[str, object], task=None, view: str | None = None,
               **score_kw) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Head roles of each model -> (wide, long): single-stack models through ``score_model`` (the
    same probes for all); encoder-decoders through ``explorer.head_table`` on the ``view``'s
    stack (self-attention scored on the shared task's validation examples; ValueError saying why
    for cross-attention or without a shared task).

    wide: layer, head, one label column per model ("" where the model has no such head), and
    ``differs`` (True where the labels are not all the same). long: every score of every head,
    with a ``model`` column (for the CSV)."""
    frames = []
    for name, model in models.items():
        if model.config.arch == "encoder-decoder":
            if task is None:
                raise ValueError("an encoder-decoder's heads are scored on the validation examples "
                                 "of a task, and these models share none")
            df = head_table(model, task, view_site(model.config, view),
                            **{k: v for k, v in score_kw.items() if k == "n_examples"})
        else:
            df = score_model(model, task, **score_kw)
        df.insert(0, "model", name)
        frames.append(df)
    long = pd.concat(frames, ignore_index=True)
    wide = long.pivot_table(index=["layer", "head"], columns="model", values="label",
                            aggfunc="first").reindex(columns=list(models)).fillna("")
    wide = wide.reset_index()
    wide.columns.name = None
    labels = wide[list(models)]
    wide["differs"] = labels.nunique(axis=1).gt(1) | labels.eq("").any(axis=1)
    return wide, long


# ------------------------------------------------------------------------------ per position
def task_batch(task, split: str = "validation", n_examples: int = 256) -> Batch:
    """The first ``n_examples`` examples of ``split``, padded into one batch."""
    pool = task.examples(split)[:n_examples]
    if not pool:
        raise ValueError(f"the task has no {split} examples")
    return collate(pool, task.tokenizer.pad_id)


def next_token_batch(ids: Sequence[int], src: Sequence[int] | None = None) -> Batch:
    """One input as a language-modelling batch: position p predicts ids[p+1] (the last position
    has no target); ``src``: an encoder-decoder's source ids (``model_inputs`` gives them only to
    encoder-decoders)."""
    tokens = torch.tensor([list(ids)])
    targets = torch.full_like(tokens, IGNORE)
    targets[0, :-1] = tokens[0, 1:]
    return Batch(tokens, targets, None if src is None else torch.tensor([list(src)]))


def model_inputs(model, batch: Batch) -> tuple[torch.Tensor, ...]:
    """What ``model``'s forward takes from ``batch``: (src, tokens) for an encoder-decoder, else
    (tokens,) — one batch serves the models of a comparison whichever their kind."""
    if getattr(model.config, "arch", None) == "encoder-decoder":
        if batch.src is None:
            raise ValueError("an encoder-decoder needs a source: give the input a source text")
        return batch.src, batch.tokens
    return (batch.tokens,)


@torch.no_grad()
def position_frame(models: Mapping[str, object], batch: Batch, batch_size: int = 64) -> pd.DataFrame:
    """Loss and accuracy per position of the batch's targets (teacher forced), for each model:
    model, position, loss (mean cross-entropy of the target at that position), accuracy (share
    predicted right), tokens (targets counted). Positions without targets are left out."""
    rows = []
    for name, model in models.items():
        was = model.training
        model.eval()
        device = next(model.parameters()).device
        losses, rights, keeps = [], [], []
        try:
            for s in range(0, batch.tokens.shape[0], batch_size):
                part = Batch(batch.tokens[s:s + batch_size], batch.targets[s:s + batch_size],
                             None if batch.src is None else batch.src[s:s + batch_size]).to(device)
                logits = model(*model_inputs(model, part)).float()
                keep = part.targets != IGNORE
                y = part.targets.clamp_min(0)
                losses.append(torch.nn.functional.cross_entropy(logits.transpose(1, 2), y,
                                                                reduction="none").cpu())
                rights.append((logits.argmax(-1) == y).cpu())
                keeps.append(keep.cpu())
        finally:
            model.train(was)
        loss, right, keep = torch.cat(losses), torch.cat(rights), torch.cat(keeps)
        count = keep.sum(0)
        for p in torch.nonzero(count).flatten().tolist():
            k = keep[:, p]
            rows.append((name, p, float(loss[k, p].mean()), float(right[k, p].float().mean()), int(count[p])))
    return pd.DataFrame(rows, columns=["model", "position", "loss", "accuracy", "tokens"])


def length_frame(checkpoints: Sequence[tuple[str, object]], lengths: Sequence[int],
                 **kw) -> pd.DataFrame:
    """Loss and accuracy at each evaluation length: the Positional page's measurement
    (``extrapolation_table``), for the compared checkpoints."""
    return extrapolation_table(checkpoints, lengths, **kw)



def length_notes(lengths: pd.DataFrame) -> dict[str, str]:
    """model -> the last note ``length_frame`` left for it (why a length was not measured)."""
    noted = lengths[lengths["note"] != ""]
    return {m: noted.loc[noted["model"] == m, "note"].iloc[-1] for m in noted["model"].unique()}


def input_cap(configs: Sequence, most: int = 64) -> int:
    """The longest input every compared model takes (``max_positions``; None = any), at most
    ``most`` tokens so that the per-head figures stay readable."""
    return min([c.max_positions or most for c in configs] + [most])

# ------------------------------------------------------------------------------ cost
def cost_frame(models: Mapping[str, object], pos: int | None = None) -> pd.DataFrame:
    """model, parameters, layers, heads, kv_heads, d_model, kv_bytes_per_token (float32, batch 1:
    ``analysis.cost.kv_cache_bytes``), kv_bytes (at ``pos`` positions, default the model's
    max_len), pos. A recurrent network (no heads: 0) carries its state instead of a KV cache:
    kv_bytes = ``analysis.cost.recurrent_state_bytes``, the same at any length (per token 0)."""
    rows = []
    for name, model in models.items():
        c = model.config
        n = pos or c.max_len
        if kind_of(c) != "transformer":  # a recurrent network: its state, not a KV cache
            state = recurrent_state_bytes(c.n_layers, c.d_hidden, kind_of(c))
            rows.append((name, sum(p.numel() for p in model.parameters()), c.n_layers, 0, 0,
                         c.d_model, 0, state, n))
            continue
        # generation caches the (decoder's) self-attention keys and values; an encoder has none
        per_token = 0 if c.arch == "encoder" else kv_cache_bytes(c.n_layers, c.n_kv_heads, c.d_head, 1)
        rows.append((name, sum(p.numel() for p in model.parameters()), c.n_layers, c.n_heads,
                     c.n_kv_heads, c.d_model, per_token, per_token * n, n))
    return pd.DataFrame(rows, columns=["model", "parameters", "layers", "heads", "kv_heads",
                                       "d_model", "kv_bytes_per_token", "kv_bytes", "pos"])


__all__ = ["Basis", "CURVE_METRICS", "MAX_MODELS", "MIN_MODELS", "attention_views", "common_basis", "cost_frame",
           "curves_frame", "grad_norm_frame", "head_roles", "history_summary", "layer_grad_norms",
           "length_frame", "loss_spikes", "model_inputs", "next_token_batch", "patterns_on", "position_frame",
           "suggest", "task_batch", "view_site"]
