"""Train, measure and write the zoo: ``NAME.safetensors`` (the card in ``extra["card"]``),
``NAME.json`` (the checkpoint's metadata, card included, for humans), ``NAME.md`` and README.md.

    build(["coref"], "checkpoints")      # -> [card]
    evaluate("checkpoints")              # re-measure every shipped model against its card
"""
from __future__ import annotations

import platform
import time
from pathlib import Path
from typing import Callable

import torch

from ..paths import zoo_dir
from ..tasks import make_task
from ..train import TrainConfig, model_config_for, new_model, train
from ..train.checkpoint import load_checkpoint, save_checkpoint
from .cards import card_markdown, headline, read_cards
from .findings import findings_markdown
from .measure import compare, measure
from .specs import ZooSpec, select

COMMAND = "python -m tfviz.zoo build"


def _model_summary(model) -> dict:
    c = model.config
    return {"arch": c.arch, "pos": c.pos, "n_layers": c.n_layers, "n_heads": c.n_heads,
            "n_kv_heads": c.n_kv_heads, "d_model": c.d_model, "attn_only": c.attn_only, "norm": c.norm,
            "max_len": c.max_len, "vocab_size": c.vocab_size,
            "params": sum(p.numel() for p in model.parameters())}


def build_one(spec: ZooSpec, out: Path, steps: int | None = None,
              log: Callable[[str], None] = print) -> dict:
    """Train ``spec`` (``steps`` overrides its step count, e.g. for a quick check), measure it from
    the saved file, and write the checkpoint with its card, NAME.json and NAME.md."""
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    task = make_task(spec.task)
    tcfg = TrainConfig(**spec.train_fields(steps))
    model = new_model(model_config_for(task, **spec.model), tcfg.seed)
    t0 = time.perf_counter()
    result = train(model, task, tcfg)
    train_s = time.perf_counter() - t0
    if not result.ok:
        raise RuntimeError(f"{spec.name}: training failed: {result.message}")
    path = out / f"{spec.name}.safetensors"
    extra = {"zoo": spec.name, **({"family": spec.family} if spec.family else {}), **spec.extra,
             "final": result.final}
    kwargs = dict(task=task, train_config=tcfg, history=result.history, snapshots=result.snapshots,
                  phase=result.phase)  # an induction run's phase-change records
    save_checkpoint(path, model, extra=extra, **kwargs)
    t1 = time.perf_counter()
    measured = measure(load_checkpoint(path), spec.kind)  # what a user loading the file gets
    measure_s = time.perf_counter() - t1
    card = {"name": spec.name, "kind": spec.kind, "about": spec.about, "family": spec.family,
            "task": task.spec(), "model": _model_summary(model),
            "train": {k: getattr(tcfg, k) for k in ("steps", "batch_size", "lr", "warmup",
                                                    "schedule", "grad_clip", "seed", "num_threads")},
            "build": {"command": f"{COMMAND} --only {spec.name}" + (f" --steps {steps}" if steps else ""),
                      "train_seconds": round(train_s, 1), "measure_seconds": round(measure_s, 1),
                      "torch": torch.__version__, "python": platform.python_version(),
                      "device": "cpu, 1 thread"},
            "training_final": result.final, **spec.extra,
            "sample": measured["sample"], "metrics": measured["metrics"],
            "heads": measured["heads"], "finding": measured["finding"]}
    save_checkpoint(path, model, extra={**extra, "card": card}, **kwargs)
    path.with_suffix(".md").write_text(card_markdown(card))
    log(f"{spec.name}: trained {tcfg.steps} steps in {train_s:.1f} s, measured in {measure_s:.1f} s"
        f" — {headline(card)}")
    return card


def build(names=None, out: str | Path | None = None, steps: int | None = None,
          log: Callable[[str], None] = print) -> list[dict]:
    """Build the named zoo models (all when None) into ``out`` (default ``zoo_dir()``); rewrites
    out/README.md from every card found there. Returns the new cards."""
    out = Path(out) if out is not None else zoo_dir()
    t0 = time.perf_counter()
    cards = [build_one(spec, out, steps, log) for spec in select(names)]
    total = time.perf_counter() - t0
    log(f"built {len(cards)} model(s) in {total:.0f} s")
    write_readme(out, build_seconds=total if not names else None)
    from .causal import write_sections  # the heads switched off: cards' and README's section
    write_sections(out, log)
    return cards


