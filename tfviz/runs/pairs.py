"""A pair (or up to four) of training runs that differ in exactly one setting.

    runs = make_pair(base_model_config, train_config, "norm", ["pre", "post"], stem="lm")
    # -> [PairRun("lm-pre-norm", ...), PairRun("lm-post-norm", ...)]
    check_pair([(r.model_config, r.train_config) for r in runs])   # -> "norm", or ValueError

Every run of a pair has the same TrainConfig — the same seed (so the same batches in the same
order: the batch sampler's generator is seeded with it; ``tests/test_pairs.py`` checks the
batches themselves), the same steps, learning rate and schedule — and the same task. Their model
configs differ in one *setting* only. A setting may move a field that depends on it, and nothing
else: more heads keep the attention kind (MHA stays MHA, MQA stays MQA, GQA keeps its number of
query heads per key/value head), a wider model keeps its d_ff / d_model ratio.

Runs go through the app's one ``RunManager`` (``submit_pair``; ``ui.jobs.job_manager``): all of a pair's runs are queued
at once or none is (each counts against the session's job limit), then the fair queue treats
them like any other jobs of that session.

Settings (``SETTINGS``): pos (positional scheme), attention (MHA / GQA / MQA), norm (pre / post),
window (full or w), n_layers, n_heads, d_model (width).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..model import ModelConfig
from ..model.config import NORM_PLACEMENTS, POS_SCHEMES
from ..train.config import TrainConfig

MIN_RUNS, MAX_RUNS = 2, 4
ATTENTION_KINDS = ("MHA", "GQA", "MQA")


def attention_kind(cfg: ModelConfig) -> str:
    """"MHA" (a K/V head per query head), "MQA" (one K/V head), else "GQA"."""
    if cfg.n_kv_heads == cfg.n_heads:
        return "MHA"
    return "MQA" if cfg.n_kv_heads == 1 else "GQA"


def _attention_value(cfg: ModelConfig) -> str:
    kind = attention_kind(cfg)
    return f"GQA x{cfg.n_heads // cfg.n_kv_heads}" if kind == "GQA" else kind


def _kv_heads_for(kind: str, n_heads: int, group: int | None = None) -> int:
    """K/V heads for attention ``kind`` with ``n_heads`` query heads (GQA: ``group`` query heads
    per K/V head, default 2)."""
    if kind == "MHA":
        return n_heads
    if kind == "MQA":
        return 1
    group = group or 2
    if n_heads % group or n_heads // group in (1, n_heads) or group < 2:
        raise ValueError(f"grouped-query attention needs a group size that divides n_heads={n_heads} "
                         f"and leaves between 2 and {n_heads - 1} K/V heads (got {group} query heads "
                         "per K/V head)")
    return n_heads // group


def _with_heads(cfg: ModelConfig, n_heads: int) -> dict:
    kind = attention_kind(cfg)
    group = cfg.n_heads // cfg.n_kv_heads if kind == "GQA" else None
    return {"n_heads": n_heads, "n_kv_heads": _kv_heads_for(kind, n_heads, group)}


def _with_width(cfg: ModelConfig, d_model: int) -> dict:
    ratio = cfg.d_ff / cfg.d_model
    d_ff = d_model * ratio
    if d_ff != int(d_ff):
        raise ValueError(f"d_model={d_model} cannot keep d_ff / d_model = {ratio:g}")
    return {"d_model": d_model, "d_ff": int(d_ff)}


@dataclass(frozen=True)
class Setting:
    """One thing a pair may vary. ``value(cfg)`` reads it from a config (what must differ),
    ``fields(cfg, v)`` the ModelConfig fields that set it to ``v``, ``label(v)`` names the run."""

    name: str
    title: str
    value: Callable[[ModelConfig], Any]
    fields: Callable[[ModelConfig, Any], dict]
    label: Callable[[Any], str]
    choices: tuple = ()  # the allowed values when they are a fixed list
    moves: tuple[str, ...] = ()  # ModelConfig fields it changes


def _plural(n: int, word: str) -> str:
    return f"{n}-{word}" if n == 1 else f"{n}-{word}s"


SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("pos", "positional scheme", lambda c: c.pos, lambda c, v: {"pos": v}, str,
            POS_SCHEMES, ("pos",)),
    Setting("attention", "attention kind (MHA / GQA / MQA)", _attention_value,
            lambda c, v: {"n_kv_heads": _kv_heads_for(v, c.n_heads)}, str, ATTENTION_KINDS,
            ("n_kv_heads",)),
    Setting("norm", "normalisation placement (pre / post)", lambda c: c.norm,
            lambda c, v: {"norm": v}, lambda v: f"{v}-norm", NORM_PLACEMENTS, ("norm",)),
    Setting("window", "attention window (None = full)", lambda c: c.window,
            lambda c, v: {"window": None if v in (None, 0) else int(v)},
            lambda v: "full" if v in (None, 0) else f"window-{v}", (), ("window",)),
    Setting("n_layers", "layers", lambda c: c.n_layers, lambda c, v: {"n_layers": int(v)},
            lambda v: _plural(int(v), "layer"), (), ("n_layers",)),
    Setting("n_heads", "heads", lambda c: c.n_heads, lambda c, v: _with_heads(c, int(v)),
            lambda v: _plural(int(v), "head"), (), ("n_heads", "n_kv_heads")),
    Setting("d_model", "width (d_model)", lambda c: c.d_model, lambda c, v: _with_width(c, int(v)),
            lambda v: f"d{int(v)}", (), ("d_model", "d_ff")),
)}
# Beyond the fields its setting moves, nothing may change; and a setting that moves a dependent
# field keeps these relations (a wider model, the same d_ff / d_model).
INVARIANTS: dict[str, Callable[[ModelConfig], Any]] = {"d_ff / d_model": lambda c: c.d_ff / c.d_model}


@dataclass(frozen=True)
class PairRun:
    name: str          # stem + "-" + label, e.g. "lm-post-norm"
    label: str         # what this run's setting is, e.g. "post-norm"
    setting: str
    value: Any
    model_config: ModelConfig
    train_config: TrainConfig


def _setting(name: str) -> Setting:
    if name not in SETTINGS:
        raise ValueError(f"unknown setting {name!r}; a pair may vary one of: {', '.join(SETTINGS)}")
    return SETTINGS[name]


def make_pair(base: ModelConfig, train_config: TrainConfig, setting: str, values: Sequence,
              stem: str = "pair") -> list[PairRun]:
    """One run per value of ``setting`` (2-4 distinct values), each ``base`` with that setting
    changed (and only the fields it moves), all with ``train_config``. Raises ValueError with the
    config's own message when a value does not make a valid model."""
    s = _setting(setting)
    values = list(values)
    if not MIN_RUNS <= len(values) <= MAX_RUNS:
        raise ValueError(f"a pair has {MIN_RUNS} to {MAX_RUNS} runs, not {len(values)}")
    if s.choices:
        bad = [v for v in values if v not in s.choices]
        if bad:
            raise ValueError(f"{setting}: {bad[0]!r} is not one of {', '.join(map(str, s.choices))}")
    runs = []
    for v in values:
        try:
            cfg = base.replace(**s.fields(base, v))
        except (TypeError, ValueError) as e:
            raise ValueError(f"{s.title} = {v}: {e}") from None
        label = s.label(v)
        runs.append(PairRun(f"{stem}-{label}", label, setting, v, cfg, train_config))
    labels = [r.label for r in runs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"{s.title}: the values {', '.join(map(str, values))} are not all different")
    check_pair([(r.model_config, r.train_config) for r in runs])
    return runs


