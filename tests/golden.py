"""Golden numbers of the shipped checkpoints: what each one computes on a fixed input, stored as
float64 summaries in ``tests/golden/shipped.json`` and checked by ``tests/test_golden.py``.

Per checkpoint ``checkpoints/NAME.safetensors``, on a fixed input (seeded token ids, one row
right-padded so the padding mask is exercised where it applies):
    every hook point (``tfviz.record(names=None)``), the recorded logits (explicit attention path),
    the logits of a plain forward (fast path), ``tfviz.positional_tables`` (max_len positions),
    greedy ``generate`` with the KV cache, and ``generate_with_attention`` (ids, probabilities).
Per tensor: its shape, sum / sum of |x| / sum of squares in float64 over the finite entries, how
many entries are -inf / inf / nan, a few fixed elements, and ``f32_error``: the float32 rounding
error of that very tensor (below).

How close is close enough (the tolerance, derived from float32 accumulation)
-------------------------------------------------------------------------------
Integers (token ids), shapes and the count of -inf / inf / nan must be equal. A float tensor T is
computed in float32. Every reduction in it (a matmul's dot products of length K, a softmax's or a
norm's sum, ...) is rounded in an order that depends on the CPU's vector width, the BLAS kernel and
the thread count: for K terms x_i, |fl(sum) - sum| <= gamma_K * sum |x_i| with gamma_K ~ K * u in
the worst case and ~ sqrt(K) * u typically, u = 2^-24 = 5.96e-8 (float32's unit roundoff). These
errors then pass through every later layer, and a softmax turns an absolute error d in its scores
into a relative error d in its probabilities. A bound written from shapes alone (u * sqrt(K) * the
tensor's scale) therefore misses the amplification: measured here, the float32 error of attention
patterns in the 6-layer models is 2.4e-5 of their RMS (about 400 u), of hook_mlp_out 2.6e-6.

So each tensor's float32 error is *measured* when its golden numbers are recorded: the same
checkpoint, converted to float64 (``model.double()``), is run on the same input, and
e = T_float32 - T_float64 over the finite entries is kept as ``f32_error`` = {max |e|, sum |e|,
sqrt(sum e^2)}. The float64 result is the same on every machine to ~1e-15. Another machine's
float32 result is T' = T_float64 + e', its own rounding error e' a different sample of the same
process (another summation order, another vector width, another libm), of the same size, so

    |T' - T| = |e' - e| <= |e'| + |e| <= (1 + SAFETY) * |e|      with SAFETY = 3

(e' up to 3 times the recorded e: the recorded e is one sample. Measured against the golden
file, recorded on another CPU, on an AVX-512 machine: torch's kernels AVX-512 / AVX2
(ATEN_CPU_CAPABILITY) x MKL's AVX-512 / AVX2 / SSE4.2 paths (MKL_ENABLE_INSTRUCTIONS) x 1, 2, 4
threads moved no number by more than 0.32 of its bound below; torch without vector kernels
(ATEN_CPU_CAPABILITY=default, what a CPU without AVX2 runs): 0.49 with MKL's AVX2 / AVX-512 paths,
0.70 with its SSE4.2 path (pos-rope's blocks.1.attn.hook_z, about 2.8 |e|). Per summary this
gives, with E = 1 + SAFETY:

    element x_i     |x'_i - x_i|           <= E * max|e|                    + 2u |x_i|
    sum, sum |x|    |sum x' - sum x|       <= E * sum|e|                    + 2u sum|x|
    sum x^2         |sum x'^2 - sum x^2|   <= E * l2(e) * (2 l2(x) + E * l2(e)) + 2u sum x^2

(the last by Cauchy-Schwarz on sum (x' - x)(x' + x)). The 2u terms are one float32 rounding each
way, so a tensor that float32 computes exactly (an embedding lookup: e = 0) may differ by no more
than that. The bound is per tensor and scales with it: an attention pattern 6 layers deep gets a
wider band than the first layer's embedding, both only as wide as float32 made them. A real
change is far outside it: ``test_golden.py`` perturbs one weight by 1e-4, changes the norms' eps
and the softmax's scale, and sees the comparison fail. (What summaries cannot see: a change to
one column of one tensor, e.g. one MLP unit's weight, can stay inside the band of its sums.)

``generate_with_attention.probs`` holds six numbers, too few to measure their error from: each
is a softmax output p_i of logits z, and |dp_i| <= p_i (|dz_i| + sum_j p_j |dz_j|) <= 2 p_i max|dz|,
so its recorded error is at least 2 max(p) times the float32 error of the same model's
``record.logits``.

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
U = 2.0 ** -24  # float32's unit roundoff
SAFETY = 3.0  # another machine's float32 error: up to SAFETY times the one recorded (see above)
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
def _array(t) -> np.ndarray:  # float64 (token ids too: they are summarised as numbers)
    return np.asarray(t.detach().cpu().double().numpy() if isinstance(t, torch.Tensor) else t)


def summary(t, exact=None) -> dict:
    """The summary of ``t``; with ``exact`` (the same tensor computed in float64), its float32
    error too (``f32_error``)."""
    a = _array(t)
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
    if exact is not None:
        out["f32_error"] = f32_error(flat, _array(exact).reshape(-1))
    return out


def f32_error(flat: np.ndarray, exact: np.ndarray) -> dict:
    """e = float32 result - float64 result over the finite entries: {max |e|, sum |e|, l2(e)}."""
    finite = np.isfinite(flat)
    if exact.shape != flat.shape or not np.array_equal(finite, np.isfinite(exact)):
        raise ValueError("the float64 run gives another shape or other non-finite entries")
    e = flat[finite] - exact[finite]
    return {"max": float(np.abs(e).max(initial=0.0)), "l1": float(np.abs(e).sum()),
            "l2": float(np.sqrt((e * e).sum()))}


def _positions(n: int) -> list[int]:
    return sorted({int(round(i)) for i in np.linspace(0, n - 1, N_ELEMENTS)}) if n else []


def _num(x: float):
    return float(x) if math.isfinite(x) else ("nan" if math.isnan(x) else ("inf" if x > 0 else "-inf"))


@torch.no_grad()
def quantities(ck) -> dict[str, torch.Tensor]:
    """Every golden quantity of one loaded checkpoint, in the model's dtype: name -> tensor."""
    import tfviz
    from tfviz.generation import generate_with_attention

    model, cfg = ck.model.eval(), ck.config
    x = inputs(cfg)
    rec = tfviz.record(model, *x)
    out = {f"record.{name}": t for name, t in rec.items()}
    out["record.logits"] = rec.output
    out["forward.logits"] = model(*x)
    out.update({f"positional_tables.{k}": v for k, v in tfviz.positional_tables(model).items()})
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
        out["generate.greedy"] = greedy
        out["generate_with_attention.ids"] = torch.tensor(gen.ids)
        out["generate_with_attention.probs"] = torch.tensor(gen.probs, dtype=torch.float64)
    return out


