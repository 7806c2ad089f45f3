"""Where the FlexAttention window's fixed cost goes on CUDA (a diagnostic, not a benchmark target).

    python scripts/flex_probe.py [--n 4096 65536]

bf16, 1 x 4 heads x 64, w = 128, causal. For each n, median of 30 synced calls of: tfviz's
``banded_attention`` (what the model runs), the compiled ``flex_attention`` called directly on the
cached block mask (no tfviz code around it), and SDPA causal (flash); forward under no_grad and
forward + backward; beside each, the host time until the call returns (no sync): when that is
close to the synced time the kernel is waiting on Python, not the GPU. Then a profiler table of
tfviz's forward + backward (top ops by host time).
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, as scripts/ do
from tfviz.model import banded, flex  # noqa: E402


def clock(fn, reps=30, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    synced, host = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        host.append(t1 - t0)
        synced.append(t2 - t0)
    return statistics.median(synced) * 1e3, statistics.median(host) * 1e3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, nargs="+", default=[4096, 65536])
    args = p.parse_args()
    w = 128
    print(torch.cuda.get_device_name(0), torch.__version__)
    for n in args.n:
        q, k, v = (torch.randn(1, 4, n, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        g = torch.randn_like(q)
        bm = flex.band_block_mask(n, w, True, q.device)
        cf = flex.compiled_flex()
        calls = {
            "tfviz banded_attention": lambda: banded.banded_attention(q, k, v, w, True),
            "compiled flex, direct": lambda: cf(q, k, v, block_mask=bm),
            "sdpa causal (flash)": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        }
        for name, fn in calls.items():
            def fwd(fn=fn):
                with torch.no_grad():
                    fn()

            def fwd_bwd(fn=fn):
                torch.autograd.grad(fn(), (q, k, v), g)
            if name.startswith("compiled"):
                with torch._dynamo.config.patch(recompile_limit=256):
                    fwd(); fwd_bwd()
            f, fh = clock(fwd)
            b, bh = clock(fwd_bwd)
            print(f"n={n:6d}  {name:<24} fwd {f:7.3f} ms (host {fh:6.3f})   fwd+bwd {b:7.3f} ms (host {bh:6.3f})")
    n = args.n[-1]
    q, k, v = (torch.randn(1, 4, n, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    g = torch.randn_like(q)
    for _ in range(3):
        torch.autograd.grad(banded.banded_attention(q, k, v, w, True), (q, k, v), g)
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            torch.autograd.grad(banded.banded_attention(q, k, v, w, True), (q, k, v), g)
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=60))
    print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=10, max_name_column_width=60))


if __name__ == "__main__":
    main()
