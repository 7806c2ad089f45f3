"""python -m tfviz.bench model — tfviz's transformer against a minimal reference, same process.

Shape: nanoGPT's shakespeare-char model (decoder, 6 layers, 6 heads, d_model 384, block 256,
batch 12, vocab 65, learned positions, GELU, pre-norm, tied embeddings, dropout 0).
Two measurements, each as a ratio with the variants interleaved rep by rep (so drift in machine
load hits both) and the median taken:
  1. train step (forward + cross-entropy + backward): tfviz fast path / reference (plain PyTorch +
     SDPA) holding tfviz's exact weights (``copy_weights``; logits checked equal)
  2. full recording (every hook point, B=1, no_grad) / tfviz fast path forward, at T=256 and T=1024
"""
from __future__ import annotations

import argparse
import statistics
import time
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import nn

from ..model import ModelConfig
from ..model import Transformer
from ..recording import record


class _RefBlock(nn.Module):
    def __init__(self, d: int, h: int):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.proj(F.gelu(self.fc(self.ln2(x))))


class Reference(nn.Module):
    """The minimal GPT the numbers are compared against (nanoGPT's model.py, reduced to its math)."""

    def __init__(self, vocab: int, d: int, h: int, layers: int, block: int):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList(_RefBlock(d, h) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


def copy_weights(ours: Transformer, ref: Reference) -> None:
    """Give the reference tfviz's exact weights, so both compute the same numbers (checked) and
    meet the same values: CPU time depends on them (denormal floats are many times slower), and a
    comparison with different initialisations measures the weights, not the code."""
    pairs = [(ref.wte, ours.embed), (ref.wpe, ours.stack.pos.table), (ref.ln_f, ours.stack.ln_final)]
    for rb, ob in zip(ref.blocks, ours.stack.blocks):
        pairs += [(rb.ln1, ob.ln1), (rb.c_attn, ob.attn.W_qkv), (rb.c_proj, ob.attn.W_o),
                  (rb.ln2, ob.ln2), (rb.fc, ob.mlp.W_in), (rb.proj, ob.mlp.W_out)]
    with torch.no_grad():
        for r, o in pairs:
            r.load_state_dict(o.state_dict())


def nanogpt_config(max_len: int = 256) -> ModelConfig:
    return ModelConfig(arch="decoder", vocab_size=65, d_model=384, n_heads=6, n_layers=6, d_ff=1536,
                       max_len=max_len, pos="learned", norm="pre", activation="gelu", dropout=0.0,
                       tie_embeddings=True, pad_id=None)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _timed(fn, device) -> float:
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t0


def _interleave(fns: dict, reps: int, warmup: int, device) -> dict[str, float]:
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for k, fn in fns.items():
            times[k].append(_timed(fn, device))
    return {k: statistics.median(v) for k, v in times.items()}


def bench_train_step(device, dtype, batch: int, block: int, reps: int, warmup: int) -> dict:
    cfg = nanogpt_config(block)
    ours = Transformer(cfg).to(device)
    ref = Reference(65, 384, 6, 6, block).to(device)
    copy_weights(ours, ref)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 65, (batch, block), generator=g).to(device)
    y = torch.randint(0, 65, (batch, block), generator=g).to(device)
    with torch.no_grad():  # same shapes, same weights, same math: the same logits
        torch.testing.assert_close(ours(x[:1]).float(), ref(x[:1]).float(), atol=1e-3, rtol=1e-3)
    amp = torch.autocast(device.type, dtype=dtype) if dtype != torch.float32 else nullcontext()

    def step(model):
        def run():
            with amp:
                loss = F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten())
            loss.backward()
            model.zero_grad(set_to_none=True)
        return run

    t = _interleave({"reference": step(ref), "tfviz": step(ours)}, reps, warmup, device)
    return {**t, "ratio": t["tfviz"] / t["reference"],
            "tokens_per_s": batch * block / t["tfviz"]}


def bench_recording(device, dtype, T: int, reps: int, warmup: int) -> dict:
    model = Transformer(nanogpt_config(max(T, 256))).to(device).eval()
    x = torch.randint(0, 65, (1, T), generator=torch.Generator().manual_seed(1)).to(device)
    amp = torch.autocast(device.type, dtype=dtype) if dtype != torch.float32 else nullcontext()

    def fast():
        with torch.no_grad(), amp:
            model(x)

    def rec():
        with amp:
            record(model, x)

    t = _interleave({"fast": fast, "record": rec}, reps, warmup, device)
    return {**t, "ratio": t["record"] / t["fast"], "T": T}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tfviz.bench model", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default=None,
                   help="default: bf16 autocast on CUDA, fp32 on CPU")
    p.add_argument("--batch", type=int, default=12)
    p.add_argument("--block", type=int, default=256)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--record-lengths", default="256,1024")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[
        args.dtype or ("bf16" if device.type == "cuda" else "fp32")]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"device: {name}; dtype: {str(dtype).removeprefix('torch.')}; torch {torch.__version__}")
    torch.manual_seed(0)

    r = bench_train_step(device, dtype, args.batch, args.block, args.reps, args.warmup)
    print(f"\ntrain step (fwd+bwd), batch {args.batch} x block {args.block}, median of {args.reps} interleaved reps")
    print(f"  reference (plain PyTorch + SDPA)  {r['reference'] * 1e3:9.1f} ms")
    print(f"  tfviz fast path                   {r['tfviz'] * 1e3:9.1f} ms   ({r['tokens_per_s']:,.0f} tokens/s)")
    ok = r["ratio"] <= 1.05
    print(f"  ratio tfviz / reference           {r['ratio']:9.3f}   target <= 1.05  {'PASS' if ok else 'FAIL'}")

    all_ok = ok
    print("\nfull recording (all hook points, B=1, no_grad) vs fast path forward")
    for T in (int(t) for t in args.record_lengths.split(",")):
        r = bench_recording(device, dtype, T, args.reps, args.warmup)
        target = 1.15 if T <= 256 else 1.5
        ok = r["ratio"] <= target
        all_ok &= ok
        print(f"  T={T:5d}  fast {r['fast'] * 1e3:8.1f} ms  record {r['record'] * 1e3:8.1f} ms  "
              f"ratio {r['ratio']:.3f}  target <= {target}  {'PASS' if ok else 'FAIL'}")
    print("\nall targets met" if all_ok else "\nsome targets missed")
    return 0
