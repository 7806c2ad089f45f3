"""Zoo cards: what ``python -m tfviz.zoo build`` measured about each model, kept in the checkpoint's
metadata (``extra["card"]``), read back from the header alone, and written out as text
(``headline``, ``card_markdown``). UI-free; no training or measuring here.
"""
from __future__ import annotations

import math
from pathlib import Path

from ..paths import zoo_dir
from ..storage import CheckpointError
from ..train.checkpoint import read_metadata
from .published import phase_headline, sinks_headline
from .specs import SPECS

POSITIONS = {"query": "final repeated pronoun", "pronoun": "in-sentence pronoun"}


def read_card(path: str | Path) -> dict | None:
    """The zoo card stored in a checkpoint's metadata (header only, no tensors), or None."""
    try:
        extra = read_metadata(path).get("extra")
    except CheckpointError:
        return None
    card = extra.get("card") if isinstance(extra, dict) else None
    return card if isinstance(card, dict) else None


def read_cards(folder: str | Path | None = None) -> dict[str, dict]:
    """name -> card for every zoo model present in ``folder`` (default ``zoo_dir()``), in zoo order."""
    folder = Path(folder) if folder is not None else zoo_dir()
    cards = {}
    for spec in SPECS:
        p = folder / f"{spec.name}.safetensors"
        card = read_card(p) if p.is_file() else None
        if card is not None:
            cards[spec.name] = card
    return cards


