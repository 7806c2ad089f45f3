"""python -m tfviz.bench hf — tfviz against transformers' own GPT-2, same weights, same process.

A 124M GPT-2-shaped model (12 layers, 12 heads, d_model 768, vocab 50257, 1024 positions, tanh
GELU, tied head) with random weights (nothing is downloaded), copied into transformers'
``GPT2LMHeadModel`` with ``tfviz.to_hf`` (logits checked equal). Measured, variants interleaved
rep by rep and the median taken, on one sequence of ``--tokens`` (64) tokens, float32, no_grad:

    1. tfviz fast-path forward      / transformers forward    target <= 1.2
    2. tfviz full recording          / transformers forward    target <= 1.5   (every hook point)
    3. (--load) tfviz.from_pretrained of the same weights saved with save_pretrained: seconds,
       target <= 15 s on a 2-core CPU

transformers is optional for tfviz; this benchmark needs it (pip install 'transformers>=5,<6').
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch

from ..interop import from_pretrained, to_hf
from ..model import ModelConfig, Transformer
from ..recording import record
from .measure import interleave


def gpt2_small_config() -> ModelConfig:
    return ModelConfig(arch="decoder", vocab_size=50257, d_model=768, n_heads=12, n_layers=12,
                       d_ff=3072, max_len=1024, pos="learned", norm="pre", activation="gelu_new",
                       dropout=0.0, tie_embeddings=True, pad_id=None)



def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tfviz.bench hf", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--load", action=argparse.BooleanOptionalAction, default=True,
                   help="also time from_pretrained on a save_pretrained folder (writes ~0.5 GB to a temp dir)")
    args = p.parse_args(argv)
    try:
        import transformers
    except ImportError:
        print("python -m tfviz.bench hf compares with transformers, which is not installed: "
              "pip install 'transformers>=5,<6' (tfviz itself does not need it)")
        return 2
    transformers.utils.logging.disable_progress_bar()
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",) * 3
    print(f"CPU, {torch.get_num_threads()} threads, {os.cpu_count()} cores; torch {torch.__version__}, "
          f"transformers {transformers.__version__}; load average {' '.join(f'{x:.2f}' for x in load)}")
    torch.manual_seed(0)
    t0 = time.perf_counter()
    ours = Transformer(gpt2_small_config()).eval()
    hf = to_hf(ours)
    n_params = sum(p.numel() for p in ours.parameters())
    print(f"model: GPT-2 small shape, {n_params / 1e6:.1f}M parameters, random weights "
          f"(built in {time.perf_counter() - t0:.1f} s)")
    x = torch.randint(0, 50257, (1, args.tokens), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        diff = float((ours(x) - hf(x, use_cache=False).logits).abs().max())
    print(f"logits: max |tfviz - transformers| = {diff:.2e}")
    if diff > 1e-3:
        print("the logits differ: the comparison would not be fair")
        return 1

    def tfviz_fast():
        with torch.no_grad():
            ours(x)

    def tfviz_record():
        record(ours, x)

    def transformers_forward():
        with torch.no_grad():
            hf(x, use_cache=False)

    t = interleave({"transformers": transformers_forward, "fast": tfviz_fast, "record": tfviz_record},
                   args.reps, args.warmup)
    ok = True
    print(f"\nforward of {args.tokens} tokens, batch 1, float32, median of {args.reps} interleaved reps")
    print(f"  transformers GPT2LMHeadModel     {t['transformers'] * 1e3:8.1f} ms")
    for key, label, target in (("fast", "tfviz fast path", 1.2), ("record", "tfviz full recording", 1.5)):
        ratio = t[key] / t["transformers"]
        ok &= ratio <= target
        print(f"  {label:32} {t[key] * 1e3:8.1f} ms   ratio {ratio:5.2f}   target <= {target}  "
              f"{'PASS' if ratio <= target else 'FAIL'}")
    if args.load:
        with tempfile.TemporaryDirectory() as tmp:
            hf.save_pretrained(tmp)
            size = sum(os.path.getsize(os.path.join(tmp, f)) for f in os.listdir(tmp))
            del hf
            t0 = time.perf_counter()
            ck = from_pretrained(tmp)
            seconds = time.perf_counter() - t0
            with torch.no_grad():
                same = torch.equal(ck.model(x), ours(x))
        ok &= seconds <= 15 and same
        print(f"\nfrom_pretrained of the same weights ({size / 2**20:.0f} MiB folder): {seconds:.1f} s   "
              f"target <= 15 s  {'PASS' if seconds <= 15 else 'FAIL'}; logits identical: {same}")
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",) * 3
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in load)}")
    print("all targets met" if ok else "some targets missed")
    return 0