def compute(source, errors: bool = False) -> dict:
    """Every golden quantity of one checkpoint (a path, or a loaded ``Checkpoint``, e.g. one a
    test changed): name -> summary. ``errors``: also run it in float64 (loaded again from the
    path) and keep each float tensor's float32 error (what ``--update`` stores; a check needs only
    the float32 run)."""
    import tfviz

    ck = tfviz.load_checkpoint(source) if isinstance(source, (str, Path)) else source
    got = quantities(ck)
    if not errors:
        return {name: summary(t) for name, t in got.items()}
    if not isinstance(source, (str, Path)):
        raise TypeError("errors=True loads the checkpoint again in float64: pass its path")
    wide = tfviz.load_checkpoint(source)
    wide.model.double()
    exact = quantities(wide)
    for name, t in got.items():  # token ids (a greedy argmax, a sample) must not depend on it
        if not t.dtype.is_floating_point and not torch.equal(t, exact[name]):
            raise ValueError(f"{source}: {name} differs in float64 (a near tie): its float32 error "
                             "cannot be measured on this input")
    out = {name: summary(t, exact[name]) for name, t in got.items()}
    probs = out.get("generate_with_attention.probs")
    if probs:  # six numbers are too few to measure: bound them by their logits' error (softmax)
        bound = 2 * max(probs["elements"]) * out["record.logits"]["f32_error"]["max"]
        n, e = probs["n_finite"], probs["f32_error"]
        e.update(max=max(e["max"], bound), l1=max(e["l1"], n * bound), l2=max(e["l2"], math.sqrt(n) * bound))
    return out