def _varies(configs, f: Callable[[Any], Any]) -> bool:
    return len({repr(f(c)) for c in configs}) > 1


def differences(configs: Sequence[ModelConfig]) -> list[str]:
    """The settings whose value differs between ``configs``, then "field X" for every other
    ModelConfig field that differs outside what those settings move, and any broken invariant."""
    differ = [name for name, s in SETTINGS.items() if _varies(configs, s.value)]
    allowed = {f for name in differ for f in SETTINGS[name].moves}
    dicts = [c.to_dict() for c in configs]
    fields = [f"field {k}" for k in dicts[0] if k not in allowed and _varies(dicts, lambda d: d[k])]
    return differ + fields + [name for name, f in INVARIANTS.items() if _varies(configs, f)]


def check_pair(runs: Sequence[tuple[ModelConfig, TrainConfig]]) -> str:
    """The one setting in which the runs differ; ValueError unless there are 2-4 runs with equal
    train configs (seed, steps, lr, ...) and model configs that differ in exactly one setting."""
    if not MIN_RUNS <= len(runs) <= MAX_RUNS:
        raise ValueError(f"a pair has {MIN_RUNS} to {MAX_RUNS} runs, not {len(runs)}")
    models = [m for m, _ in runs]
    trains = [t.to_dict() for _, t in runs]
    bad = sorted(k for k in trains[0] if len({repr(t[k]) for t in trains}) > 1)
    if bad:
        raise ValueError(f"the runs of a pair train the same way; these differ: {', '.join(bad)}")
    diff = differences(models)
    if not diff:
        raise ValueError("the runs are identical: a pair differs in exactly one setting")
    if len(diff) > 1:
        raise ValueError(f"a pair differs in exactly one setting; these differ: {', '.join(diff)}")
    if diff[0] not in SETTINGS:
        raise ValueError(f"{diff[0]} differs, and a pair may vary only one of: {', '.join(SETTINGS)}")
    return diff[0]


