"""Attribution patching (gradients) against real activation patching, site by site.

    .venv/bin/python scripts/attribution_check.py            # shipped coref + lm models, random GPT-2 / Llama shapes

For each model: clean and corrupted inputs that differ in one token (the coref task's
counterfactual sentences: the deciding word swapped so the referent flips), the metric
logit[clean answer] - logit[corrupted answer] at the answer position, every site of each grid
patched clean -> corrupted for real (``interventions.sweep``) and estimated from one backward pass
(``attribution.attribution_patching``). Prints the Pearson correlation of the changes, the largest
absolute error, the worst sites, and the time of each (one thread; say the load when you quote it).
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from tfviz.analysis import attribution as at  # noqa: E402
from tfviz.analysis import interventions as iv  # noqa: E402
from tfviz.model.hooks import hook_name  # noqa: E402
from tfviz.paths import SHIPPED  # noqa: E402
from tfviz.train.checkpoint import load_checkpoint  # noqa: E402

GRIDS = ("head", "head_pos", "resid_pre", "attn_out", "mlp_out", "head_v", "head_pattern")


def coref_pairs(n: int = 200):
    ck = load_checkpoint(SHIPPED / "coref.safetensors")
    task = ck.build_task()
    clean, corrupt = [], []
    for ex in task.examples("test"):
        cf = task.counterfactual(ex)
        if cf is None or len(ex.tokens) != len(cf[0]):
            continue
        clean.append(list(ex.tokens)[:ex.meta["query_index"] + 1])
        corrupt.append(list(cf[0])[:ex.meta["query_index"] + 1])
        if len(clean) == n:
            break
    # one length: keep the most common one
    lengths = [len(c) for c in clean]
    L = max(set(lengths), key=lengths.count)
    keep = [i for i, c in enumerate(clean) if len(c) == L]
    return ck.model.eval(), torch.tensor([clean[i] for i in keep]), torch.tensor([corrupt[i] for i in keep])


def random_pair(vocab: int, B: int = 4, T: int = 12, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(4, vocab, (B, T), generator=g)
    corrupt = clean.clone()
    corrupt[:, T // 3] = (clean[:, T // 3] + 7) % (vocab - 4) + 4
    return clean, corrupt


def check(name, model, clean, corrupt, grids=GRIDS) -> None:
    with torch.no_grad():
        lc, lx = model(clean)[:, -1], model(corrupt)[:, -1]
    good, bad = lc.argmax(-1), lx.argmax(-1)
    same = good == bad
    bad[same] = lx[same].topk(2).indices[:, 1]
    metric = iv.logit_diff(good, bad)
    print(f"\n{name}: {clean.shape[0]} pairs x {clean.shape[1]} tokens; metric logit[clean answer] - logit[corrupted answer]")
    points = model.hook_points()
    for grid in grids:
        if hook_name(0, iv.GRIDS[grid].hook) not in points:
            continue  # e.g. an attention-only model has no MLP
        t0 = time.perf_counter()
        real = iv.sweep(model, corrupt, grid, metric, mode="patch", reference=clean)
        t1 = time.perf_counter()
        est = at.attribution_patching(model, corrupt, grid, metric, reference=clean)
        t2 = time.perf_counter()
        c = at.compare_estimate(est, real, worst=3)
        worst = "; ".join(f"{lab}: est {e:+.3f} real {a:+.3f}" for lab, e, a in c["worst"])
        span = float(abs(real.change).max())
        print(f"  {grid:<13} n={c['n']:>4}  r={c['correlation']:+.3f}  max|err|={c['max_abs_error']:.3f} "
              f"(largest real change {span:.3f})  real {t1 - t0:6.2f} s  gradient {t2 - t1:5.2f} s\n"
              f"                worst: {worst}")


def main() -> int:
    torch.set_num_threads(1)
    print(f"load: {os.getloadavg()}")
    model, clean, corrupt = coref_pairs()
    check("shipped coref (clean vs counterfactual sentence)", model, clean, corrupt)
    lm = load_checkpoint(SHIPPED / "lm.safetensors").model.eval()
    c, x = random_pair(lm.config.vocab_size, seed=1)
    check("shipped lm (random tokens, one swapped)", lm, c, x, ("head", "resid_pre", "head_pos"))
    try:
        import hf_folders
        from tfviz.interop import from_pretrained
    except ImportError:  # transformers not installed
        return 0
    with tempfile.TemporaryDirectory() as d:
        for kind in ("gpt2", "llama"):
            hf_folders.build(kind, Path(d) / kind)
            m = from_pretrained(Path(d) / kind).model.eval()
            c, x = random_pair(min(150, m.config.vocab_size), seed=2)
            check(f"random {kind}-shaped (perturbed)", m, c, x, ("head", "resid_pre", "head_pos", "mlp_out"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
