"""Why attention, measured on models trained here with one budget (issue 14, items 2 and 3).

Two experiments, each trains several model kinds with the same task, steps, batch, learning rate
and seed (CPU, one torch thread), saves every model as an ordinary checkpoint under
``checkpoints/why/`` (a subfolder: the pages' model lists show the zoo only), and measures the
saved files on fresh inputs:

    recall      (``tfviz.tasks.recall``) remember a key symbol across d filler tokens:
                tanh RNN vs LSTM vs transformer -> accuracy vs distance (trained 1..32, measured to
                64), the gradient of the answer's loss at every input position (the vanishing
                gradient), the maximum path length O(n) vs O(1)
    bottleneck  reverse a sequence: GRU encoder-decoder without attention (the whole source in one
                state), with Bahdanau attention, and a transformer -> accuracy vs source length
                (trained 2..10, measured to 16), the additive attention's alignment (recorded as
                ``decoder.cross_attn.hook_pattern``) against the reversal's

    python -m tfviz.zoo why [--steps N] [--out DIR]     train, save, measure, write DIR/README.md

``measure_recall`` / ``measure_bottleneck`` take any models and task; everything they return is a
DataFrame the figures in ``tfviz.viz.longrange`` draw. The Why attention page reads them back
from why.json (``tfviz.zoo.why_story.read_results``, ``ui.why``).
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from ..analysis.bottleneck import accuracy_by_length, alignment_share, cross_attention, fresh_at_length, reverse_alignment
from ..analysis.longrange import (accuracy_by_distance, decay_per_step, gradient_by_distance,
                                  gradient_through_time, max_path_length)
from ..model.families import kind_of, lacks
from ..paths import zoo_dir
from ..storage import atomic_write
from ..tasks import make_task
from ..train import TrainConfig, model_config_for, new_model, train
from ..train.checkpoint import load_checkpoint, save_checkpoint
from .specs import TRAIN_DEFAULTS

COMMAND = "python -m tfviz.zoo why"
SUBFOLDER = "why"


@dataclass(frozen=True)
class Experiment:
    """One task, one training budget, several models (label -> (kind, config fields))."""

    name: str
    about: str
    task: dict[str, Any]
    models: dict[str, tuple[str, dict[str, Any]]]
    train: dict[str, Any]
    tried: tuple[str, ...] = field(default=())

    def train_config(self, steps: int | None = None) -> TrainConfig:
        fields = {**TRAIN_DEFAULTS, "eval_every": 0, "snapshot_every": 0, **self.train}
        if steps is not None:
            fields["steps"] = steps
            fields["warmup"] = min(fields.get("warmup", 0), max(steps - 1, 0))
        return TrainConfig(**fields)

    def file(self, label: str) -> str:
        return f"{self.name}-{label}"


RECALL = Experiment(
    "recall", "Remember a key symbol (one of 8) across 1-32 filler tokens; answer it at [SEP].",
    task={"name": "recall", "seed": 0, "n_keys": 8, "n_fillers": 16, "min_distance": 1,
          "max_distance": 32, "n_train": 10000, "n_val": 200, "n_test": 200},
    models={"rnn": ("rnn", dict(d_model=64, n_layers=1)),
            "lstm": ("lstm", dict(d_model=64, n_layers=1)),
            "transformer": ("transformer", dict(d_model=64, n_heads=4, n_layers=2, pos="rope"))},
    train=dict(steps=600, batch_size=64, lr=3e-3, warmup=50, seed=1),
    tried=("600 steps, batch 64, lr 3e-3, distances 1-32, seed 0: the RNN did not learn at all "
           "(0.36 at distance 1, 0.2-0.3 beyond); LSTM and transformer 1.00 at every distance to 64",
           "the same with distances 1-16: RNN 1.00 to 16, then 0.96 / 0.90 / 0.82 / 0.73 at 24 / 32 / "
           "48 / 64; LSTM and GRU 1.00 to 64",
           "chosen: distances 1-32, seed 1 (the RNN learns, and falls with distance)"))

BOTTLENECK = Experiment(
    "bottleneck", "Reverse a sequence of 8 symbols, 2-10 long (encoder-decoder).",
    task={"name": "reverse", "seed": 0, "arch": "encoder-decoder", "n_symbols": 8, "min_len": 2,
          "max_len": 10, "n_train": 8000, "n_val": 200, "n_test": 200},
    models={"gru": ("gru", dict(arch="encoder-decoder", d_model=64, attention="none")),
            "gru-attention": ("gru", dict(arch="encoder-decoder", d_model=64, attention="additive")),
            "transformer": ("transformer", dict(arch="encoder-decoder", d_model=64, n_heads=4,
                                                n_layers=2, pos="sinusoidal", max_len=48))},
    train=dict(steps=800, batch_size=64, lr=3e-3, warmup=50, seed=0))

EXPERIMENTS = {e.name: e for e in (RECALL, BOTTLENECK)}
DISTANCES = (1, 2, 4, 8, 16, 24, 32, 48, 64)
LENGTHS = tuple(range(2, 17))
GRADIENT_DISTANCE = 24  # fillers in the sequences whose input gradients are measured
PATH_LENGTHS = (4, 8, 16, 32, 64)


# ------------------------------------------------------------------------------------ measuring
def measure_recall(models: dict[str, torch.nn.Module], task, n: int = 256,
                   distances=DISTANCES, initial: dict[str, torch.nn.Module] | None = None) -> dict[str, pd.DataFrame]:
    """On fresh sequences (other seeds than the task's): ``accuracy`` (model, distance, accuracy,
    loss, n, trained, chance), ``gradient`` (model, steps_back, position, token_kind, grad_norm, ...
    at GRADIENT_DISTANCE fillers), ``paths`` (model, n, path_length), ``summary`` (model, kind,
    decay per step: log10 of the gradient's factor per step back over the fillers; key/near: the
    key's gradient over the gradient one step back from the question); with ``initial`` (the same
    models as they were before training, ``initial_models``) also ``through_time``
    (``longrange.gradient_through_time`` at initialisation and trained, on the same sequences)."""
    acc, grad, paths, summary = [], [], [], []
    extra = {}
    if initial is not None:
        extra["through_time"] = gradient_through_time({"initialisation": initial, "trained": models}, task,
                                                      GRADIENT_DISTANCE, n=min(n, 64))
    for label, m in models.items():
        acc.append(accuracy_by_distance(m, task, distances, n=n).assign(model=label))
        g = gradient_by_distance(m, task, GRADIENT_DISTANCE, n=min(n, 64)).assign(model=label)
        grad.append(g)
        paths.append(pd.DataFrame({"model": label, "n": list(PATH_LENGTHS),
                                   "path_length": [max_path_length(m.config, k) for k in PATH_LENGTHS]}))
        key = float(g.loc[g["token_kind"] == "key", "grad_norm"].iloc[0])
        near = float(g.loc[g["steps_back"] == 1, "grad_norm"].iloc[0])
        summary.append({"model": label, "kind": kind_of(m.config), "decay_per_step": decay_per_step(g),
                        "key_over_near": key / near})
    return {"accuracy": pd.concat(acc, ignore_index=True), "gradient": pd.concat(grad, ignore_index=True),
            "paths": pd.concat(paths, ignore_index=True), "summary": pd.DataFrame(summary), **extra}


def initial_models(experiment: str, models: dict[str, torch.nn.Module]) -> dict[str, torch.nn.Module]:
    """Each trained model as it was before its first step: ``new_model`` of its config with the
    experiment's training seed (what ``build_experiment`` trained from)."""
    seed = EXPERIMENTS[experiment].train_config().seed
    return {label: new_model(m.config, seed).eval() for label, m in models.items()}


