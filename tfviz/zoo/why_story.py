"""The "Why attention" page's sentences, written from measured numbers (never hard-coded): each
function takes what a library call computed (a trained word2vec, ``order_differences`` tables,
``tfviz.zoo.why``'s measured frames, ``across_layers`` views) and says what it shows, plainly
saying when an effect is weak. UI-free; the page only prints them.

    read_results(folder)          checkpoints/why/why.json -> {experiment: {frame: DataFrame}}
    embeddings_text(w2v, ...)     one-hot vs learned cosines, a neighbour, an analogy
    order_text(tables)            bag of words vs a model without / with positions
    recall_text(frames)           accuracy vs distance, gradient decay, path lengths
    bottleneck_text(frames)       accuracy vs source length, additive attention's alignment
    layers_text(views, tokens)    raw attention vs rollout / flow for the last position
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

# a strong effect, in the sentences below: accuracy gaps of this much or more; alignment this high
CLEAR_GAP = 0.2
CLEAR_ALIGNMENT = 0.8
HELD = 0.05  # a model that loses at most this much accuracy "holds"
LEARNED = 0.5  # best accuracy below this: the model did not learn the task


def read_results(folder: str | Path) -> dict[str, dict[str, pd.DataFrame]]:
    """The measured frames ``python -m tfviz.zoo why`` wrote to folder/why.json (measured on the
    saved checkpoints, fresh inputs): experiment -> frame name -> DataFrame. {} when not built."""
    path = Path(folder) / "why.json"
    if not path.is_file():
        return {}
    raw = json.loads(path.read_text(encoding="utf-8"))
    return {name: {k: pd.DataFrame(v) for k, v in r.items()
                   if isinstance(v, list) and v and isinstance(v[0], dict)}
            for name, r in raw.items()}


def _off_diagonal(cos: np.ndarray) -> np.ndarray:
    return cos[~np.eye(len(cos), dtype=bool)]


def embeddings_text(vectors, labels, cos_learned: np.ndarray, cos_one_hot: np.ndarray,
                    neighbour: tuple[str, str, float] | None = None,
                    analogy: tuple[str, str, str, str, float, str | None] | None = None) -> str:
    """``cos_*``: the cosine matrices of the words shown; ``neighbour`` (word, nearest, cosine);
    ``analogy`` (a, b, c, best answer, its cosine, the expected answer or None)."""
    one = np.abs(_off_diagonal(cos_one_hot)).max() if len(cos_one_hot) > 1 else 0.0
    learned = np.abs(_off_diagonal(cos_learned)) if len(cos_learned) > 1 else np.zeros(1)
    parts = [f"One-hot: every pair of different words has cosine {one:.0f} (all orthogonal: "
             f"'{labels[0]}' is as far from its neighbours as from anything). Learned "
             f"({np.asarray(vectors).shape[1]} numbers a word): |cosine| between the words shown "
             f"averages {learned.mean():.2f}, up to {learned.max():.2f}."]
    if neighbour:
        w, near, c = neighbour
        parts.append(f"The nearest word to '{w}' is '{near}' (cosine {c:.2f})"
                     + ("." if c >= 0.5 else ": a weak neighbour — the text may be too small."))
    if analogy:
        a, b, c, best, cos, want = analogy
        verdict = "" if want is None else (" — as expected." if best == want else
                                           f" — not '{want}': the analogy fails on this text.")
        parts.append(f"{a} − {b} + {c} ≈ '{best}' (cosine {cos:.2f}){verdict}")
    return " ".join(parts)


def order_text(tables: dict[str, pd.DataFrame], per_position: dict[str, np.ndarray] | None = None) -> str:
    """``tables``: model name -> ``order_differences`` table (with its attrs); ``per_position``:
    name -> its [stage, pos] differences, to quote the positions a model without positions must
    leave equal (``forced_equal``)."""
    parts = []
    for name, t in tables.items():
        last, first_layer = t.iloc[-1], t.iloc[min(1, len(t) - 1)]
        forced = np.asarray(t.attrs.get("forced_equal", [[]]), dtype=bool)
        where, diff = "", (per_position or {}).get(name)
        if t.attrs.get("position_free") and forced.size and diff is not None:
            n_forced = int(forced[-1].sum())
            where = (f"; at the output {n_forced} of {forced.shape[1]} positions are forced equal "
                     + ("by construction" if not t.attrs.get("causal") else "(same token, same bag "
                        "of earlier tokens)")
                     + (f", and there the largest difference is {np.asarray(diff)[-1][forced[-1]].max():.1g} "
                        "(float rounding)" if n_forced else "") + " — the causal mask alone carries order"
                     * bool(t.attrs.get("causal")))
        parts.append(f"**{name}** (pos={t.attrs.get('pos')}): largest change after matching the "
                     f"words, after layer 0 {first_layer['matched']:.2g}, at the output "
                     f"{last['matched']:.2g} ({last['relative']:.1%} of the largest activation)"
                     + where + ".")
    return " ".join(parts)


def _acc(df: pd.DataFrame, model: str, x: str, value, col: str = "accuracy") -> float:
    row = df[(df["model"] == model) & (df[x] == value)]
    return float(row[col].iloc[0]) if len(row) else float("nan")


def _times(ratio: float) -> str:
    """A ratio as a reader says it: "119×", "0.029× (1/35)"."""
    if ratio >= 10:
        return f"{ratio:,.0f}×"
    if ratio >= 1:
        return f"{ratio:.1f}×"
    return f"{ratio:.2g}× (1/{1 / ratio:,.0f})" if ratio > 0 else f"{ratio:g}×"


def recall_text(frames: dict[str, pd.DataFrame]) -> str:
    """Sentences on the recall experiment (``measure_recall``'s frames)."""
    acc, summ, paths = frames["accuracy"], frames["summary"], frames["paths"]
    far, near = int(acc["distance"].max()), int(acc["distance"].min())
    chance = float(acc["chance"].iloc[0])
    models = list(dict.fromkeys(acc["model"]))
    accs = "; ".join(f"{m} {_acc(acc, m, 'distance', near):.2f} → {_acc(acc, m, 'distance', far):.2f}"
                     for m in models)
    drops = {m: _acc(acc, m, "distance", near) - _acc(acc, m, "distance", far) for m in models}
    worst = max(drops, key=drops.get)
    held = [m for m in models if drops[m] <= HELD]
    strength = (f"a clear fall ({worst} loses {drops[worst]:.2f})" if drops[worst] >= CLEAR_GAP else
                "a weak effect: every model stays within "
                f"{max(drops.values()):.2f} of its own best")
    if held and drops[worst] >= CLEAR_GAP:
        strength += f"; {' and '.join(held)} hold (lose at most {HELD})"
    trained = acc.loc[acc["trained"].astype(bool), "distance"]
    if len(trained) and far > trained.max():
        strength += f"; trained on distances {int(trained.min())}–{int(trained.max())}"
    grads = "; ".join(f"{r.model} ×{10 ** r.decay_per_step:.3f} per step back, at the key "
                      f"{_times(r.key_over_near)}" for r in summ.itertuples())
    grads += (" — the first number: how the gradient changes per filler going back from the "
              "question (below 1 it fades); the second: the gradient at the key divided by the "
              "gradient one step before the question (below 1 the key hears less than a neighbour "
              "of the question; above 1 more — the answer is read from the key itself)")
    n_max = int(paths["n"].max())
    pl = "; ".join(f"{m} {int(paths[(paths.model == m) & (paths.n == n_max)].path_length.iloc[0])}"
                   for m in dict.fromkeys(paths["model"]))
    out = (f"Accuracy from distance {near} to {far} (chance {chance:.3f}): {accs} — {strength}. "
           f"Gradient reaching earlier tokens: {grads}. "
           f"Longest path between two of {n_max} tokens: {pl} steps.")
    if frames.get("through_time") is not None and len(frames["through_time"]):
        from ..analysis.longrange import through_time_summary
        from .. import lesson

        out += " " + lesson.gradient(lesson.gradient_numbers(through_time_summary(frames["through_time"])))
    return out


def bottleneck_text(frames: dict[str, pd.DataFrame]) -> str:
    """Sentences on the bottleneck experiment (``measure_bottleneck``'s frames)."""
    acc, align = frames["accuracy"], frames.get("alignment", pd.DataFrame())
    trained = acc[acc["trained"].astype(bool)]
    shortest, longest = int(trained["length"].min()), int(trained["length"].max())
    beyond = acc[~acc["trained"].astype(bool)]
    models = list(dict.fromkeys(acc["model"]))
    at = "; ".join(f"{m} {_acc(acc, m, 'length', shortest):.2f} → "
                   f"{_acc(acc, m, 'length', longest):.2f}" for m in models)
    gap = {m: _acc(acc, m, "length", shortest) - _acc(acc, m, "length", longest) for m in models}
    worst = max(gap, key=gap.get)
    verdict = (f"{worst} falls most ({gap[worst]:.2f})" if gap[worst] >= CLEAR_GAP else
               f"the effect is weak: no model falls more than {gap[worst]:.2f}")
    best = float(trained["accuracy"].max())
    if best < LEARNED:
        verdict = f"no model learned the task (best {best:.2f}): nothing to compare"
    text = (f"Whole output right on fresh sources, length {shortest} → {longest} (trained lengths): "
            f"{at} — {verdict}.")
    if len(beyond):
        far = int(beyond["length"].max())
        text += " Beyond training (length " + str(far) + "): " + "; ".join(
            f"{m} {_acc(acc, m, 'length', far):.2f}" for m in models) + "."
    if len(align):
        a = align.groupby("model", sort=False)["alignment"].mean()
        text += " Alignment (share of output positions whose strongest weight is on the source " \
                "token they reverse, averaged over lengths): " + "; ".join(
                    f"{m} {v:.2f}" + ("" if v >= CLEAR_ALIGNMENT else " (weak)") for m, v in a.items()) + "."
    return text


def layers_text(views: dict[str, np.ndarray | None], tokens) -> str:
    """Where the last position's information comes from after the last layer, per view."""
    parts = []
    for name in ("raw", "rollout", "flow"):
        v = views.get(name)
        if v is None:
            continue
        row = np.asarray(v)[-1, -1]
        k = int(row.argmax())
        parts.append(f"{name}: '{tokens[k]}' (position {k}, {row[k]:.2f}), on the first token "
                     f"{row[0]:.2f}")
    last = np.asarray(views["raw"])[:, -1]  # [layer, k_pos]
    return ("The last position after the last layer draws most on — " + "; ".join(parts)
            + f". Raw attention of one layer spreads over {int((last[-1] > 0.05).sum())} tokens "
            "above 0.05; rollout and flow follow the residual paths through every layer, so they "
            "say where the information came from, not where one layer looked.")


__all__ = ["CLEAR_ALIGNMENT", "CLEAR_GAP", "HELD", "LEARNED", "bottleneck_text", "embeddings_text", "layers_text",
           "order_text", "read_results", "recall_text"]
