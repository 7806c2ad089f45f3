"""Good starting points for each task: a model (ModelConfig overrides) and a TrainConfig that
train to a visible result — a falling loss and heads that specialise — quickly.

    preset = presets_for("coref")["quick (CPU)"]
    task = make_task(preset.task, **preset.task_params)
    model_config, train_config = build_configs(task, preset.model, preset.train.to_dict(), preset.kind)

Each task has a transformer preset (``QUICK``, keyed by task); recurrent baselines (RNN / LSTM /
GRU, ``tfviz.model.recurrent``) have their own measured presets (``RECURRENT``, keyed
"task-kind"), and ``presets_for(task, cuda, kind)`` offers a kind's presets for a task (a kind
without a measured preset there gets one derived from the transformer's: ``recurrent_default``).

"quick (CPU)" presets train on one CPU thread; how long each took, what it reached and under what
load is *measured* (``python -m tfviz.train.presets measure``) and stored beside this file in
preset_timings.json, which the Train page quotes (``claim``): a figure shown to a class is one
someone measured, never an estimate. "bigger (GPU)" presets are wider and deeper, with more steps
and larger batches, meant for a CUDA GPU. ``build_configs`` is the one place form input becomes
validated configs: every bad value surfaces as ModelConfig's / TrainConfig's ``ValueError``.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..model import ModelConfig
from ..model.families import KIND_LABELS, KINDS
from ..model.recurrent import ARCHS as RECURRENT_ARCHS
from .config import TrainConfig
from .setup import longest_example, model_config_for

CPU, GPU = "quick (CPU)", "bigger (GPU)"


@dataclass(frozen=True)
class Preset:
    task: str
    what: str                     # what to look for once it has trained
    model: dict[str, Any]         # config overrides (vocab_size / max_len come from the task)
    train: TrainConfig
    task_params: dict[str, Any] = field(default_factory=dict)
    kind: str = "transformer"     # tfviz.model.families.KINDS: "transformer", "rnn", "lstm", "gru"
    offered_as: str | None = None  # the Train page's label, for a task's extra presets (real text)


def _cpu(steps: int, snapshot_every: int, **kw: Any) -> TrainConfig:
    base = dict(steps=steps, batch_size=32, lr=3e-3, warmup=max(steps // 10, 1), eval_every=50,
                eval_examples=200, snapshot_every=snapshot_every, checkpoint_every=0, log_every=10)
    return TrainConfig(**{**base, **kw})


def _gpu(steps: int, **kw: Any) -> TrainConfig:
    """Early stopping (``patience``) ends a run once the validation loss stops falling, so a
    preset stops near its best instead of memorising the training set."""
    base = dict(steps=steps, batch_size=128, lr=1e-3, warmup=steps // 20, eval_every=100,
                eval_examples=500, snapshot_every=steps // 40, checkpoint_every=1000, log_every=25,
                patience=3, min_delta=0.001)
    return TrainConfig(**{**base, **kw})


SMALL = dict(d_model=64, n_heads=4, n_layers=2)
BIG = dict(d_model=256, n_heads=8, n_layers=4)

QUICK: dict[str, Preset] = {
    "coref": Preset("coref", "the last position ('it') attends to the noun it refers to",
                    dict(SMALL, arch="decoder", pos="rope"), _cpu(400, 20)),
    # r drawn with replacement from each sequence's own 8..50 symbols (repeats inside r, as text
    # has) and |r| of 4..16 (a fixed |r| let the model look back a fixed distance instead:
    # loss 0.007 at |r| = 16, 3.9-8.5 at |r| = 4, 8, 12); the loss on every token whose
    # continuation followed it before. Measured (fresh [BOS] r r, r drawn with replacement from
    # all 50 symbols, 64 per |r|): loss 0.013 / 0.11 / 0.13 / 0.12 at |r| = 4 / 8 / 12 / 16
    # against the bigram copier's floor 0.022 / 0.092 / 0.148 / 0.192
    "induction": Preset("induction", "an induction head: in the repeat, each token attends to the "
                        "token after its earlier copy (an off-diagonal stripe); where a token "
                        "occurred twice, to both",
                        dict(SMALL, n_heads=2, arch="decoder", pos="learned", attn_only=True),
                        _cpu(1500, 75, eval_every=100),
                        dict(distinct=False, min_alphabet=8, loss_on="seen", min_half=4)),
    "copy": Preset("copy", "cross-attention becomes a diagonal: output i reads input i",
                   dict(SMALL, arch="encoder-decoder", pos="sinusoidal"), _cpu(400, 20)),
    "reverse": Preset("reverse", "cross-attention becomes an anti-diagonal",
                      dict(SMALL, arch="encoder-decoder", pos="sinusoidal"), _cpu(400, 20)),
    "sort": Preset("sort", "each output reads the next-larger input symbol",
                   dict(SMALL, arch="encoder-decoder", pos="sinusoidal"), _cpu(400, 20)),
    "translate": Preset("translate", "cross-attention follows the word alignment, crossing where "
                        "French puts the adjective after the noun",
                        dict(SMALL, arch="encoder-decoder", pos="sinusoidal"), _cpu(300, 15)),
    "mlm": Preset("mlm", "[MASK] positions attend to their neighbours on both sides",
                  dict(SMALL, arch="encoder", pos="alibi"), _cpu(600, 30, eval_every=100)),
    "lm": Preset("lm", "previous-token heads; the loss falls well below log(vocab)",
                 dict(SMALL, arch="decoder", pos="rope"), _cpu(400, 20, eval_every=100)),
    # one layer, loss on every word: one head's pattern from the final pronoun is the choice
    # (tfviz.zoo.specs.AGREEMENT_TRIED: with two layers the choice can pass elsewhere)
    "agreement": Preset("agreement", "one head's attention goes from the final pronoun to the noun "
                        "of its number (it/its -> the singular one, they/their -> the plural one); "
                        "switch it off on the Effects tab and the model guesses between the nouns",
                        dict(SMALL, n_layers=1, arch="decoder", pos="rope", attn_only=True),
                        _cpu(800, 40, eval_every=100), dict(loss_on="all")),
    "recall": Preset("recall", "at [SEP] a head attends straight to the key, however many fillers "
                     "lie between (the Why attention page compares RNNs and LSTMs)",
                     dict(SMALL, arch="decoder", pos="rope"), _cpu(300, 15),
                     dict(max_distance=16, n_train=4000, n_val=200, n_test=200)),
}

GPU_TASK_PARAMS = {"lm": dict(n_sentences=100_000)}  # 5x the text: a bigger model memorises less
# Step caps from validation curves measured on an H100 (docs/bench/presets_cuda_curves.txt): every task
# had levelled off by about a third of these; early stopping usually ends a run before the cap.
# Encoder-decoder steps cost about twice a decoder's.
GPU_STEPS = {"coref": 1000, "agreement": 1000, "induction": 1000, "copy": 800, "reverse": 800, "sort": 800,
             "translate": 800, "mlm": 1500, "lm": 1500, "recall": 800}

BIGGER: dict[str, Preset] = {
    name: Preset(p.task, p.what, {**p.model, **BIG, **({"n_heads": 4} if name == "induction" else {}),
                                  **({"n_layers": 1} if name == "agreement" else {})},
                 _gpu(GPU_STEPS[name]),
                 {**p.task_params, **GPU_TASK_PARAMS.get(name, {})})
    for name, p in QUICK.items()
}


# Recurrent baselines (tfviz.model.recurrent), measured like the transformers' quick presets:
# "task-kind" -> Preset. Smaller than the transformers (one layer) so that they finish within a
# minute on one CPU core; each is the same task with the same tokenizer as the transformer's.
RSMALL = dict(d_model=64, n_layers=1)
RECURRENT: dict[str, Preset] = {
    "copy-lstm": Preset("copy", "an LSTM encoder-decoder with additive (Bahdanau) attention: its "
                        "alignment becomes a diagonal (the Why attention page shows it without "
                        "attention: the whole source squeezed into one state)",
                        dict(RSMALL, arch="encoder-decoder", attention="additive"), _cpu(300, 20),
                        kind="lstm"),
    "reverse-lstm": Preset("reverse", "an LSTM encoder-decoder with additive attention: its "
                           "alignment becomes an anti-diagonal",
                           dict(RSMALL, arch="encoder-decoder", attention="additive"), _cpu(300, 20),
                           kind="lstm"),
    # coref: 400 steps (the transformer's) left both at chance-like test accuracy; 1500 steps
    # is what the LSTM needs, and the RNN gets the same budget to compare with
    "coref-lstm": Preset("coref", "an LSTM reads left to right and must carry the noun in its "
                         "hidden state until 'it': compare its test accuracy with the "
                         "transformer's and the RNN's", dict(RSMALL, arch="decoder"),
                         _cpu(1500, 50), kind="lstm"),
    "coref-rnn": Preset("coref", "a tanh RNN, with the LSTM's budget, must carry the noun in its "
                        "hidden state until 'it' through one tanh per token: compare its "
                        "validation and test accuracy with the LSTM's",
                        dict(RSMALL, arch="decoder"), _cpu(1500, 50), kind="rnn"),
    "lm-gru": Preset("lm", "a GRU language model: the loss falls well below log(vocab), with only "
                     "its hidden state to remember the sentence so far",
                     dict(RSMALL, arch="decoder"), _cpu(400, 20, eval_every=100), kind="gru"),
}
# Real text (issue 44): language models on the Python standard library this process runs on
# (``tasks.realtext``: its docstrings, English written by people, and its source code), split by
# file, a BPE tokenizer trained on the training files. Offered on the Train page beside lm's
# grammar preset; measured like the quick presets.
REALTEXT: dict[str, Preset] = {
    "lm-docs": Preset("lm", "real English written by people (the standard library's docstrings): the "
                      "loss stays far above the grammar's, since real text is harder; look for a head "
                      "that attends to the previous token, and let Generate continue a docstring",
                      dict(d_model=128, n_heads=4, n_layers=2, arch="decoder", pos="rope"),
                      _cpu(1000, 100, eval_every=100, lr=2e-3),
                      dict(corpus="stdlib-docs", tokenizer="bpe", vocab_size=2048, block=64),
                      offered_as="Python's docstrings (real English, CPU)"),
    "lm-code": Preset("lm", "real code: indentation, names that repeat, brackets that close; the "
                      "heads that copy a name seen earlier show up as induction heads",
                      dict(d_model=128, n_heads=4, n_layers=2, arch="decoder", pos="rope"),
                      _cpu(1000, 100, eval_every=100, lr=2e-3),
                      dict(corpus="stdlib-code", corpus_chars=2_000_000, tokenizer="bpe", vocab_size=2048,
                           block=64, n_train=15_000, n_val=1000, n_test=1000),
                      offered_as="Python's source code (real code, CPU)"),
}
ALL: dict[str, Preset] = {**QUICK, **RECURRENT, **REALTEXT}  # every measured preset, by name


def kinds_for(task: str) -> list[str]:
    """The model kinds (``KINDS``) that can train on ``task``: a recurrent model is a decoder or
    an encoder-decoder, so not on an encoder-only task (mlm)."""
    if task not in QUICK:
        raise ValueError(f"no preset for task {task!r}; known: {sorted(QUICK)}")
    from ..tasks import TASKS

    archs = TASKS[task].archs
    return [k for k in KINDS if k == "transformer" or any(a in RECURRENT_ARCHS for a in archs)]


def recurrent_default(task: str, kind: str) -> Preset:
    """A ``kind`` preset for a task without a measured one: the transformer's training settings,
    a one-layer recurrent model of the same width, the transformer's architecture if a recurrent
    model has it (else a decoder)."""
    base = QUICK[task]
    arch = base.model["arch"] if base.model["arch"] in RECURRENT_ARCHS else "decoder"
    return Preset(task, f"a {KIND_LABELS[kind]} baseline on the same task: compare its accuracy with "
                  "the transformer's", dict(RSMALL, arch=arch), base.train, base.task_params, kind)


def label(preset: Preset, gpu: bool = False) -> str:
    """How a preset is offered: "quick (CPU)" for a transformer, "LSTM quick (CPU)" etc."""
    if preset.offered_as:
        return preset.offered_as
    name = GPU if gpu else CPU
    return name if preset.kind == "transformer" else f"{KIND_LABELS[preset.kind]} {name}"


def presets_for(task: str, cuda: bool = False, kind: str = "transformer") -> dict[str, Preset]:
    """The presets to offer for ``task`` and a model ``kind``: a transformer's quick CPU one, plus
    the bigger one when a CUDA GPU is there; a recurrent kind's measured ones (``RECURRENT``), or
    ``recurrent_default`` where it has none."""
    if kind not in kinds_for(task):
        raise ValueError(f"no {KIND_LABELS.get(kind, kind)} preset for task {task!r}: a "
                         f"{KIND_LABELS.get(kind, kind)} cannot train on it (kinds: "
                         f"{', '.join(kinds_for(task))})")
    if kind != "transformer":
        mine = [p for p in RECURRENT.values() if p.task == task and p.kind == kind]
        return {label(p): p for p in mine or [recurrent_default(task, kind)]}
    out = {CPU: QUICK[task], **{label(p): p for p in REALTEXT.values() if p.task == task}}
    if cuda:
        out[GPU] = BIGGER[task]
    return out


def build_configs(task, model_fields: dict[str, Any], train_fields: dict[str, Any],
                  kind: str = "transformer") -> tuple[ModelConfig, TrainConfig]:
    """Validated configs for ``task`` from form values, for a model ``kind`` (``KINDS``: a
    transformer's ModelConfig, or a RecurrentConfig). vocab_size always comes from the task's
    tokenizer; max_len defaults to the longest example (rounded up to 16) and must fit it.
    Raises ``ValueError`` with the configs' own message on any bad value."""
    fields = {k: v for k, v in model_fields.items() if k != "vocab_size"}
    if kind == "transformer" and not fields.get("window"):
        fields["window"] = None
    longest = longest_example(task)
    if kind == "transformer" and fields.get("max_len") is not None and fields["max_len"] < longest:
        raise ValueError(f"max_len={fields['max_len']} is shorter than the task's longest example "
                         f"({longest} tokens): the model must have a position for every token")
    model_config = model_config_for(task, kind, **fields)
    train_config = TrainConfig(**{k: v for k, v in train_fields.items() if k != "format_version"})
    return model_config, train_config


# ------------------------------------------------------------------------ measured, not guessed
TIMINGS_FILE = Path(__file__).with_name("preset_timings.json")


def fingerprint(preset: Preset) -> str:
    """Changes whenever the preset does (its model, training or task settings): a measurement
    stored for another fingerprint is not quoted."""
    defaults = TrainConfig().to_dict()  # a new TrainConfig field with a default changes nothing
    train = {k: v for k, v in preset.train.to_dict().items() if defaults.get(k, object()) != v}
    kind = [] if preset.kind == "transformer" else [preset.kind]  # the transformers' are as before
    blob = json.dumps([preset.task, preset.model, train, preset.task_params, *kind],
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def measure(name: str, threads: int = 1) -> dict[str, Any]:
    """Train the quick preset ``name`` (``ALL``: a task's transformer, or "copy-lstm" ...) as the app does (one torch thread by default) and
    return what was measured: seconds from the call to the first loss point and to the end, the
    CPU seconds it used (about what it takes on an idle core), the task's build time, the final
    validation/test metrics, and the machine and its load average (the other work running on it)
    before and after."""
    import os
    import platform
    import time

    import torch

    from ..tasks import make_task
    from .loop import train
    from .setup import new_model

    preset = ALL[name]
    load_before = os.getloadavg()
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        t0 = time.perf_counter()
        task = make_task(preset.task, **preset.task_params)
        task.examples("train")
        built = time.perf_counter() - t0
        model_config, train_config = build_configs(task, preset.model, preset.train.to_dict(), preset.kind)
        torch.optim.AdamW([torch.zeros(1, requires_grad=True)])  # its first use imports torch._dynamo
        first: list[float] = []                                   # (the app does that at start-up)
        t1, c1 = time.perf_counter(), time.process_time()
        result = train(new_model(model_config, train_config.seed), task, train_config,
                       [lambda e: first.append(time.perf_counter() - t1) if e.kind == "metrics" else None])
        took, cpu = time.perf_counter() - t1, time.process_time() - c1
    finally:
        torch.set_num_threads(old_threads)
    return {"task": preset.task, "kind": preset.kind, "fingerprint": fingerprint(preset), "steps": train_config.steps,
            "seconds": round(took, 1), "cpu_seconds": round(cpu, 1),
            "first_loss_s": round(first[0], 2) if first else None,
            "task_build_s": round(built, 1), "status": result.status,
            "final": {k: round(v, 4) for k, v in result.final.items()},
            "threads": threads, "cpu": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "load_average": [round(load_before[0], 1),
                                                          round(os.getloadavg()[0], 1)],
            "measured": time.strftime("%Y-%m-%d")}


def timings() -> dict[str, dict[str, Any]]:
    """The stored measurements, by preset name (only those still matching their preset)."""
    try:
        stored = json.loads(TIMINGS_FILE.read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in stored.items() if k in ALL and v.get("fingerprint") == fingerprint(ALL[k])}


def name_of(preset: Preset) -> str | None:
    """The preset's name in ``ALL`` (None for one derived on the fly, ``recurrent_default``)."""
    return next((k for k, p in ALL.items() if p == preset), None)


def claim(name: str | None) -> str:
    """One sentence for the Train page: how long the quick preset ``name`` took, as measured, and
    where."""
    if name is None:
        return "This preset is not measured: it is derived from the transformer's."
    m = timings().get(name)
    if m is None:
        return "Quick preset: not measured since it last changed."
    start, end = m["load_average"]
    return (f"Quick preset: {_s(m['cpu_seconds'])} s of CPU time for {m['steps']} steps on one core "
            f"— about its time on an idle core. Wall time as measured: {_s(m['seconds'])} s (first "
            f"loss point after {m['first_loss_s']:.2g} s) on 1 core of a {m['cpu_count']}-core CPU "
            f"at load average {start:g} at the start, {end:g} at the end ({m['measured']}); with "
            f"more work on the server a run takes longer.")


def _s(seconds: float) -> str:
    return f"{seconds:.1f}" if seconds < 10 else f"{seconds:.0f}"


def claim_for(preset: Preset) -> str:
    """``claim`` of the preset the Train page shows (a transformer's by its task, as measured on
    the CPU; a recurrent one by its name)."""
    return claim(preset.task if preset.kind == "transformer" and not preset.offered_as else name_of(preset))


def _main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m tfviz.train.presets",
                                 description="Measure the quick presets; store the figures the "
                                             "Train page quotes in " + TIMINGS_FILE.name)
    ap.add_argument("command", choices=["measure"])
    ap.add_argument("tasks", nargs="*", help=f"default: all ({', '.join(ALL)})")
    args = ap.parse_args(argv)
    try:
        stored = json.loads(TIMINGS_FILE.read_text())
    except (OSError, ValueError):
        stored = {}
    for name in args.tasks or list(ALL):
        stored[name] = measure(name)
        print(json.dumps(stored[name]), flush=True)
        TIMINGS_FILE.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