def alignment_by_length(model, task, lengths=(4, 8, 10, 12, 16), n: int = 64, seed: int = 5000) -> pd.DataFrame:
    """Share of decoder positions whose strongest cross-attention weight (the last decoder layer's,
    heads averaged, for a transformer; the one additive attention otherwise) is on the source token
    the reversal makes it produce (``alignment``), or on the source token it reads as its input
    (``alignment_input``: one position earlier), averaged over fresh sources of each length."""
    rows = []
    for L in lengths:
        examples = fresh_at_length(task, L, n, seed + L).examples("test")
        if not examples:
            continue
        out, inp = [], []
        for ex in examples:
            pats = cross_attention(model, ex.src, ex.tokens)
            p = pats[sorted(pats)[-1]].mean(0)  # [q_pos, k_pos]
            out.append(alignment_share(p, reverse_alignment(L)))
            inp.append(alignment_share(p, reverse_alignment(L, "input")))
        rows.append({"length": L, "alignment": float(np.mean(out)), "alignment_input": float(np.mean(inp)),
                     "n": len(examples)})
    return pd.DataFrame(rows)


def measure_bottleneck(models: dict[str, torch.nn.Module], task, n: int = 256,
                       lengths=LENGTHS) -> dict[str, pd.DataFrame]:
    """On fresh sources never in the training split: ``accuracy`` (model, length, accuracy,
    token_accuracy, loss, n, trained) and ``alignment`` (model, length, alignment, n) for the
    models with cross-attention."""
    acc, align = [], []
    for label, m in models.items():
        acc.append(accuracy_by_length(m, task, lengths, n=n).assign(model=label))
        if not lacks(m, "cross_attention"):
            align.append(alignment_by_length(m, task, n=min(n, 64)).assign(model=label))
    return {"accuracy": pd.concat(acc, ignore_index=True),
            "alignment": pd.concat(align, ignore_index=True) if align else pd.DataFrame()}


