"""python -m tfviz.bench model — tfviz's transformer against a minimal reference, same process.

Shapes (``--shapes``): nanoGPT's shakespeare-char model (decoder, 6 layers, 6 heads, d_model 384,
block 256, batch 12, vocab 65) and GPT-2 small (12 layers, 12 heads, d_model 768, block 1024,
batch 16, vocab 50257); both with learned positions, GELU, pre-norm, tied embeddings, dropout 0.
Each measurement is a ratio with the variants interleaved rep by rep (so drift in machine load
hits both) and the median taken:
  1. train step (forward + cross-entropy + backward + AdamW, fused on CUDA): tfviz fast path /
     reference (plain PyTorch + SDPA) holding tfviz's exact weights (``copy_weights``; logits
     checked equal); eager, and on CUDA also both under torch.compile (GPT-2 shape). On CUDA the
     MFU of both against the GPU's datasheet bf16 peak (and the measured matmul peak for scale).
  2. full recording (every hook point, B=1, no_grad) / tfviz fast path forward, at T=256 and T=1024;
     on CUDA kept on the GPU (the target) and with the copy to the host beside it.
"""
from __future__ import annotations

import argparse
import math
import statistics
from contextlib import nullcontext
from datetime import datetime, timezone

import torch
import torch.nn.functional as F
from torch import nn

from ..analysis.cost import train_flops_per_token
from ..device import bf16_peak_flops, default_device, device_name
from ..model import ModelConfig
from ..model import Transformer
from ..recording import record
from .measure import interleave, time_once