# What the "train a pair" form starts from, per setting (text, as typed): two runs each, which a
# server's default per-session limit (TFVIZ_JOBS_PER_SESSION = 2) accepts; attention's two ends.
DEFAULT_VALUES = {"pos": "rope, alibi", "attention": "MHA, MQA", "norm": "pre, post",
                  "window": "full, 4", "n_layers": "1, 2", "n_heads": "2, 4", "d_model": "32, 64"}


def parse_values(setting: str, text: str) -> list:
    """The values of ``setting`` typed as text, comma-separated ("pre, post"; "full, 4" for a
    window; whole numbers for layers, heads, width). ValueError saying what is wrong."""
    s = _setting(setting)
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise ValueError(f"type {MIN_RUNS} to {MAX_RUNS} values of the {s.title}, separated by commas")
    if s.choices:
        lookup = {str(c).lower(): c for c in s.choices}
        bad = [p for p in parts if p.lower() not in lookup]
        if bad:
            raise ValueError(f"{bad[0]!r} is not one of {', '.join(map(str, s.choices))}")
        return [lookup[p.lower()] for p in parts]
    out = []
    for p in parts:
        if setting == "window" and p.lower() in ("full", "none", "0"):
            out.append(None)
            continue
        try:
            out.append(int(p))
        except ValueError:
            raise ValueError(f"{s.title}: {p!r} is not a whole number"
                             + (" (or 'full')" if setting == "window" else "")) from None
    return out


QUICK_STEPS = 100  # a quick pair: each run this many steps of its task's CPU preset
QUICK_D_MODEL = 32


def preset_pair(task, setting: str, values: Sequence, *, steps: int = QUICK_STEPS,
                lr: float | None = None, warmup: int | None = None, d_model: int | None = QUICK_D_MODEL,
                stem: str | None = None, **model_overrides) -> list[PairRun]:
    """A pair on ``task`` (a Task) from its "quick (CPU)" preset (``tfviz.train.presets``), made
    quick: ``steps`` steps (evaluated 4 times, 10 attention snapshots), d_model ``d_model`` (None:
    the preset's), optional ``lr`` / ``warmup`` and other ModelConfig overrides for the base;
    then ``make_pair`` over ``setting`` = ``values``. ValueError with the configs' own messages."""
    from ..train.presets import CPU, build_configs, presets_for

    pre = presets_for(task.name)[CPU]
    model = {**pre.model, **({"d_model": d_model} if d_model else {}), **model_overrides}
    train = {**pre.train.to_dict(), "steps": int(steps), "eval_every": max(1, int(steps) // 4),
             "snapshot_every": max(1, int(steps) // 10), "log_every": max(1, min(10, int(steps) // 20))}
    if lr is not None:
        train["lr"] = float(lr)
    train["warmup"] = min(int(warmup if warmup is not None else train["warmup"]), max(0, int(steps) - 1))
    base, tc = build_configs(task, model, train)
    return make_pair(base, tc, setting, values, stem=stem or task.name)


def submit_pair(manager, runs: Sequence[PairRun], task, *, owner: str | None = None,
                directory=None, names: Sequence[str] | None = None, client: str | None = None) -> list[str]:
    """Queue the runs of a pair (``make_pair``) on ``manager`` (a ``RunManager``, or
    anything with its ``submit_group``) for ``task``, all or none; checked again with ``check_pair``. ``names``: the job names (the
    runs' own by default); with ``directory`` each saves ``directory/<name>.safetensors``.
    Returns the job ids in the runs' order. JobLimitError / BudgetError / ValueError say why
    nothing was queued."""
    from pathlib import Path

    check_pair([(r.model_config, r.train_config) for r in runs])
    names = list(names) if names is not None else [r.name for r in runs]
    if len(names) != len(runs) or len(set(names)) != len(names):
        raise ValueError("each run of a pair needs its own name")
    specs = [{"model_config": r.model_config, "train_config": r.train_config, "name": n,
              "checkpoint": None if directory is None else Path(directory) / f"{n}.safetensors"}
             for r, n in zip(runs, names)]
    return manager.submit_group(specs, task, owner=owner, client=client)


__all__ = ["ATTENTION_KINDS", "DEFAULT_VALUES", "parse_values", "MAX_RUNS", "MIN_RUNS", "PairRun", "SETTINGS", "Setting",
           "QUICK_STEPS", "attention_kind", "check_pair", "differences", "make_pair", "preset_pair",
           "submit_pair"]