MEASURES: dict[str, Callable] = {"recall": measure_recall, "bottleneck": measure_bottleneck}


def _measure(name: str, models, task, n: int) -> dict[str, pd.DataFrame]:
    if name == "recall":
        return measure_recall(models, task, n=n, initial=initial_models(name, models))
    return MEASURES[name](models, task, n=n)


# ------------------------------------------------------------------------------------ building
def why_dir(folder: str | Path | None = None) -> Path:
    """``folder``, or the zoo's folder (``tfviz.paths.zoo_dir``) / why."""
    return Path(folder) if folder is not None else zoo_dir() / SUBFOLDER


def load(experiment: str, folder: str | Path | None = None):
    """(models by label, the task) of a built experiment's checkpoints."""
    e = EXPERIMENTS[experiment]
    folder = why_dir(folder)
    ckpts = {label: load_checkpoint(folder / f"{e.file(label)}.safetensors") for label in e.models}
    first = next(iter(ckpts.values()))
    return {label: c.model for label, c in ckpts.items()}, first.shared_task()


def build_experiment(e: Experiment, out: Path, steps: int | None = None,
                     log: Callable[[str], None] = print, n: int = 256) -> dict[str, Any]:
    """Train every model of ``e`` with its one budget, save each, measure the saved files (``n``
    fresh inputs per distance / length) -> the experiment's results (JSON-able)."""
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    task = make_task(e.task)
    tc = e.train_config(steps)
    timings = {}
    for label, (kind, fields) in e.models.items():
        model = new_model(model_config_for(task, kind, **fields), tc.seed)
        t0 = time.perf_counter()
        result = train(model, task, tc)
        timings[label] = round(time.perf_counter() - t0, 1)
        if not result.ok:
            raise RuntimeError(f"{e.file(label)}: training failed: {result.message}")
        save_checkpoint(out / f"{e.file(label)}.safetensors", model, task=task, train_config=tc,
                        history=result.history, extra={"why": e.name, "label": label,
                                                       "train_seconds": timings[label],
                                                       "final": result.final})
        log(f"{e.file(label)}: {tc.steps} steps in {timings[label]} s")
    models, task = load(e.name, out)  # measured as a user loading the files gets them
    frames = _measure(e.name, models, task, n)
    return {"experiment": e.name, "about": e.about, "task": task.spec(), "train": tc.to_dict(),
            "train_seconds": timings, "tried": list(e.tried),
            "command": COMMAND + (f" --steps {steps}" if steps else ""),
            "torch": torch.__version__, **{k: v.to_dict("records") for k, v in frames.items()}}


def _table(records: list[dict], index: str, column: str, value: str, fmt: str = "{:.2f}") -> list[str]:
    df = pd.DataFrame(records)
    if df.empty:
        return []
    wide = df.pivot(index=index, columns=column, values=value)[list(df[column].unique())]
    head = f"| {index} | " + " | ".join(map(str, wide.columns)) + " |"
    lines = [head, "|" + "---|" * (len(wide.columns) + 1)]
    lines += [f"| {i} | " + " | ".join(fmt.format(v) for v in row) + " |" for i, row in wide.iterrows()]
    return lines


def _opening(title: str, result: dict, lead: str, first_table: str) -> list[str]:
    """A readme section's title, what the experiment is about, the training budget every model
    shared, and the caption of its first table."""
    t = result["train"]
    return [f"## {title}", "", result["about"],
            f"{lead}: {t['steps']} steps, batch {t['batch_size']}, lr {t['lr']}, seed {t['seed']}; "
            f"training seconds: {result['train_seconds']}.", "", first_table, ""]


