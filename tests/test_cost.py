"""Analytic cost, the peak-memory method, the scaling shape on small sizes, figures, bench smoke.
No timing is asserted anywhere: timings are reported by the benchmarks, never tested."""
import pandas as pd
import pytest
import torch

import tfviz
from tfviz.analysis.cost import (attended_pairs, attention_bytes, attention_flops, kv_cache_bytes,
                                 scaling_exponent)
from tfviz.bench import attention as bench_attention
from tfviz.bench import kvcache as bench_kvcache
from tfviz.bench.measure import peak_bytes
from tfviz.model.banded import banded_attention
from tfviz.model.masks import MaskSpec
from tfviz.viz import kv_cache_figure, memory_figure, time_figure

MIB = 2 ** 20


# ------------------------------------------------------------------ analytic
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n,w", [(1, None), (10, None), (10, 0), (10, 3), (10, 9), (10, 50), (33, 8)])
def test_attended_pairs_counts_the_mask(n, w, causal):
    assert attended_pairs(n, w, causal) == int(MaskSpec(causal=causal, window=w).build(n, n).sum()) \
        if (w is not None or causal) else attended_pairs(n, w, causal) == n * n


def test_flops_linear_for_window_quadratic_for_full():
    for w in (16, 128):
        win = [attention_flops(n, w, 4, 64, 1) for n in (4096, 8192, 16384)]
        assert all(2.0 <= b / a <= 2.05 for a, b in zip(win, win[1:]))  # ~n(w+1): doubling n doubles it
        # constant second difference zero: exactly linear once n > w
        assert win[2] - win[1] == 2 * (win[1] - win[0])
    full = [attention_flops(n, None, 4, 64, 1) for n in (4096, 8192, 16384)]
    assert all(3.99 <= b / a <= 4.01 for a, b in zip(full, full[1:]))
    assert attention_flops(1024, 128, 4, 64, 2, backward=True) == 3 * attention_flops(1024, 128, 4, 64, 2)


def test_flops_count_what_the_kernel_computes():
    """A kernel that materialises the scores (explicit) or is handed an n×n mask (masked) computes
    all n² of them, whatever the window: a masked window costs as much as full attention."""
    n, w = 1024, 128
    full = attention_flops(n, None, 4, 64, 1, kernel="explicit")
    assert full == 4 * 64 * n * n * 4
    assert attention_flops(n, w, 4, 64, 1, kernel="masked") == full
    assert attention_flops(n, w, 4, 64, 1, kernel="fused") == 4 * 64 * attended_pairs(n, w) * 4
    assert attention_flops(n, None, 4, 64, 1) == 4 * 64 * n * (n + 1) // 2 * 4  # causal flash
    with pytest.raises(ValueError):
        attention_flops(n, w, 4, 64, 1, kernel="magic")


def test_analytic_bytes_slopes():
    cases = [("explicit", None, 2), ("masked", 128, 2), ("fused", 128, 1), ("fused", None, 1)]
    for kernel, w, slope in cases:
        a, b = (attention_bytes(n, w, 4, 64, 1, True, kernel=kernel) for n in (1 << 14, 1 << 16))
        assert scaling_exponent(1 << 14, a, 1 << 16, b) == pytest.approx(slope, abs=0.1)
    with pytest.raises(ValueError):
        attention_bytes(10, None, 1, 1, kernel="flash")


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])  # MHA, GQA, MQA
def test_real_kv_cache_bytes_equal_the_formula(n_kv_heads):
    cfg = tfviz.ModelConfig(vocab_size=40, d_model=32, n_heads=4, n_kv_heads=n_kv_heads, n_layers=3,
                            max_len=64, pos="rope", pad_id=None)
    model = tfviz.Transformer(cfg)
    prompt = torch.randint(0, 40, (2, 5))
    growth = bench_kvcache.cache_growth(model, prompt, steps=7, every=2)
    assert [p for p, _ in growth] == [5, 7, 9, 11, 12]
    for pos, nbytes in growth:
        assert nbytes == kv_cache_bytes(3, n_kv_heads, cfg.d_head, pos, 2, 4)
        assert nbytes == 2 * 3 * n_kv_heads * cfg.d_head * pos * 2 * 4


# ------------------------------------------------------------------ the peak-memory method
def test_peak_bytes_sees_a_known_allocation():
    size = 3 * MIB
    assert size <= peak_bytes(lambda: torch.empty(size, dtype=torch.uint8)) <= size + 64 * 1024


def test_peak_bytes_is_a_peak_not_a_sum():
    def two_in_turn():
        a = torch.ones(2 * MIB, dtype=torch.uint8)
        del a
        b = torch.ones(MIB, dtype=torch.uint8)
        return b
    assert 2 * MIB <= peak_bytes(two_in_turn) < 3 * MIB

    def two_at_once():
        a = torch.ones(2 * MIB, dtype=torch.uint8)
        b = torch.ones(MIB, dtype=torch.uint8)
        return a, b
    assert peak_bytes(two_at_once) >= 3 * MIB


def test_peak_bytes_ignores_frees_of_memory_that_existed_before():
    box = [torch.ones(4 * MIB, dtype=torch.uint8)]

    def replace():
        box.pop()  # frees 4 MiB allocated before the region: the profiler does not report it...
        box.append(torch.ones(MIB, dtype=torch.uint8))  # ...so the new 1 MiB counts in full
    assert peak_bytes(replace) == MIB  # an upper bound on net growth, as documented


