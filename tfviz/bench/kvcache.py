"""python -m tfviz.bench kvcache — the KV cache's real bytes for MHA / GQA / MQA, and what it buys.

1. Bytes: a decoder steps through a prompt and then one token at a time with ``model.new_cache()``
   and ``model(tokens, cache=cache)``; ``cache.nbytes`` (the real k and v tensors) is read as the
   cache grows and set beside ``kv_cache_bytes`` = 2·L·n_kv_heads·d_head·pos·B·bytes.
2. Speed: tokens/s of ``model.generate(..., use_cache=True)`` against ``use_cache=False`` (which
   re-runs the whole sequence for every new token), interleaved, median of ``--repeats``.

Per model (what the Cost page calls on the shipped lm / lm-gqa / lm-mqa): ``cache_table`` and
``generation_speed``; ``random_models`` builds untrained decoders of the three kinds.
"""
from __future__ import annotations

import argparse
import statistics

import pandas as pd
import torch

from ..analysis.cost import kv_cache_bytes
from ..model import ModelConfig
from ..model import Transformer
from ..model.decoding import check_generation
from ..train.setup import new_model
from .measure import time_once


def kinds(n_heads: int) -> dict[str, int]:
    """Attention type -> n_kv_heads: MHA (all), GQA (a quarter, at least 2), MQA (one)."""
    out = {"MHA": n_heads}
    if n_heads >= 4:
        out["GQA"] = max(2, n_heads // 4)
    out["MQA"] = 1
    return out


@torch.no_grad()
def cache_growth(model: Transformer, prompt: torch.Tensor, steps: int,
                 every: int = 1) -> list[tuple[int, int]]:
    """(cached positions, cache.nbytes) after the prompt and after every ``every``-th new token."""
    model.eval()
    cache = model.new_cache()
    logits = model(prompt, cache=cache)
    out = [(cache.length, cache.nbytes)]
    for step in range(1, steps + 1):
        nxt = logits[:, -1].argmax(-1, keepdim=True)  # [batch, 1]
        logits = model(nxt, cache=cache)
        if step % every == 0 or step == steps:
            out.append((cache.length, cache.nbytes))
    return out


def random_models(d_model=256, n_heads=8, n_layers=4, vocab=256, max_len=192,
                  seed=0) -> dict[str, Transformer]:
    """Untrained decoders that differ only in n_kv_heads, one per ``kinds(n_heads)`` entry
    (the cache's size does not depend on the weights)."""
    models = {}
    for kind, n_kv in kinds(n_heads).items():
        cfg = ModelConfig(arch="decoder", vocab_size=vocab, d_model=d_model, n_heads=n_heads,
                          n_kv_heads=n_kv, n_layers=n_layers, max_len=max_len, pos="rope", pad_id=None)
        models[kind] = new_model(cfg, seed).eval()
    return models


def random_prompt(model: Transformer, prompt_len: int, batch: int = 1, seed: int = 0) -> torch.Tensor:
    """[batch, prompt_len] token ids, never the pad id (a real prompt has no padding)."""
    cfg = model.config
    lo = 1 if cfg.pad_id == 0 else 0
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(lo, cfg.vocab_size, (batch, prompt_len), generator=g)
    if cfg.pad_id is not None and cfg.pad_id > 0:
        ids[ids == cfg.pad_id] = 0
    return ids


def _check_lengths(model: Transformer, prompt_len: int, new_tokens: int) -> None:
    cfg = model.config
    if cfg.arch != "decoder":
        raise ValueError(f"the KV-cache measurements need a decoder, not an {cfg.arch} model")
    if prompt_len < 1 or new_tokens < 0:
        raise ValueError(f"prompt_len={prompt_len} must be >= 1 and new_tokens={new_tokens} >= 0")
    check_generation(cfg, prompt_len, new_tokens, 0.0, None, has_src=False)


def cache_table(model: Transformer, kind: str, prompt_len: int = 16, new_tokens: int = 128,
                batch: int = 1, every: int = 16) -> pd.DataFrame:
    """The real cache's bytes as it grows (``cache_growth``) beside 2·L·n_kv·d_head·pos·B·bytes.

    Columns: kind, n_heads, n_kv_heads, n_layers, d_head, batch, dtype_bytes, pos, measured_bytes,
    analytic_bytes. ``model`` must not be used by another thread meanwhile (hold its lock)."""
    _check_lengths(model, prompt_len, new_tokens)
    cfg = model.config
    dtype_bytes = next(model.parameters()).element_size()
    growth = cache_growth(model, random_prompt(model, prompt_len, batch), new_tokens, every)
    return pd.DataFrame([dict(kind=kind, n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads,
                              n_layers=cfg.n_layers, d_head=cfg.d_head, batch=batch,
                              dtype_bytes=dtype_bytes, pos=pos, measured_bytes=nbytes,
                              analytic_bytes=kv_cache_bytes(cfg.n_layers, cfg.n_kv_heads, cfg.d_head,
                                                            pos, batch, dtype_bytes))
                         for pos, nbytes in growth])


def generation_speed(model: Transformer, kind: str, prompt_len: int = 16, new_tokens: int = 128,
                     batch: int = 1, repeats: int = 3) -> pd.DataFrame:
    """Tokens/s of ``model.generate(..., use_cache=True)`` and ``use_cache=False`` (which re-runs
    the whole sequence for every new token), interleaved, median of ``repeats``.
    Columns: kind, cache, tokens_per_s, seconds. Hold the model's lock while this runs."""
    _check_lengths(model, prompt_len, new_tokens)
    prompt = random_prompt(model, prompt_len, batch)
    samples = {True: [], False: []}
    for _ in range(repeats):
        for use_cache in (True, False):
            samples[use_cache].append(time_once(
                lambda: model.generate(prompt, new_tokens, use_cache=use_cache)))
    return pd.DataFrame([dict(kind=kind, cache=c, seconds=statistics.median(ts),
                              tokens_per_s=batch * new_tokens / statistics.median(ts))
                         for c, ts in samples.items()])


def run(d_model=256, n_heads=8, n_layers=4, vocab=256, prompt_len=64, new_tokens=128, batch=1,
        repeats=3, every=32, log=print) -> tuple[pd.DataFrame, pd.DataFrame]:
    """-> (bytes rows: kind, n_kv_heads, pos, measured, analytic; speed rows: kind, cache, tokens_per_s)."""
    models = random_models(d_model, n_heads, n_layers, vocab, prompt_len + new_tokens)
    sizes = []
    for kind, model in models.items():
        t = cache_table(model, kind, prompt_len, new_tokens, batch, every)
        sizes.append(t)
        last = t.iloc[-1]
        log(f"{kind}: n_kv_heads={last['n_kv_heads']}  cache at {last['pos']} positions = "
            f"{last['measured_bytes'] / 2**20:.2f} MiB (analytic {last['analytic_bytes'] / 2**20:.2f} MiB, "
            f"{'equal' if last['measured_bytes'] == last['analytic_bytes'] else 'DIFFERENT'})")
    speed = [generation_speed(model, kind, prompt_len, new_tokens, batch, repeats)
             for kind, model in models.items()]
    return pd.concat(sizes, ignore_index=True), pd.concat(speed, ignore_index=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tfviz.bench kvcache", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--csv", help="write the byte rows here (and the speed rows to *_speed.csv)")
    p.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's choice)")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    print(f"kv cache benchmark: d_model={a.d_model} heads={a.heads} layers={a.layers} "
          f"prompt={a.prompt} new_tokens={a.new_tokens} batch={a.batch} threads={torch.get_num_threads()}")
    sizes, speed = run(a.d_model, a.heads, a.layers, 256, a.prompt, a.new_tokens, a.batch, a.repeats)
    ok = bool((sizes["measured_bytes"] == sizes["analytic_bytes"]).all())
    print(f"cache.nbytes == 2·L·n_kv·d_head·pos·B·bytes at every step: {'PASS' if ok else 'FAIL'}")
    wide = speed.pivot(index="kind", columns="cache", values="tokens_per_s")
    for kind, row in wide.iterrows():
        print(f"  {kind}: {row[True]:8.1f} tok/s with cache, {row[False]:8.1f} without "
              f"({row[True] / row[False]:.1f}x)")
    if a.csv:
        sizes.to_csv(a.csv, index=False)
        speed.to_csv(a.csv.removesuffix(".csv") + "_speed.csv", index=False)
        print(f"wrote {a.csv}")
    return 0 if ok else 1
