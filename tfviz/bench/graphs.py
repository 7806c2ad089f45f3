"""python -m tfviz.bench graphs — the sliding window against flash attention on a GPU, two ways.

At B=1 the window's kernels are tiny (n·w scores), so its eager wall time is the host's: Python,
torch.compile's guards and a handful of launches, about 1.4 ms for forward + backward on an H100
whatever n is (docs/bench/attention_cuda.txt: flat from n = 8,192 to 131,072). Here each variant's
forward + backward is measured

  eager     as ``tfviz.bench attention`` does (one call, synchronised), and
  graphed   replayed from CUDA graphs (``torch.cuda.make_graphed_callables``: the forward and the
            backward each captured once, after warm-up), i.e. the same kernels without the host's
            per-call cost: what a training step captured whole (torch.compile's
            mode="reduce-overhead") pays for this layer.

Both variants are the code the model runs: full = ``F.scaled_dot_product_attention(is_causal=True)``
(flash), window = ``tfviz.model.banded.banded_attention`` (compiled FlexAttention on the band).
Outputs are checked equal between eager and graphed, and the window against a masked SDPA at
n = 2,048. Targets (issue 46), checked both ways: window >= 20x flash at n = 65,536, growth <= 2.3x
per doubling from 8,192. CUDA only.
"""
from __future__ import annotations

import argparse
import statistics
import time
from datetime import datetime, timezone

import torch
import torch.nn.functional as F

from ..device import device_name
from ..model.banded import banded_attention
from .measure import sync


def _full(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _window(window: int):
    def fn(q, k, v):
        return banded_attention(q, k, v, window, True)
    return fn


def _time(fn, q, k, v, grad, reps: int) -> float:
    ts = []
    for _ in range(reps):
        sync("cuda")
        t0 = time.perf_counter()
        fn(q, k, v).backward(grad)
        sync("cuda")
        ts.append(time.perf_counter() - t0)
        q.grad = k.grad = v.grad = None
    return statistics.median(ts)


def measure(ns, window=128, heads=4, d_head=64, dtype=torch.bfloat16, reps=10, log=print) -> list[dict]:
    rows = []
    for n in ns:
        g = torch.Generator(device="cuda").manual_seed(n)
        q, k, v, grad = (torch.randn(1, heads, n, d_head, device="cuda", dtype=dtype, generator=g)
                         for _ in range(4))
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        for name, fn in (("full-sdpa", _full), ("window-banded", _window(window))):
            for _ in range(3):  # warm-up: compilation, kernel choice
                fn(q, k, v).backward(grad)
                q.grad = k.grad = v.grad = None
            eager = _time(fn, q, k, v, grad, reps)
            row = dict(n=n, variant=name, eager_s=eager, graphed_s=None, error="")
            try:
                graphed = torch.cuda.make_graphed_callables(fn, (q, k, v))
                with torch.no_grad():
                    want = fn(q, k, v).float()
                got = graphed(q, k, v)
                torch.testing.assert_close(got.detach().float(), want, atol=2e-2, rtol=2e-2)
                got.backward(grad)
                q.grad = k.grad = v.grad = None
                row["graphed_s"] = _time(graphed, q, k, v, grad, reps)
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            rows.append(row)
            gs = "n/a" if row["graphed_s"] is None else f"{row['graphed_s'] * 1e3:8.3f} ms"
            log(f"n={n:>6}  {name:<14} fwd+bwd  eager {eager * 1e3:8.3f} ms   graphed {gs}"
                + (f"   ({row['error']})" if row["error"] else ""))
        del q, k, v, grad
        torch.cuda.empty_cache()
    return rows


def check_window(n: int = 2048, window: int = 128, heads: int = 4, d_head: int = 64) -> float:
    """Max |window - masked SDPA| at ``n`` (float32): the band computes the same attention."""
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, heads, n, d_head, device="cuda", generator=g) for _ in range(3))
    i = torch.arange(n, device="cuda")
    mask = (i[:, None] - i[None, :] >= 0) & (i[:, None] - i[None, :] <= window)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return float((banded_attention(q, k, v, window, True) - want).abs().max())


def targets(rows: list[dict], at: int = 65536, key: str = "graphed_s") -> list[tuple[str, float | None, str, float]]:
    t = {(r["n"], r["variant"]): r[key] for r in rows}
    out = []
    full, win = t.get((at, "full-sdpa")), t.get((at, "window-banded"))
    out.append((f"n={at}: full-sdpa / window-banded", None if not (full and win) else full / win, ">=", 20.0))
    ns = sorted({r["n"] for r in rows})
    for a, b in zip(ns, ns[1:]):
        ta, tb = t.get((a, "window-banded")), t.get((b, "window-banded"))
        out.append((f"window-banded {a}->{b}", None if not (ta and tb) else tb / ta, "<=", 2.3))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tfviz.bench graphs", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ns", default="8192,16384,32768,65536")
    p.add_argument("--window", type=int, default=128)
    p.add_argument("--reps", type=int, default=10)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("python -m tfviz.bench graphs measures CUDA graphs: no CUDA GPU here")
        return 2
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    print(f"{device_name(torch.device('cuda'))}; torch {torch.__version__}; {when}")
    print(f"window {args.window}, causal, B=1, 4 heads, d_head 64, bfloat16, fwd+bwd, median of {args.reps}")
    print(f"check: window vs masked SDPA at n=2048 (float32): max |diff| {check_window(window=args.window):.2e}")
    rows = measure([int(n) for n in args.ns.split(",")], args.window, reps=args.reps)
    ok = True
    for key, what in (("eager_s", "eager (one call, synchronised: the attention bench's measure)"),
                      ("graphed_s", "CUDA graphs (the device's work without the host's per-call cost)")):
        print(f"\ntargets, {what}:")
        for label, value, op, threshold in targets(rows, key=key):
            passed = value is not None and (value >= threshold if op == ">=" else value <= threshold)
            ok &= passed
            shown = "n/a" if value is None else f"{value:7.2f}x"
            print(f"  {'PASS' if passed else 'FAIL'}  {label:<36} {shown}  (target {op} {threshold:g}x)")
    print("\nall targets met" if ok else "\nsome targets missed")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