def test_peak_bytes_counts_autograd_backward():
    x = torch.randn(256, 256, requires_grad=True)

    def fwd_bwd():
        (x @ x).sum().backward()
        x.grad = None
    assert peak_bytes(fwd_bwd) >= 2 * 256 * 256 * 4  # the product and at least one gradient


# ------------------------------------------------------------------ the scaling shape, measured
def _measured_peak(fn, n, heads=4, d=32):
    q, k, v = (torch.randn(1, heads, n, d, requires_grad=True) for _ in range(3))
    grad = torch.randn(1, heads, n, d)

    def run():
        fn(q, k, v).backward(grad)
        q.grad = k.grad = v.grad = None
    return peak_bytes(run)


def test_banded_peak_memory_grows_linearly():
    peaks = [_measured_peak(lambda q, k, v: banded_attention(q, k, v, 64, True), n) for n in (512, 2048)]
    assert scaling_exponent(512, peaks[0], 2048, peaks[1]) == pytest.approx(1.0, abs=0.15)
    analytic = attention_bytes(2048, 64, 4, 32, 1, backward=True, kernel="fused")
    assert 0.7 <= peaks[1] / analytic <= 1.3


def test_explicit_peak_memory_grows_quadratically():
    spec = MaskSpec(causal=True)
    fn = lambda q, k, v: bench_attention.explicit_attention(q, k, v, spec)  # noqa: E731
    peaks = [_measured_peak(fn, n) for n in (256, 1024)]
    assert scaling_exponent(256, peaks[0], 1024, peaks[1]) == pytest.approx(2.0, abs=0.15)
    analytic = attention_bytes(1024, None, 4, 32, 1, backward=True, kernel="explicit")
    assert 0.7 <= peaks[1] / analytic <= 1.3


# ------------------------------------------------------------------ bench + figures
def test_attention_bench_smoke_and_figures(tmp_path):
    df = bench_attention.run([64, 256], window=16, heads=2, d_head=8, repeats=1, log=lambda *_: None,
                             mem_budget_gib=0.001)  # small enough to skip full-explicit at 256
    assert set(df["variant"]) >= {"full-explicit", "full-sdpa", "window-masked", "window-banded"}
    skipped = df[df["skipped"].fillna("") != ""]
    assert set(zip(skipped["n"], skipped["variant"])) == {(256, "full-explicit")}
    measured = df[df["skipped"] == ""]
    assert (measured["time_s"] > 0).all() and (measured["peak_bytes"] > 0).all()
    assert "window-banded" in bench_attention.table(df)
    assert all(r[4] == "n/a" for r in bench_attention.targets(df))  # no n=8192 here
    fig = time_figure(df)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert len(fig.data) == 2 * 4  # measured + analytic per variant
    assert {tr.line.dash for tr in fig.data if tr.name.endswith("(analytic)")} == {"dash"}
    mem = memory_figure(df, pass_="fwd")
    assert "full-explicit not run at n = 256" in mem.layout.annotations[0].text
    assert bench_attention.main(["--n", "64", "--window", "16", "--heads", "2", "--d-head", "8",
                                 "--repeats", "1", "--device", "cpu", "--csv", str(tmp_path / "a.csv")]) == 0
    assert len(pd.read_csv(tmp_path / "a.csv")) == 2 * 4


def test_targets_report_pass_and_fail():
    rows = []
    for n, (t_win, m_win, t_exp, m_exp, t_sdpa) in {
            2048: (1.0, 10, 10, 100, 2), 4096: (2.0, 20, 40, 400, 8), 8192: (4.5, 40, 200, 1600, 30),
            16384: (9.0, 80, None, None, 120)}.items():
        for variant, t, m in [("window-banded", t_win, m_win), ("full-explicit", t_exp, m_exp),
                              ("full-sdpa", t_sdpa, 1)]:
            rows.append(dict(n=n, variant=variant, **{"pass": "fwd+bwd"}, time_s=t, peak_bytes=m,
                             skipped="" if t is not None else "skipped: memory"))
    result = {r[0]: r[4] for r in bench_attention.targets(pd.DataFrame(rows))}
    assert result["n=8192 time: full-explicit / window-banded"] == "PASS"  # 44x
    assert result["n=8192 time: full-sdpa / window-banded"] == "PASS"  # 6.7x
    assert result["window-banded time  4096->8192"] == "PASS"  # 2.25x
    assert result["full-explicit peak  8192->16384"] == "n/a"
    rows[0]["time_s"] = 0.5  # banded 2048 -> 4096 now 4x
    result = {r[0]: r[4] for r in bench_attention.targets(pd.DataFrame(rows))}
    assert result["window-banded time  2048->4096"] == "FAIL"


def test_kv_cache_figure():
    sizes, speed = bench_kvcache.run(d_model=16, n_heads=4, n_layers=1, vocab=20, prompt_len=4,
                                     new_tokens=4, repeats=1, every=2, log=lambda *_: None)
    assert (sizes["measured_bytes"] == sizes["analytic_bytes"]).all()
    assert set(sizes["kind"]) == {"MHA", "GQA", "MQA"} and len(speed) == 6
    fig = kv_cache_figure(sizes)
    assert len(fig.data) == 6 and fig.data[1].line.dash == "dash"