def remeasure(names=None, folder: str | Path | None = None,
              log: Callable[[str], None] = print) -> list[dict]:
    """Measure the named shipped models again (all when None) and rewrite their cards (metrics,
    finding, sample), NAME.json, NAME.md and README.md, without training: the weights, the
    training record and the build record stay as they were (the spec's notes, e.g. "tried", are
    taken as they are now). For a measurement added after a
    model was built (e.g. issue 31's floor of the induction models)."""
    folder = Path(folder) if folder is not None else zoo_dir()
    cards = []
    for spec in select(names):
        path = folder / f"{spec.name}.safetensors"
        if not path.is_file():
            log(f"{spec.name}: missing ({path})")
            continue
        ck = load_checkpoint(path)
        extra = {**dict(ck.meta.get("extra") or {}), **spec.extra}  # the spec's notes (e.g. "tried") as now
        card = {**dict(extra.get("card") or {}), **spec.extra}
        t0 = time.perf_counter()
        measured = measure(ck, card.get("kind") or spec.kind)
        card.update(sample=measured["sample"], metrics=measured["metrics"], heads=measured["heads"],
                    finding=measured["finding"])
        card["build"] = {**card.get("build", {}), "remeasured": time.strftime("%Y-%m-%d"),
                         "measure_seconds": round(time.perf_counter() - t0, 1)}
        save_checkpoint(path, ck.model, tokenizer=ck.tokenizer, task=ck.task,
                        train_config=ck.train_config, history=ck.history,
                        extra={**extra, "card": card}, snapshots=ck.snapshots)
        path.with_suffix(".md").write_text(card_markdown(card))
        log(f"{spec.name}: re-measured in {card['build']['measure_seconds']} s — {headline(card)}")
        cards.append(card)
    write_readme(folder)
    from .causal import write_sections
    write_sections(folder, log)
    return cards


def evaluate(folder: str | Path | None = None, names=None,
             log: Callable[[str], None] = print) -> dict[str, list[dict]]:
    """Re-measure each shipped model (in ``folder``, default ``zoo_dir()``) and compare with its
    card -> name -> comparison rows."""
    folder = Path(folder) if folder is not None else zoo_dir()
    results = {}
    for spec in select(names):
        path = folder / f"{spec.name}.safetensors"
        if not path.is_file():
            log(f"{spec.name}: missing ({path})")
            results[spec.name] = [{"key": "file", "card": None, "now": None, "tolerance": "",
                                   "ok": False}]
            continue
        ck = load_checkpoint(path)
        card = (ck.meta.get("extra") or {}).get("card") or {}
        t0 = time.perf_counter()
        rows = compare(card.get("metrics", {}), measure(ck, card.get("kind"))["metrics"])
        bad = [r for r in rows if not r["ok"]]
        log(f"{spec.name}: {len(rows) - len(bad)}/{len(rows)} metrics reproduce "
            f"({time.perf_counter() - t0:.1f} s) — {headline(card)}")
        for r in bad:
            log(f"    {r['key']}: card {r['card']} now {r['now']} (tolerance {r['tolerance']})")
        results[spec.name] = rows
    return results


def write_readme(folder: str | Path, build_seconds: float | None = None) -> Path:
    """checkpoints/README.md: the table of shipped models and the findings, from the cards."""
    folder = Path(folder)
    cards = read_cards(folder)
    path = folder / "README.md"
    old_total = None
    if build_seconds is None and path.is_file():
        for line in path.read_text().splitlines():
            if line.startswith("Last full build:"):
                old_total = line
    lines = ["# Shipped models (the zoo)", "",
             f"Rebuild all of them with `{COMMAND}` (CPU, one torch thread, fixed seeds; "
             "`--only NAME` for one). Check that every file still reproduces its card with "
             "`python -m tfviz.zoo evaluate`. Each model has `NAME.safetensors` (weights + card in "
             "its metadata), `NAME.json` (that metadata, readable) and `NAME.md`.", ""]
    if build_seconds is not None:
        lines += [f"Last full build: {build_seconds / 60:.1f} min on this machine "
                  f"({platform.processor() or platform.machine()}, 1 torch thread; the sum of "
                  f"per-model training times is {sum(c['build']['train_seconds'] for c in cards.values()):.0f} s).", ""]
    elif old_total:
        lines += [old_total, ""]
    lines += ["| model | task | architecture | steps | train s | measured |", "|---|---|---|---|---|---|"]
    for name, c in cards.items():
        m = c["model"]
        arch = (f"{m['arch']} {m['n_layers']}x{m['n_heads']}"
                f"{'/' + str(m['n_kv_heads']) + 'kv' if m['n_kv_heads'] != m['n_heads'] else ''}, "
                f"d{m['d_model']}, {m['pos']}{', attn-only' if m['attn_only'] else ''}")
        lines.append(f"| [{name}]({name}.md) | {c['task']['name']} | {arch} | {c['train']['steps']} "
                     f"| {c['build']['train_seconds']} | {headline(c)} |")
    lines += ["", findings_markdown(cards)]
    path.write_text("\n".join(lines) + "\n")
    return path
