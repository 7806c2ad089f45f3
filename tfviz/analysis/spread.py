"""Every average with its spread: the standard error and a 95% interval over the examples.

A metric averaged over 300 sentences is one number; how far it would move on another 300 is the
spread. ``effect(..., reduce="none")`` / ``sweep(..., reduce="none")`` keep each example's value
(TransformerLens's ``reduce="none"``); this module summarises them:

    s = summary(rows)            # rows [..., n examples] -> mean, se, lo, hi (each [...]), n, method
    s = summary(change_rows)     # a change: the paired per-example differences (variant - unchanged)
    excludes_zero(s)             # the interval leaves out "no effect": the change is measured, not noise

The interval: by default a percentile bootstrap over the examples (Efron & Tibshirani 1993:
resample the n examples with replacement ``n_boot`` times, seeded, take the 2.5th and 97.5th
percentiles of the resampled means), which needs no normality and stays inside [0, 1] for an
accuracy; ``method="normal"`` gives mean ± 1.96 · se instead. Both are about the examples measured
(the sentences drawn), not about the model's weights. With one example there is no spread: se and
the interval are NaN, and the pages say "one example".
"""
from __future__ import annotations

import statistics

import numpy as np

METHODS = ("bootstrap", "normal")
N_BOOT = 2000
_CHUNK = 4_000_000  # floats of resampled means held at once


