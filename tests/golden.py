"""Golden numbers of the shipped checkpoints: what each one computes on a fixed input, stored as
float64 summaries in ``tests/golden/shipped.json`` and checked by ``tests/test_golden.py``.

Per checkpoint ``checkpoints/NAME.safetensors``, on a fixed input (seeded token ids, one row
right-padded so the padding mask is exercised where it applies):
    every hook point (``tfviz.record(names=None)``), the recorded logits (explicit attention path),
    the logits of a plain forward (fast path), ``tfviz.positional_tables`` (max_len positions),
    greedy ``generate`` with the KV cache, and ``generate_with_attention`` (ids, probabilities).
Per tensor: its shape, sum / sum of |x| / sum of squares in float64 over the finite entries, how
many entries are -inf / inf / nan, and a few fixed elements. Compared with a relative tolerance of
1e-6 of each quantity's scale (float32 arithmetic in another order, or another thread count, moves
numbers by ~1e-7; a changed computation moves them by far more).

Regenerate after retraining a shipped model (say why in the commit message):

    .venv/bin/python -m tests.golden --update induction-2L induction-1L
    .venv/bin/python -m tests.golden --update            # every checkpoint in checkpoints/
    .venv/bin/python -m tests.golden --check             # compare without pytest
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINTS = ROOT / "checkpoints"
GOLDEN = Path(__file__).resolve().parent / "golden" / "shipped.json"
RTOL = 1e-6
N_ELEMENTS = 9  # fixed elements kept per tensor (evenly spaced over the flattened tensor)


def shipped() -> dict[str, Path]:
    """name -> path of every shipped checkpoint (the repository's checkpoints/ folder)."""
    return {p.stem: p for p in sorted(CHECKPOINTS.glob("*.safetensors"))}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------------------ the fixed input
def _ids(cfg, batch: int, length: int, seed: int) -> torch.Tensor:
    """[batch, length] ids in 1..vocab-1 (never the pad id 0), the last row right-padded by 3."""
    g = torch.Generator().manual_seed(seed)
    low = 1 if cfg.pad_id == 0 else 0
    t = torch.randint(low, cfg.vocab_size, (batch, length), generator=g)
    if cfg.pad_id is not None:
        t[t == cfg.pad_id] = low if cfg.pad_id != low else low + 1
        t[-1, -3:] = cfg.pad_id
    return t


def inputs(cfg) -> tuple[torch.Tensor, ...]:
    if cfg.arch == "encoder-decoder":
        return _ids(cfg, 2, min(20, cfg.max_len), 1), _ids(cfg, 2, min(16, cfg.max_len), 2)[:, :-3]
    return (_ids(cfg, 2, min(24, cfg.max_len), 0),)


# ------------------------------------------------------------------------------ summaries
def summary(t) -> dict:
    a = np.asarray(t.detach().cpu().double().numpy() if isinstance(t, torch.Tensor) else t)
    out: dict = {"shape": list(a.shape)}
    if a.dtype.kind in "iub":
        flat = a.reshape(-1).astype(np.int64)
        out["int"] = True
        out["sum"] = int(flat.sum())
        out["elements"] = [int(flat[i]) for i in _positions(flat.size)]
        return out
    flat = a.reshape(-1).astype(np.float64)
    finite = np.isfinite(flat)
    f = flat[finite]
    out.update(sum=float(f.sum()), sum_abs=float(np.abs(f).sum()), sum_sq=float((f * f).sum()),
               n_finite=int(finite.sum()))
    odd = {k: int(v) for k, v in (("-inf", np.isneginf(flat).sum()), ("inf", np.isposinf(flat).sum()),
                                   ("nan", np.isnan(flat).sum())) if v}
    if odd:
        out["nonfinite"] = odd
    out["elements"] = [_num(flat[i]) for i in _positions(flat.size)]
    return out


def _positions(n: int) -> list[int]:
    return sorted({int(round(i)) for i in np.linspace(0, n - 1, N_ELEMENTS)}) if n else []


def _num(x: float):
    return float(x) if math.isfinite(x) else ("nan" if math.isnan(x) else ("inf" if x > 0 else "-inf"))


@torch.no_grad()
def compute(path: Path) -> dict:
    """Every golden quantity of one checkpoint: name -> summary."""
    import tfviz
    from tfviz.generation import generate_with_attention

    ck = tfviz.load_checkpoint(path)
    model, cfg = ck.model.eval(), ck.config
    x = inputs(cfg)
    rec = tfviz.record(model, *x)
    out = {f"record.{name}": summary(t) for name, t in rec.items()}
    out["record.logits"] = summary(rec.output)
    out["forward.logits"] = summary(model(*x))
    out.update({f"positional_tables.{k}": summary(v) for k, v in tfviz.positional_tables(model).items()})
    if cfg.arch != "encoder":
        bos = ck.tokenizer.bos_id if ck.tokenizer is not None else 2
        if cfg.arch == "encoder-decoder":
            src, prompt = x[0][:1], torch.tensor([[bos]])
            greedy = model.generate(prompt, 6, src=src)
            gen = generate_with_attention(model, prompt[0].tolist(), 6, src=src[0].tolist())
        else:
            prompt = x[0][:1, :8]
            greedy = model.generate(prompt, 6)
            gen = generate_with_attention(model, prompt[0].tolist(), 6, temperature=0.8, top_k=5, seed=3)
        out["generate.greedy"] = summary(greedy)
        out["generate_with_attention.ids"] = summary(torch.tensor(gen.ids))
        out["generate_with_attention.probs"] = summary(torch.tensor(gen.probs, dtype=torch.float64))
    return out


# ------------------------------------------------------------------------------ comparing
def _close(a: float, b: float, scale: float, rtol: float) -> bool:
    return abs(a - b) <= rtol * scale + 1e-12


def compare(want: dict, got: dict, rtol: float = RTOL) -> list[str]:
    """Human-readable differences between two ``compute`` results (empty = identical numbers)."""
    problems = []
    for name in sorted(set(want) | set(got)):
        if name not in got:
            problems.append(f"{name}: no longer computed")
            continue
        if name not in want:
            problems.append(f"{name}: new (not in the golden file)")
            continue
        w, g = want[name], got[name]
        if w["shape"] != g["shape"] or w.get("int") != g.get("int"):
            problems.append(f"{name}: shape {g['shape']} (golden {w['shape']})")
            continue
        if w.get("int"):
            if (w["sum"], w["elements"]) != (g["sum"], g["elements"]):
                problems.append(f"{name}: integers differ (sum {g['sum']} vs golden {w['sum']})")
            continue
        if w.get("nonfinite") != g.get("nonfinite") or w["n_finite"] != g["n_finite"]:
            problems.append(f"{name}: non-finite entries {g.get('nonfinite')} (golden {w.get('nonfinite')})")
            continue
        rms = math.sqrt(w["sum_sq"] / max(w["n_finite"], 1))
        checks = [("sum", w["sum"], g["sum"], w["sum_abs"]), ("sum_abs", w["sum_abs"], g["sum_abs"], w["sum_abs"]),
                  ("sum_sq", w["sum_sq"], g["sum_sq"], w["sum_sq"])]
        for i, (a, b) in enumerate(zip(w["elements"], g["elements"])):
            if isinstance(a, str) or isinstance(b, str):
                if a != b:
                    problems.append(f"{name}: element {i} is {b} (golden {a})")
                continue
            checks.append((f"element {i}", a, b, max(abs(a), rms)))
        for what, a, b, scale in checks:
            if not _close(a, b, scale, rtol):
                problems.append(f"{name}: {what} = {b!r}, golden {a!r} (difference {abs(a - b):.3g}, "
                                f"allowed {rtol * scale:.3g})")
    return problems


def load() -> dict:
    return json.loads(GOLDEN.read_text()) if GOLDEN.is_file() else {}


def update(names: list[str] | None = None) -> list[str]:
    """Recompute and store the golden entries of ``names`` (all shipped checkpoints when None)."""
    found = shipped()
    unknown = sorted(set(names or []) - set(found))
    if unknown:
        raise SystemExit(f"no checkpoint {unknown} in {CHECKPOINTS}; have {', '.join(found)}")
    golden = load()
    for name in names or list(found):
        golden[name] = {"checkpoint_sha256": sha256(found[name]), "tensors": compute(found[name])}
    for gone in set(golden) - set(found):
        del golden[gone]
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps(dict(sorted(golden.items())), indent=0, sort_keys=True) + "\n")
    return names or list(found)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.golden", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--update", nargs="*", metavar="NAME", help="recompute these (default: all)")
    g.add_argument("--check", nargs="*", metavar="NAME", help="compare these (default: all)")
    a = p.parse_args(argv)
    if a.update is not None:
        print("updated:", ", ".join(update(a.update or None)), f"-> {GOLDEN.relative_to(ROOT)}")
        return 0
    golden, bad = load(), 0
    for name in a.check or list(shipped()):
        problems = compare(golden[name]["tensors"], compute(shipped()[name])) if name in golden else ["no golden entry"]
        print(f"{name}: {'identical' if not problems else f'{len(problems)} difference(s)'}")
        for line in problems[:20]:
            print("   ", line)
        bad += bool(problems)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
