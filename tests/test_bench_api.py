"""The function-level benchmark API the Cost page calls (``tfviz.bench.attention.run`` with passes,
progress and a time limit; ``ratio_table``; ``analytic_frame``; ``kvcache.cache_table`` /
``generation_speed``) and the page's extra figures. Nothing here asserts a timing."""
import json

import pandas as pd
import pytest
import torch

import tfviz
from tfviz.analysis.cost import attention_flops, kv_cache_bytes
from tfviz.bench import attention as bench
from tfviz.bench import kvcache
from tfviz.model.attention import Attention
from tfviz.viz import analytic_figure, compact, speed_figure, time_figure

QUIET = dict(log=lambda *_: None)


def test_variants_are_the_models_own_kernels_and_agree():
    layer = bench.model_layer(2, 2, 8)
    assert isinstance(layer, Attention) and not layer.training
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 40, 8, generator=g) for _ in range(3))
    out = {name: bench.make_variant(name, 5, True)(q, k, v)
           for name in ("full-explicit", "full-sdpa", "window-masked", "window-banded")}
    torch.testing.assert_close(out["full-explicit"], out["full-sdpa"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out["window-masked"], out["window-banded"], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(out["full-sdpa"], out["window-banded"], atol=1e-3)


def test_run_forward_only_with_progress():
    seen = []
    df = bench.run([32, 64], window=8, heads=2, d_head=8, repeats=1, passes=("fwd",),
                   progress=lambda f, text: seen.append((f, text)), **QUIET)
    assert set(df["pass"]) == {"fwd"} and len(df) == 2 * 4
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[-1] == pytest.approx(1.0)
    assert all(0 <= f <= 1 for f in fractions) and any("repeat 1 of 1" in t for _, t in seen)
    assert "-" in bench.table(df)  # the fwd+bwd columns are empty, not a crash
    with pytest.raises(ValueError):
        bench.run([32], passes=(), **QUIET)


def test_time_limit_skips_later_sizes_with_a_reason():
    df = bench.run([32, 64], window=8, heads=2, d_head=8, repeats=1, passes=("fwd",),
                   time_limit_s=0.0, **QUIET)
    first, later = df[df["n"] == 32], df[df["n"] == 64]
    assert (first["skipped"] == "").all() and (first["time_s"] > 0).all()
    assert later["skipped"].str.contains("time limit").all() and later["time_s"].isna().all()
    assert "not run at n = 64" in time_figure(df, "fwd").layout.annotations[0].text
    generous = bench.run([32, 64], window=8, heads=2, d_head=8, repeats=1, passes=("fwd",),
                         time_limit_s=600, **QUIET)
    assert (generous["skipped"] == "").all()


def test_analytic_frame_is_the_formula():
    frame = bench.analytic_frame([128, 256], window=16, heads=2, d_head=8)
    assert len(frame) == 2 * 4 * 2
    row = frame[(frame["n"] == 256) & (frame["variant"] == "window-banded") & (frame["pass"] == "fwd")]
    assert int(row["flops"].iloc[0]) == attention_flops(256, 16, 2, 8, 1, False, True)
    # a window handed to SDPA as a mask computes all n² scores: full attention's FLOPs, not the band's
    at = frame[(frame["n"] == 256) & (frame["pass"] == "fwd")].set_index("variant")["flops"]
    assert at["window-masked"] == at["full-explicit"] == 4 * 8 * 256 * 256 * 2
    assert at["window-masked"] / at["window-banded"] > 256 / (16 + 1) - 1
    fig = analytic_figure(frame, "flops", "fwd")
    assert fig.layout.xaxis.type == "log" and len(fig.data) == 4
    with pytest.raises(ValueError):
        analytic_figure(frame, "seconds")


def test_ratio_table_compares_at_the_largest_common_n_and_per_doubling():
    rows = []
    for n in (1024, 2048, 4096):
        for variant, t, m in (("window-banded", n, n), ("full-explicit", n * n / 1024, n * n / 1024)):
            rows.append(dict(n=n, variant=variant, **{"pass": "fwd"}, time_s=t, peak_bytes=m,
                             flops=t, bytes_analytic=m, skipped=""))
    rows[-1] = dict(rows[-1], time_s=None, peak_bytes=None, skipped="skipped: memory")  # explicit 4096
    r = bench.ratio_table(pd.DataFrame(rows), "fwd").set_index("comparison")
    full, band = bench.LABELS["full-explicit"], bench.LABELS["window-banded"]  # plain words
    at = r.loc[f"{full} ÷ {band}"]
    assert at["n"] == 2048 and at["time"] == pytest.approx(2.0) and at["peak"] == pytest.approx(2.0)
    assert r.loc[f"{band}: growth per 2× n (2048 → 4096)", "time"] == pytest.approx(2.0)
    assert r.loc[f"{full}: growth per 2× n (1024 → 2048)", "peak"] == pytest.approx(4.0)
    cpu = bench.ratio_table(pd.DataFrame(rows).assign(cpu_s=lambda d: 3 * d["time_s"]), "fwd",
                            time_col="cpu_s").set_index("comparison")  # the time of another clock
    assert cpu.loc[f"{band}: growth per 2× n (2048 → 4096)", "time"] == pytest.approx(2.0)


def test_main_writes_where_and_when_beside_the_csv(tmp_path):
    csv, threads = tmp_path / "a.csv", torch.get_num_threads()
    try:
        assert bench.main(["--n", "32", "--window", "8", "--heads", "2", "--d-head", "8",
                           "--repeats", "1", "--threads", "1", "--device", "cpu", "--csv", str(csv)]) == 0
    finally:
        torch.set_num_threads(threads)  # --threads sets it for the whole (test) process
    meta = json.loads((tmp_path / "a.json").read_text())
    assert meta["device"] == "cpu" and meta["threads"] == 1 and meta["measured_at"]
    assert "--n 32" in meta["command"] and "--threads 1" in meta["command"]


# ------------------------------------------------------------------------------ KV cache
@pytest.mark.parametrize("n_kv", [4, 2, 1])
def test_cache_table_reads_the_real_cache(n_kv):
    cfg = tfviz.ModelConfig(vocab_size=30, d_model=32, n_heads=4, n_kv_heads=n_kv, n_layers=2,
                            max_len=40, pos="learned", pad_id=0)
    model = tfviz.Transformer(cfg)
    t = kvcache.cache_table(model, "x", prompt_len=5, new_tokens=35, batch=2, every=10)
    assert t["pos"].tolist() == [5, 15, 25, 35, 40]
    assert (t["measured_bytes"] == [kv_cache_bytes(2, n_kv, 8, p, 2, 4) for p in t["pos"]]).all()
    assert (t["measured_bytes"] == 2 * 2 * n_kv * 8 * t["pos"] * 2 * 4).all()
    with pytest.raises(ValueError, match="learned"):
        kvcache.cache_table(model, "x", prompt_len=5, new_tokens=36)
    speed = kvcache.generation_speed(model, "x", prompt_len=5, new_tokens=4, repeats=1)
    assert set(speed["cache"]) == {True, False} and (speed["tokens_per_s"] > 0).all()
    fig = speed_figure(speed.assign(kind="MHA"))
    assert [tr.name for tr in fig.data] == ["with KV cache", "without (re-run everything)"]


def test_prompt_has_no_padding_and_encoders_are_refused():
    enc = tfviz.Transformer(tfviz.ModelConfig(arch="encoder", vocab_size=10, d_model=16, n_heads=2,
                                              n_layers=1, pos="learned"))
    assert (kvcache.random_prompt(enc, 200) != 0).all()
    with pytest.raises(ValueError, match="decoder"):
        kvcache.cache_table(enc, "x", 4, 4)


def test_compact_keeps_one_legend_entry_per_variant():
    rows = [dict(n=n, variant=v, **{"pass": "fwd"}, time_s=n / 1e4, peak_bytes=n, flops=n,
                 bytes_analytic=n, skipped="") for n in (256, 512) for v in ("a", "b")]
    fig = compact(time_figure(pd.DataFrame(rows), "fwd"))
    shown = [t.name for t in fig.data if t.showlegend is not False]
    assert shown == ["a (measured)", "b (measured)"]
    assert list(fig.layout.xaxis.tickvals) == [256, 512]