def summary(rows, level: float = 0.95, method: str = "bootstrap", n_boot: int = N_BOOT,
            seed: int = 0) -> dict:
    """``rows`` [..., n] (the example axis last) -> {"mean", "se", "lo", "hi"} each [...] (float64),
    "n", "level", "method". se = sample standard deviation / sqrt(n) (ddof 1)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
    if not 0 < level < 1:
        raise ValueError(f"level is a probability between 0 and 1, not {level!r}")
    x = np.asarray(rows, dtype=np.float64)
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ValueError("summary needs at least one example (the example axis last)")
    n = x.shape[-1]
    mean = x.mean(-1)
    nan = np.full(mean.shape, np.nan)
    if n < 2:
        return dict(mean=mean, se=nan, lo=nan.copy(), hi=nan.copy(), n=n, level=level, method=method)
    se = x.std(-1, ddof=1) / np.sqrt(n)
    if method == "normal":
        z = statistics.NormalDist().inv_cdf(0.5 + level / 2)
        return dict(mean=mean, se=se, lo=mean - z * se, hi=mean + z * se, n=n, level=level, method=method)
    lo, hi = bootstrap_interval(x, level, n_boot, seed)
    return dict(mean=mean, se=se, lo=lo, hi=hi, n=n, level=level, method=method)


def bootstrap_interval(x: np.ndarray, level: float = 0.95, n_boot: int = N_BOOT, seed: int = 0
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap of the mean over the last axis: the same ``n_boot`` resamples of the
    examples (counts drawn once, seeded) for every entry, so entries are resampled together."""
    n = x.shape[-1]
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot).astype(np.float64) / n  # [n_boot, n]
    flat = x.reshape(-1, n)
    lo, hi = np.empty(flat.shape[0]), np.empty(flat.shape[0])
    step = max(1, _CHUNK // n_boot)
    q = [100 * (0.5 - level / 2), 100 * (0.5 + level / 2)]
    for start in range(0, flat.shape[0], step):
        means = flat[start:start + step] @ weights.T  # [entries, n_boot]
        lo[start:start + step], hi[start:start + step] = np.percentile(means, q, axis=-1)
    return lo.reshape(x.shape[:-1]), hi.reshape(x.shape[:-1])


def excludes_zero(s: dict) -> np.ndarray:
    """Where the interval leaves out 0 (no effect): lo > 0 or hi < 0 (False without an interval)."""
    lo, hi = np.asarray(s["lo"]), np.asarray(s["hi"])
    with np.errstate(invalid="ignore"):
        return (lo > 0) | (hi < 0)


def describe(s: dict, i=(), digits: int = 3, signed: bool = False) -> str:
    """One entry of a summary in words: "0.94 (95% interval 0.91 to 0.96, n = 300)" or, with one
    example, "0.94 (one example: no interval)"."""
    def f(v):
        return f"{float(v):+.{digits}g}" if signed else f"{float(v):.{digits}g}"
    mean, lo, hi = (np.asarray(s[k])[i] for k in ("mean", "lo", "hi"))
    if s["n"] < 2:
        return f"{f(mean)} (one example: no interval)"
    return f"{f(mean)} ({s['level']:.0%} interval {f(lo)} to {f(hi)}, n = {s['n']})"


def how(s: dict) -> str:
    """How the interval was made, in words (for captions)."""
    if s["n"] < 2:
        return "one example: no spread to measure"
    if s["method"] == "normal":
        return f"{s['level']:.0%} normal interval (mean ± {statistics.NormalDist().inv_cdf(0.5 + s['level'] / 2):.2f} standard errors) over {s['n']} examples"
    return (f"{s['level']:.0%} percentile bootstrap interval over the {s['n']} examples "
            f"({N_BOOT} resamples, seeded)")


def spread_columns(rows, base_rows, names, level: float = 0.95, method: str = "bootstrap") -> dict:
    """For a table with one row per variant: ``rows`` [variants, metrics, n], ``base_rows``
    [metrics, n] (unchanged) -> columns "Δ {m} se", "Δ {m} lo", "Δ {m} hi", "Δ {m} clear" (the
    interval excludes 0) per metric name, and the unchanged run's summary per metric ("base")."""
    rows, base_rows = np.asarray(rows, dtype=np.float64), np.asarray(base_rows, dtype=np.float64)
    change = summary(rows - base_rows[None], level, method)
    base = summary(base_rows, level, method)
    clear = excludes_zero(change)
    cols: dict = {}
    for j, m in enumerate(names):
        cols[f"Δ {m} se"] = change["se"][:, j]
        cols[f"Δ {m} lo"] = change["lo"][:, j]
        cols[f"Δ {m} hi"] = change["hi"][:, j]
        cols[f"Δ {m} clear"] = clear[:, j]
    cols["base"] = {m: {k: (base[k][j] if np.ndim(base[k]) else base[k]) for k in base} for j, m in enumerate(names)}
    return cols




def head_spread_sentence(df, layer: int, head: int, metric: str | None = None) -> str:
    """From ``effects.head_effects(..., spread=True)``: the chosen head's change of ``metric``
    (default: the headline) with its interval, whether it is clear, and which heads' intervals
    leave out no change, in words."""
    m = metric or df.attrs["headline"]
    n = df.attrs.get("n", 1)
    if f"Δ {m} lo" not in df.columns or n < 2:
        return "One example: no spread to measure (measure on the task's examples for intervals)."
    row = df[(df["layer"] == layer) & (df["head"] == head)].iloc[0]
    base = df.attrs["spread"][m]
    clear_heads = list(df.loc[df[f"Δ {m} clear"].astype(bool), "name"])
    verdict = ("its interval leaves out no change: a measured effect" if bool(row[f"Δ {m} clear"]) else
               "its interval includes no change: on these examples it cannot be told from no effect")
    return (f"Unchanged, {m} is {base['mean']:.4g} (95% bootstrap interval {base['lo']:.4g} to "
            f"{base['hi']:.4g}, n = {n}). Switching **L{layer}H{head}** off changes it by "
            f"{row[f'Δ {m}']:+.4g} ({row[f'Δ {m} lo']:+.4g} to {row[f'Δ {m} hi']:+.4g}): {verdict}. "
            + (f"Heads whose change is clear: {', '.join(clear_heads)} ({len(clear_heads)} of {len(df)})."
               if clear_heads else f"No head's change is clear on these {n} examples."))


def plus_minus(s: dict, i=(), digits: int = 4) -> str:
    """"0.94 ± 0.012": the mean ± half the width of its interval (the bootstrap's may be lopsided:
    ``describe`` gives both ends); the mean alone with one example."""
    mean, lo, hi = (float(np.asarray(s[k])[i]) for k in ("mean", "lo", "hi"))
    if s["n"] < 2 or not np.isfinite(lo):
        return f"{mean:.{digits}g}"
    return f"{mean:.{digits}g} ± {(hi - lo) / 2:.2g}"


__all__ = ["METHODS", "N_BOOT", "bootstrap_interval", "describe", "excludes_zero", "head_spread_sentence", "how",
           "plus_minus", "spread_columns", "summary"]