class _RefBlock(nn.Module):
    def __init__(self, d: int, h: int):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x, keep: list | None = None):
        """``keep``: a list to append what a full recording keeps (written the plain way: explicit
        attention, each norm's scale and normalized value from one var_mean) — the floor that a
        recording costs in eager PyTorch, against which tfviz's ``record`` is compared."""
        B, T, C = x.shape
        q, k, v = self.c_attn(_norm(self.ln1, x, keep)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        if keep is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            scores = (q @ k.transpose(-2, -1) / math.sqrt(C // self.h)).masked_fill(~mask, float("-inf"))
            pattern = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            y = pattern @ v
            keep += [x, q, k, v, scores, pattern, y]
        a = self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        x = x + a
        h = F.gelu(self.fc(_norm(self.ln2, x, keep)))
        m = self.proj(h)
        if keep is not None:
            keep += [a, x, h, m]
        return x + m


def _norm(ln: nn.LayerNorm, x, keep: list | None):
    if keep is not None:
        h = x.float()
        var, mean = torch.var_mean(h, -1, correction=0, keepdim=True)
        scale = (var + ln.eps).sqrt()
        keep += [scale, (h - mean) / scale]
    out = ln(x)
    if keep is not None:
        keep.append(out)
    return out


class Reference(nn.Module):
    """The minimal GPT the numbers are compared against (nanoGPT's model.py, reduced to its math)."""

    def __init__(self, vocab: int, d: int, h: int, layers: int, block: int):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList(_RefBlock(d, h) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx, keep: list | None = None):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x, keep)
        return self.head(_norm(self.ln_f, x, keep))


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


SHAPES = {  # name: (vocab, d_model, heads, layers, block, batch)
    "nanogpt": (65, 384, 6, 6, 256, 12),     # shakespeare-char
    "gpt2": (50257, 768, 12, 12, 1024, 16),  # GPT-2 small
}


def gpt_config(vocab: int, d: int, heads: int, layers: int, block: int) -> ModelConfig:
    """tfviz's config of the reference's architecture (GPT-2: learned positions, GELU, pre-norm,
    tied embeddings, biases, no dropout)."""
    return ModelConfig(arch="decoder", vocab_size=vocab, d_model=d, n_heads=heads, n_layers=layers,
                       d_ff=4 * d, max_len=block, pos="learned", norm="pre", activation="gelu",
                       dropout=0.0, tie_embeddings=True, pad_id=None)


def nanogpt_config(max_len: int = 256) -> ModelConfig:
    return gpt_config(65, 384, 6, 6, max_len)



def matmul_peak(device, dtype=torch.bfloat16, n: int = 8192, reps: int = 20) -> float:
    """Measured FLOP/s of one large square matrix product (the practical ceiling)."""
    g = torch.Generator(device=device).manual_seed(0)
    a, b = (torch.randn(n, n, device=device, dtype=dtype, generator=g) for _ in range(2))
    for _ in range(3):
        a @ b
    t = statistics.median(time_once(lambda: a @ b, device) for _ in range(reps))
    return 2 * n ** 3 / t


def bench_train_step(device, dtype, batch: int, block: int, reps: int, warmup: int,
                     shape: str = "nanogpt", compile: bool = False, mode: str | None = None) -> dict:
    """One optimizer step (forward, cross-entropy, backward, AdamW; fused on CUDA) of tfviz's fast
    path and of the reference holding the same weights; ``compile``: both through torch.compile
    (tfviz's input checks run eagerly in ``prepare``, as in ``tfviz.train``)."""
    vocab, d, heads, layers, _, _ = SHAPES[shape]
    ours = Transformer(gpt_config(vocab, d, heads, layers, block)).to(device)
    ref = Reference(vocab, d, heads, layers, block).to(device)
    copy_weights(ours, ref)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, vocab, (batch, block), generator=g).to(device)
    y = torch.randint(0, vocab, (batch, block), generator=g).to(device)
    with torch.no_grad():  # same shapes, same weights, same math: the same logits
        torch.testing.assert_close(ours(x[:1]).float(), ref(x[:1]).float(), atol=1e-3, rtol=1e-3)
    amp = torch.autocast(device.type, dtype=dtype) if dtype != torch.float32 else nullcontext()
    fused = device.type == "cuda"
    ours_fwd = torch.compile(ours, mode=mode) if compile else ours
    ref_fwd = torch.compile(ref, mode=mode) if compile else ref

    def step(model, forward, prepared: bool):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused)

        def run():
            with amp:
                logits = forward(x, pads=model.prepare(x)) if prepared else forward(x)
                loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return run

    t = interleave({"reference": step(ref, ref_fwd, False), "tfviz": step(ours, ours_fwd, True)},
                    reps, warmup + (3 if compile else 0), device)
    flops = train_flops_per_token(ours, block) * batch * block  # one formula for both models
    out = {**t, "ratio": t["tfviz"] / t["reference"], "tokens_per_s": batch * block / t["tfviz"],
           "flops_per_step": flops}
    del ours, ref, ours_fwd, ref_fwd
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def bench_recording(device, dtype, T: int, reps: int, warmup: int) -> dict:
    """Full recording (every hook point, B=1) against the fast-path forward: kept on the device
    (``record(..., device=None)``) and moved to the host (the default)."""
    cfg = nanogpt_config(max(T, 256))
    model = Transformer(cfg).to(device).eval()
    x = torch.randint(0, 65, (1, T), generator=torch.Generator().manual_seed(1)).to(device)
    amp = torch.autocast(device.type, dtype=dtype) if dtype != torch.float32 else nullcontext()

    def fast():
        with torch.no_grad(), amp:
            model(x)

    def rec():
        with amp:
            record(model, x, device=None)

    def rec_host():
        with amp:
            record(model, x)

    ref = Reference(cfg.vocab_size, cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.max_len).to(device).eval()
    copy_weights(model, ref)

    def ref_fast():
        with torch.no_grad(), amp:
            ref(x)

    def ref_rec():
        with torch.no_grad(), amp:
            ref(x, keep=[])

    fns = {"fast": fast, "record": rec, "ref_fast": ref_fast, "ref_record": ref_rec}
    if device.type == "cuda":
        fns["record_to_cpu"] = rec_host
    t = interleave(fns, reps, warmup, device)
    n_bytes = sum(v.numel() * v.element_size() for v in record(model, x, device=None).values())
    return {**t, "ratio": t["record"] / t["fast"], "T": T, "bytes": n_bytes,
            "ratio_ref": t["ref_record"] / t["ref_fast"], "vs_ref": t["record"] / t["ref_record"],
            "ratio_to_cpu": t.get("record_to_cpu", t["record"]) / t["fast"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tfviz.bench model", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default=default_device())
    p.add_argument("--dtype", choices=["fp32", "bf16"], default=None,
                   help="default: bf16 autocast on CUDA, fp32 on CPU")
    p.add_argument("--shapes", default=None,
                   help="comma-separated of nanogpt, gpt2 (default: both on CUDA, nanogpt on CPU)")
    p.add_argument("--batch", type=int, default=None, help="default: the shape's (nanogpt 12, gpt2 16)")
    p.add_argument("--block", type=int, default=None, help="default: the shape's (256, 1024)")
    p.add_argument("--compile", choices=["none", "gpt2", "all"], default=None,
                   help="also time both models under torch.compile (default: all on CUDA, none on CPU)")
    p.add_argument("--cudagraphs", choices=["none", "nanogpt", "all"], default=None,
                   help="also time both under torch.compile(mode='reduce-overhead'), i.e. CUDA graphs "
                        "(default: nanogpt on CUDA, where launches dominate; none on CPU)")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--record-lengths", default="256,1024")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype or ("bf16" if cuda else "fp32")]
    shapes = (args.shapes or ("nanogpt,gpt2" if cuda else "nanogpt")).split(",")
    compiled = args.compile or ("all" if cuda else "none")
    graphed = args.cudagraphs or ("nanogpt" if cuda else "none")
    name = device_name(device) if cuda else f"CPU, {torch.get_num_threads()} threads"
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    print(f"device: {name}; dtype: {str(dtype).removeprefix('torch.')}; torch {torch.__version__}; {when}")
    torch.manual_seed(0)
    peak = bf16_peak_flops(device) if dtype == torch.bfloat16 else None
    if cuda:
        measured = matmul_peak(device, dtype)
        print(f"{str(dtype).removeprefix('torch.')} peak: datasheet (dense) "
              f"{'unknown' if peak is None else f'{peak / 1e12:.0f} TFLOP/s'}; measured 8192^3 matmul "
              f"{measured / 1e12:.0f} TFLOP/s. MFU below is against the datasheet figure "
              f"(FLOPs per token: 6N + 12·L·H·d_head·T, tfviz.analysis.cost.train_flops_per_token)")

    all_ok = True
    print("\nfull recording (all hook points, B=1, no_grad) vs fast path forward")
    for T in (int(t) for t in args.record_lengths.split(",")):
        r = bench_recording(device, dtype, T, args.reps, args.warmup)
        target = 1.15 if T <= 256 else 1.5
        ok = r["ratio"] <= target
        all_ok &= ok
        where = " (kept on the GPU)" if cuda else ""
        print(f"  T={T:5d}  fast {r['fast'] * 1e3:8.2f} ms  record{where} {r['record'] * 1e3:8.2f} ms  "
              f"ratio {r['ratio']:.3f}  target <= {target}  {'PASS' if ok else 'FAIL'}")
        print(f"          plain PyTorch (the same quantities kept, explicit attention): fast {r['ref_fast'] * 1e3:8.2f} ms"
              f"  record {r['ref_record'] * 1e3:8.2f} ms  ratio {r['ratio_ref']:.3f} (the eager floor; no target)")
        print(f"          tfviz record / plain-PyTorch record {r['vs_ref']:.3f}")
        if cuda:
            bw = r["bytes"] / max(r["record_to_cpu"] - r["record"], 1e-9) / 1e9
            print(f"          + copy of {r['bytes'] / 2 ** 20:.0f} MiB to the host: record {r['record_to_cpu'] * 1e3:8.2f} ms"
                  f"  ratio {r['ratio_to_cpu']:.3f} (no target; ~{bw:.1f} GB/s for the copy)")
    for shape in shapes:
        _, _, _, _, block0, batch0 = SHAPES[shape]
        batch, block = args.batch or batch0, args.block or block0
        ways = [(False, None)]
        if compiled == "all" or compiled == shape:
            ways.append((True, None))
        if cuda and (graphed == "all" or graphed == shape):
            ways.append((True, "reduce-overhead"))
        launch_bound = cuda and len(ways) > 1 and shape == "nanogpt"
        for comp, mode in ways:
            r = bench_train_step(device, dtype, batch, block, args.reps, args.warmup, shape, comp, mode)
            how = ("torch.compile" + (f"(mode={mode!r}: CUDA graphs)" if mode else "")) if comp else "eager"
            print(f"\n{shape}: train step (fwd + loss + bwd + AdamW), batch {batch} x block {block}, {how}, "
                  f"median of {args.reps} interleaved reps")
            for key, label in (("reference", "reference (plain PyTorch + SDPA)"), ("tfviz", "tfviz fast path")):
                mfu = "" if peak is None else f"  MFU {r['flops_per_step'] / r[key] / peak:6.1%}"
                print(f"  {label:<34}{r[key] * 1e3:9.1f} ms  ({batch * block / r[key]:>12,.0f} tokens/s){mfu}")
            if launch_bound and not comp:  # the target for this shape is compiled or graphed
                print(f"  ratio tfviz / reference           {r['ratio']:9.3f}   (launch-bound at this size: "
                      "the target applies compiled / with CUDA graphs, below)")
                continue
            ok = r["ratio"] <= 1.05
            all_ok &= ok
            print(f"  ratio tfviz / reference           {r['ratio']:9.3f}   target <= 1.05  {'PASS' if ok else 'FAIL'}")

    print("\nall targets met" if all_ok else "\nsome targets missed")
    return 0