def readme(results: dict[str, dict]) -> str:
    lines = ["# Why attention: measured (issue 14, items 2-3)", "",
             f"Rebuild with `{COMMAND}` (CPU, 1 torch thread, fixed seeds). Every number below is "
             "measured on the saved checkpoints with fresh inputs (other seeds than training; "
             "bottleneck sources never in the training split).", ""]
    r = results.get("recall")
    if r:
        lines += _opening("Long-range dependency (recall)", r, "Same budget for every model",
                          "Accuracy on fresh sequences (chance 0.125; trained distances 1-32):")
        lines += _table(r["accuracy"], "distance", "model", "accuracy")
        lines += ["", f"Gradient of the answer's loss at each input position (fresh sequences with "
                      f"{GRADIENT_DISTANCE} fillers): log10 factor per step back and the key's "
                      "gradient relative to the one a step before the question:", ""]
        for s in r["summary"]:
            lines.append(f"- {s['model']}: {s['decay_per_step']:+.3f} per step "
                         f"(x{10 ** s['decay_per_step']:.3f}), key/near {s['key_over_near']:.2e}")
        if r.get("through_time"):
            from ..analysis.longrange import through_time_summary

            t = through_time_summary(pd.DataFrame(r["through_time"]))
            lines += ["", "The same gradient at initialisation (the models before their first step, same "
                          "seed) and trained, on the same fresh sequences: the key's gradient relative "
                          "to the one a step before the question, and the mean loss:", ""]
            lines += [f"- {row.model}, {row.stage}: key/near {row.key_over_near:.2e}, "
                      f"x{10 ** row.decay_per_step:.3f} per step, loss {row.loss:.3g}" for row in t.itertuples()]
        lines += ["", "Maximum path length (steps from an input to an output):", ""]
        lines += _table(r["paths"], "n", "model", "path_length", "{:.0f}")
        lines += ["", "Tried:", *[f"- {t}" for t in r["tried"]], ""]
    b = results.get("bottleneck")
    if b:
        lines += _opening("The bottleneck (reverse)", b, "Same budget",
                          "Whole output right (teacher-forced) on fresh sources (trained lengths 2-10):")
        lines += _table(b["accuracy"], "length", "model", "accuracy")
        lines += ["", "Tokens right:", ""]
        lines += _table(b["accuracy"], "length", "model", "token_accuracy")
        lines += ["", "Alignment: share of decoder positions whose strongest cross-attention weight "
                      "is on the source token they must produce:", ""]
        lines += _table(b["alignment"], "length", "model", "alignment")
        lines += ["", "... and on the source token they read as input (the one produced a step "
                      "earlier):", ""]
        lines += _table(b["alignment"], "length", "model", "alignment_input")
        lines.append("")
    return "\n".join(lines)


def remeasure(names=None, folder: str | Path | None = None, n: int = 256) -> dict[str, dict]:
    """Measure the saved checkpoints of the named experiments again (no training) and rewrite
    folder/why.json and README.md: after a change to what is measured."""
    folder = why_dir(folder)
    results = load_results(folder)
    for name in names or [k for k in EXPERIMENTS if k in results]:
        models, task = load(name, folder)
        results[name].update({k: v.to_dict("records") for k, v in _measure(name, models, task, n).items()})
    atomic_write(folder / "why.json", json.dumps(results, indent=1, default=float).encode())
    atomic_write(folder / "README.md", readme(results).encode())
    return results


def build(names=None, out: str | Path | None = None, steps: int | None = None,
          log: Callable[[str], None] = print) -> dict[str, dict]:
    """Train, save and measure the named experiments (all when None) into ``out`` (default
    checkpoints/why/); writes out/why.json (every measured frame) and out/README.md."""
    out = why_dir(out)
    unknown = sorted(set(names or ()) - set(EXPERIMENTS))
    if unknown:
        raise ValueError(f"unknown experiment(s) {unknown}; known: {', '.join(EXPERIMENTS)}")
    summary_path = out / "why.json"
    results = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    for name in names or EXPERIMENTS:
        results[name] = build_experiment(EXPERIMENTS[name], out, steps, log)
    atomic_write(summary_path, json.dumps(results, indent=1, default=float).encode())
    atomic_write(out / "README.md", readme(results).encode())
    return results


# ------------------------------------------------------------------------------------ reading back
MAX_RESULTS_BYTES = 16 * 2**20


def load_results(folder: str | Path | None = None) -> dict[str, dict]:
    """The measured results of the built experiments (``why.json``, written by ``build`` from the
    saved checkpoints), {} when none were built."""
    path = why_dir(folder) / "why.json"
    if not path.is_file() or path.stat().st_size > MAX_RESULTS_BYTES:
        return {}
    return json.loads(path.read_text())