# ------------------------------------------------------------------------------ text
def _f(x, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def headline(card: dict) -> str:
    """One line of the card's key numbers."""
    m, f, kind = card.get("metrics", {}), card.get("finding", {}), card.get("kind")
    if kind == "coref":
        a = f["antecedent_head"]
        s1 = f["mission"][0]
        return (f"test accuracy {_pct(m['accuracy'])}; antecedent head L{a['layer']}H{a['head']} "
                f"{_pct(a['antecedent_max'])}; mission s1: L{s1['law']['layer']}H{s1['law']['head']}"
                f"->law {_f(s1['law']['weight'], 2)}, L{s1['application']['layer']}"
                f"H{s1['application']['head']}->application {_f(s1['application']['weight'], 2)}")
    if kind == "agreement":
        ph = f["pattern_heads"]
        if not ph:
            return f"test accuracy {_pct(m['accuracy'])}; no head's pattern picks the referent"
        name = ph[0] if len(ph) == 1 else " + ".join(ph)
        return (f"test accuracy {_pct(m['accuracy'])} (pairwise {_pct(m['pairwise_accuracy'])}); "
                f"pattern head {name}: off -> pairwise "
                f"{_pct(m.get(f'off.{name}.heldout.pairwise_accuracy'))}, patched from the other "
                f"pronoun -> {_pct(m.get(f'patch.{name}.heldout.flips'))} of answers flip")
    if kind == "induction":
        f = card["finding"]
        worst = max(r["loss_repeat"] for r in f["heldout"])
        return (f"repeat loss {_f(m['loss_repeat'])} (test), {_f(m['beyond.loss_repeat'])} from "
                f"position {f['train_length']} on (held out; worst condition {_f(worst)}; chance "
                f"{_f(f['chance'], 2)}); max induction score {_f(m['max_induction'], 2)}")
    if kind == "positional":
        L = f["train_length"]
        return ", ".join(f"loss@{n} {_f(m.get(f'loss@{n}'))}" for n in (L, 2 * L, 4 * L))
    if kind == "translate":
        b = f["best_head"]
        return (f"exact-match {_pct(m['accuracy'])}; cross-attn L{b['layer']}H{b['head']} aligned "
                f"{_pct(b['share'])} (reordered {_pct(m['align_reordered.best'])})")
    if kind == "mlm":
        return (f"masked-token accuracy {_pct(m['accuracy'])} (always the most frequent token: "
                f"{_pct(m.get('accuracy_majority_baseline'))}), loss {_f(m['loss'])}")
    if kind == "norm":
        first, last = f["layer_grad_norms"][0], f["layer_grad_norms"][-1]
        return (f"{f['norm']}-norm: {int(m['spikes'])} loss spike(s) (largest rise "
                f"{_f(m['largest_rise'], 2)} nats), fresh-text loss {_f(m['fresh_loss'])}, "
                f"gradient norm over the first {f['early_steps']} steps: layer 0 "
                f"{_f(first['norm'], 3)}, layer {last['layer']} {_f(last['norm'], 3)}")
    if kind == "lm":
        return (f"val loss {_f(m['val_loss'])} (ppl {_f(m['val_ppl'], 2)}), "
                f"KV cache {m['kv_bytes_per_token']:.0f} B/token")
    if kind == "sinks":
        return sinks_headline(card)
    if kind == "phase":
        return phase_headline(card)
    return ""


def _heads_lines(card: dict) -> list[str]:
    lines = []
    for h in card.get("heads", []):
        scores = ", ".join(f"{k} {_f(v, 2)}" for k, v in h.items()
                           if k not in ("layer", "head", "label") and v is not None)
        lines.append(f"- L{h['layer']}H{h['head']}: **{h['label']}** ({scores})")
    return lines


def card_markdown(card: dict) -> str:
    m, t, b = card["model"], card["train"], card["build"]
    lines = [f"# {card['name']}", "", card["about"], "",
             f"- task: `{card['task']}`",
             f"- model: {m['arch']}, {m['n_layers']} layers x {m['n_heads']} heads "
             f"({m['n_kv_heads']} kv), d_model {m['d_model']}, pos {m['pos']}"
             f"{', ' + m['norm'] + '-norm' if m.get('norm', 'pre') != 'pre' else ''}"
             f"{', attention-only' if m['attn_only'] else ''}, {m['params']:,} parameters",
             f"- training: {t['steps']} steps, batch {t['batch_size']}, lr {t['lr']:g}, warmup "
             f"{t['warmup']}{', no gradient clipping' if 'grad_clip' in t and not t['grad_clip'] else ''}, seed "
             f"{t['seed']}, {b['device']}: {b['train_seconds']} s (torch {b['torch']})",
             f"- rebuild: `{b['command']}`",
             f"- measured on: {card['sample']}",
             f"- result: {headline(card)}", ""]
    if card["kind"] == "positional":
        f = card["finding"]
        lines += ["| length | " + " | ".join(map(str, f["lengths"])) + " |",
                  "|---|" + "---|" * len(f["lengths"]),
                  "| loss | " + " | ".join(_f(x) for x in f["loss"]) + " |", ""]
        if f["note"]:
            lines += [f"Note: {f['note']}.", ""]
    if card["kind"] == "induction":
        f = card["finding"]
        lines += [f"Held out: fresh sequences (seed {f['heldout_seed']}) of {f['max_len'] - 1} "
                  f"tokens after [BOS]; the longest training sequence has {f['train_length']} "
                  "tokens. Loss and accuracy on the repeated tokens, best head's induction score:",
                  "", "| condition | loss | accuracy | induction (head) |", "|---|---|---|---|"]
        lines += [f"| {r['name']} | {_f(r['loss_repeat'])} | {_pct(r['accuracy_repeat'])} | "
                  f"{_f(r['max_induction'], 2)} ({r['best_head']}) |" for r in f["heldout"]]
        lines.append("")
        if f.get("floor"):
            lines += ["Repeats inside the repeated part: fresh [BOS] r r with r drawn with replacement; "
                      "the floor is a perfect copier that splits its bet among the tokens that followed "
                      "each token in the first half (its bigram counts):", "",
                      "| r | loss on the repeat | floor | loss / floor where a token had several continuations |",
                      "|---|---|---|---|"]
            lines += [f"| {r['half']} | {_f(r['loss'])} | {_f(r['floor'])} | {_f(r['ambiguous_loss'])} / "
                      f"{_f(r['ambiguous_floor'])} |" for r in f["floor"]]
            lines.append("")
    if card["kind"] == "norm":
        f = card["finding"]
        lines += [f"Gradient norm of each block (attention + MLP, before clipping), mean over the "
                  f"logged steps up to {f['early_steps']}:", "",
                  "| layer | " + " | ".join(str(r["layer"]) for r in f["layer_grad_norms"]) + " |",
                  "|---|" + "---|" * len(f["layer_grad_norms"]),
                  "| norm | " + " | ".join(_f(r["norm"], 4) for r in f["layer_grad_norms"]) + " |", ""]
        lines += [f"Loss spikes (the training loss more than 0.5 nats above its lowest so far): "
                  + ("; ".join(f"step {r['step']}: {_f(r['loss'])} after {_f(r['best_before'])}"
                               for r in f["spikes"]) or "none"), ""]
    if card["kind"] == "coref":
        f = card["finding"]
        for r in f["mission"]:
            lines.append(f"- mission sentence {r['sentence']}, {POSITIONS[r['position']]}: "
                         f"L{r['law']['layer']}H{r['law']['head']} -> law {_f(r['law']['weight'], 3)}, "
                         f"L{r['application']['layer']}H{r['application']['head']} -> application "
                         f"{_f(r['application']['weight'], 3)} ({'holds' if r['holds'] else 'does not hold'})")
        lines += ["", f"_{f['note']}_", ""]
    if card["kind"] in ("sinks", "phase"):  # issue 33: the sentence, then the paper's numbers
        f = card["finding"]
        lines += [f["story"]["sentence"], ""]
        if card["kind"] == "sinks":
            lines += ["| condition | " + " | ".join(k for k in f["segments"][0] if k not in ("condition", "label"))
                      + " |", "|---|---|---|---|"]
            lines += [f"| {r['label']} | " + " | ".join(_f(v) for k, v in r.items() if k not in ("condition", "label"))
                      + " |" for r in f["segments"]]
            lines.append("")
        lines += [f"The paper: {f['paper']}", ""]
    if card["kind"] == "agreement":
        f = card["finding"]
        for r in f["mission"]:
            a = r["answers"]
            offs = "; ".join(f"{x['heads off']} off: {x['answer']} ({_f(x['P(answer)'], 3)})" for x in a[1:])
            lines.append(f"- “{r['text']}” -> {a[0]['answer']} ({_f(a[0]['P(answer)'], 3)})"
                         + (f"; {offs}" if offs else ""))
        lines += ["", f"Checks: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in f["checks"].items()),
                  "", f"_{f['note']}_", ""]
    if card.get("tried"):
        lines += ["Configurations tried (exploration runs, not shipped):"] + \
            [f"- {x}" for x in card["tried"]] + [""]
    heads = _heads_lines(card)
    if heads:
        lines += ["## Heads", ""] + heads + [""]
    return "\n".join(lines)