# ------------------------------------------------------------------------------ comparing
def allowed(w: dict) -> dict[str, float]:
    """How far each float summary of the golden entry ``w`` may move: what float32 rounding in
    another order can do to it (the module docstring's bounds)."""
    e = w.get("f32_error")
    if e is None:
        raise ValueError("no f32_error recorded: run python -m tests.golden --update NAME")
    E = 1.0 + SAFETY
    l2x = math.sqrt(w["sum_sq"])
    return {"sum": E * e["l1"] + 2 * U * w["sum_abs"], "sum_abs": E * e["l1"] + 2 * U * w["sum_abs"],
            "sum_sq": E * e["l2"] * (2 * l2x + E * e["l2"]) + 2 * U * w["sum_sq"], "element": E * e["max"]}


def differences(want: dict, got: dict) -> tuple[list[str], float]:
    """Human-readable differences between a golden entry and a ``compute`` result (empty = the
    same numbers, up to float32 rounding), and the largest difference / allowed over every float
    check (<= 1 when nothing differs; how far outside the band a change lands)."""
    problems, worst = [], 0.0
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
        band = allowed(w)
        checks = [(k, w[k], g[k], band[k]) for k in ("sum", "sum_abs", "sum_sq")]
        for i, (a, b) in enumerate(zip(w["elements"], g["elements"])):
            if isinstance(a, str) or isinstance(b, str):
                if a != b:
                    problems.append(f"{name}: element {i} is {b} (golden {a})")
                continue
            checks.append((f"element {i}", a, b, band["element"] + 2 * U * abs(a)))
        for what, a, b, tol in checks:
            d = abs(a - b)
            worst = max(worst, d / tol if tol > 0 else (math.inf if d else 0.0))
            if d > tol:
                problems.append(f"{name}: {what} = {b!r}, golden {a!r} (difference {d:.3g}, "
                                f"allowed {tol:.3g}: float32 rounding)")
    return problems, worst


def compare(want: dict, got: dict) -> list[str]:
    """Human-readable differences between two ``compute`` results (empty = the same numbers, up
    to float32 rounding in another order)."""
    return differences(want, got)[0]


def load() -> dict:
    return json.loads(GOLDEN.read_text()) if GOLDEN.is_file() else {}


def update(names: list[str] | None = None) -> list[str]:
    """Recompute and store the golden entries of ``names`` (all shipped checkpoints when None),
    each tensor with its float32 error (a float64 run of the same checkpoint)."""
    found = shipped()
    unknown = sorted(set(names or []) - set(found))
    if unknown:
        raise SystemExit(f"no checkpoint {unknown} in {CHECKPOINTS}; have {', '.join(found)}")
    golden = load()
    for name in names or list(found):
        golden[name] = {"checkpoint_sha256": sha256(found[name]), "tensors": compute(found[name], errors=True)}
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
    p.add_argument("--threads", type=int, default=None, help="torch threads for the check")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.update is not None:
        print("updated:", ", ".join(update(a.update or None)), f"-> {GOLDEN.relative_to(ROOT)}")
        return 0
    golden, bad = load(), 0
    for name in a.check or list(shipped()):
        if name in golden:
            problems, worst = differences(golden[name]["tensors"], compute(shipped()[name]))
        else:
            problems, worst = ["no golden entry"], math.inf
        print(f"{name}: {'same numbers' if not problems else f'{len(problems)} difference(s)'} "
              f"(largest difference / allowed: {worst:.3g}; {torch.get_num_threads()} threads)")
        for line in problems[:20]:
            print("   ", line)
        bad += bool(problems)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
