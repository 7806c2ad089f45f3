"""Ablation, patching, logit lens, direct logit attribution and circuits
(tfviz.analysis.interventions / attribution), each against an independent computation: plain
``register_forward_hook`` on the modules, the model's own logits, a head whose output weights are
zero, the attribution's parts against the logit difference."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from tfviz.analysis import attribution as at
from tfviz.analysis import interventions as iv
from tfviz.model import ModelConfig, Transformer

sys.path.insert(0, str(Path(__file__).parent))
import hf_folders  # noqa: E402

TOL = 1e-5  # float32 sums of a few hundred terms of size ~1


def tiny(seed=0, **kw) -> Transformer:
    torch.manual_seed(seed)
    cfg = dict(arch="decoder", vocab_size=40, d_model=32, n_heads=4, n_layers=3, d_ff=64, max_len=24,
               pos="learned", dropout=0.0)
    cfg.update(kw)
    m = Transformer(ModelConfig(**cfg))
    with torch.no_grad():  # fresh norms are ones and zeros: move them
        for p in m.parameters():
            p.add_(0.05 * torch.randn(p.shape))
    return m.eval()


def tokens(B=3, T=10, vocab=40, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, vocab, (B, T), generator=g)


def module(m, name):
    return dict(m.named_modules())[("stack." if not name.startswith(("encoder", "decoder")) else "") + name]


def by_hand(m, inputs, edits, metric):
    """The metric with ``edits`` [(module path, fn)] applied by plain forward hooks."""
    handles = [module(m, n).register_forward_hook(lambda mod, i, o, fn=fn: fn(o)) for n, fn in edits]
    try:
        with torch.no_grad():
            return float(metric(m(*inputs)))
    finally:
        for h in handles:
            h.remove()


def zero_head(h):
    def fn(z):
        z = z.clone()
        z[:, :, h] = 0
        return z
    return fn


@pytest.mark.parametrize("kw", [dict(), dict(pos="rope", n_kv_heads=2, normalization="rmsnorm",
                                             activation="swiglu"), dict(norm="post")])
def test_head_sweep_equals_plain_forward_hooks(kw):
    m, t = tiny(**kw), tokens()
    metric = iv.logit_diff(5, 7, pos=-1)
    sw = iv.sweep(m, t, "head", metric)
    assert sw.baseline == pytest.approx(by_hand(m, (t,), [], metric), abs=TOL)
    for l in range(3):
        for h in range(4):
            want = by_hand(m, (t,), [(f"blocks.{l}.attn.hook_z", zero_head(h))], metric)
            assert sw.values[l, h] == pytest.approx(want, abs=TOL), (l, h)
    # a set of heads at once (two layers): one variant
    both = iv.effect(m, t, [iv.parse_heads(m, "L0H1+L2H3")], metric)[0]
    want = by_hand(m, (t,), [("blocks.0.attn.hook_z", zero_head(1)), ("blocks.2.attn.hook_z", zero_head(3))], metric)
    assert both == pytest.approx(want, abs=TOL)


def test_sdpa_and_explicit_paths_agree_and_hook_z_keeps_sdpa():
    m, t = tiny(), tokens()
    calls = []
    orig = m.stack.blocks[0].attn._explicit
    m.stack.blocks[0].attn._explicit = lambda *a, **k: calls.append(1) or orig(*a, **k)
    metric = iv.loss(t)
    auto = iv.sweep(m, t, "head", metric).values
    assert not calls  # hook_z does not switch to the explicit path
    del m.stack.blocks[0].attn._explicit
    m.set_attention_impl("explicit")
    explicit = iv.sweep(m, t, "head", metric).values
    m.set_attention_impl("auto")
    assert abs(auto - explicit).max() < 1e-4


def test_mean_and_mlp_and_position_ablation_by_hand():
    m, t = tiny(), tokens(B=4)
    ref = tokens(B=6, seed=9)
    metric = iv.prob(9, pos=-2)
    mean_z = None

    def grab(o):
        nonlocal mean_z
        mean_z = o.mean(0, keepdim=True)
    by_hand(m, (ref,), [("blocks.1.attn.hook_z", grab)], lambda lg: lg.sum())
    got = iv.effect(m, t, [[iv.head(1, 2)]], metric, mode="mean", reference=ref)[0]

    def put(o):
        o = o.clone()
        o[:, :, 2] = mean_z[:, :, 2]
        return o
    assert got == pytest.approx(by_hand(m, (t,), [("blocks.1.attn.hook_z", put)], metric), abs=TOL)
    mlp = iv.sweep(m, t, "mlp", metric).values[:, 0]
    for l in range(3):
        assert mlp[l] == pytest.approx(by_hand(m, (t,), [(f"blocks.{l}.hook_mlp_out", torch.zeros_like)],
                                               metric), abs=TOL)
    pos = iv.sweep(m, t, "resid_pre", metric, layers=[1]).values[0]

    def zero_pos(p):
        def fn(o):
            o = o.clone()
            o[:, p] = 0
            return o
        return fn
    for p in (0, 4, 9):
        assert pos[p] == pytest.approx(by_hand(m, (t,), [("blocks.1.hook_resid_pre", zero_pos(p))], metric), abs=TOL)


def test_patching_the_whole_residual_stream_gives_the_clean_logits_exactly():
    m = tiny()
    clean, corrupt = tokens(seed=1), tokens(seed=2)
    with torch.no_grad():
        want = m(clean)
    seen = []
    iv.effect(m, corrupt, [[iv.Site("blocks.0.hook_resid_pre")]], lambda lg: seen.append(lg) or 0.0,
              mode="patch", reference=clean)
    assert torch.equal(seen[0], want)
    # per position: the stream leaving the last layer at the last position is all the answer
    # reads; the other positions of that stream are read by nothing after it
    metric = iv.logit_diff(5, 7, pos=-1)
    grid = iv.sweep(m, corrupt, "resid_post", metric, mode="patch", reference=clean)
    clean_value = float(metric(want))
    assert grid.values[2, -1] == pytest.approx(clean_value, abs=TOL)
    assert grid.values[2, :-1] == pytest.approx([grid.baseline] * 9, abs=TOL)
    # the reverse (noising): corrupt activations into the clean run
    rev = iv.sweep(m, clean, "head", metric, mode="patch", reference=corrupt)
    assert rev.baseline == pytest.approx(clean_value, abs=TOL)


def test_a_head_with_zero_output_weights_has_no_effect():
    m, t = tiny(), tokens()
    with torch.no_grad():
        m.stack.blocks[1].attn.W_o.weight[:, 3 * 8:4 * 8] = 0  # d_head 8: head 3 writes nothing
    metric = iv.loss(t)
    for mode, ref in (("zero", None), ("mean", tokens(seed=5)), ("resample", tokens(seed=5))):
        sw = iv.sweep(m, t, "head", metric, mode=mode, reference=ref)
        assert sw.change[1, 3] == 0.0, mode
        assert abs(sw.change).max() > 1e-4  # the others do something


def test_hooks_are_removed_also_after_an_error():
    m, t = tiny(), tokens()
    with pytest.raises(RuntimeError):
        with iv.hooks(m, [("blocks.0.attn.hook_z", lambda z: z * 0)]):
            raise RuntimeError("boom")
    assert not any(p._forward_hooks for p in m.hook_points().values())
    with pytest.raises(ValueError, match="no hook point"):
        iv.run_with_hooks(m, t, fwd_hooks=[("blocks.9.attn.hook_z", lambda z: z)])
    with pytest.raises(ValueError, match="heads"):
        iv.parse_heads(m, "L7H0")


@pytest.mark.parametrize("text, message", [("L1H1+L1H1", "L1H1 is in the set twice"),
                                           ("L1+L1H2", "L1H2 is in the set twice"),
                                           ("l0h3, L0H3", "L0H3 is in the set twice"),
                                           ("", "names no head"), ("+", "names no head"),
                                           (" , ", "names no head")])
def test_a_heads_off_set_names_each_head_once(text, message):
    """Issue 30: "L1H1+L1H1" and an empty set were accepted without a word (a row that read as
    two heads switched off, or none)."""
    m = tiny()
    with pytest.raises(ValueError, match=message):
        iv.parse_heads(m, text)
    assert [s.label for s in iv.parse_heads(m, "L0H1+L1")] == \
           [s.label for s in [iv.head(0, 1)] + [iv.head(1, h) for h in range(m.config.n_heads)]]


def test_encoder_decoder_cross_heads_and_padding():
    m = tiny(arch="encoder-decoder", pos="sinusoidal")
    src, tgt = tokens(T=8, seed=3), tokens(T=6, seed=4)
    metric = iv.logit_diff(5, 6, pos=-1)
    sw = iv.sweep(m, (src, tgt), "cross_head", metric, stack="decoder")
    for l, h in ((0, 1), (2, 3)):
        want = by_hand(m, (src, tgt), [(f"decoder.blocks.{l}.cross_attn.hook_z", zero_head(h))], metric)
        assert sw.values[l, h] == pytest.approx(want, abs=TOL)
    enc = iv.sweep(m, (src, tgt), "head", metric, stack="encoder", layers=[1])
    want = by_hand(m, (src, tgt), [("encoder.blocks.1.attn.hook_z", zero_head(0))], metric)
    assert enc.values[0, 0] == pytest.approx(want, abs=TOL)
    # a padded bidirectional batch takes the repeated-input path and still matches
    e = tiny(arch="encoder", pos="learned")
    t = tokens()
    t[0, -3:] = 0
    want = by_hand(e, (t,), [("blocks.1.attn.hook_z", zero_head(2))], iv.loss(t))
    assert iv.sweep(e, t, "head", iv.loss(t), layers=[1]).values[0, 2] == pytest.approx(want, abs=TOL)


@pytest.mark.parametrize("kw", [dict(), dict(pos="rope", normalization="rmsnorm", n_kv_heads=2),
                                dict(pos="sinusoidal", attn_only=True), dict(norm="post"),
                                dict(arch="encoder-decoder")])
def test_logit_lens_ends_at_the_logits_and_attribution_sums(kw):
    m = tiny(**kw)
    inputs = (tokens(T=8, seed=3), tokens(T=6)) if kw.get("arch") == "encoder-decoder" else (tokens(),)
    with torch.no_grad():
        logits = m(*inputs)
    lens = at.logit_lens(m, inputs)
    assert lens.shape[0] == 4 and torch.equal(lens[-1], logits)
    if at.attribution_refusal(m):
        with pytest.raises(ValueError, match="post-norm"):
            at.direct_logit_attribution(m, inputs, 5, 7)
        return
    good, bad = torch.tensor([5, 6, 7]), torch.tensor([8, 9, 10])
    pos = torch.tensor([-1, 3, 4])
    d = at.direct_logit_attribution(m, inputs, good, bad, pos=pos)
    rows = torch.arange(3)
    want = (logits[rows, pos, good] - logits[rows, pos, bad]).numpy()
    assert d.total == pytest.approx(want, abs=1e-5)
    parts = sum(d.parts.values())
    assert parts == pytest.approx(want, abs=1e-4 * (1 + abs(want).max()))
    assert {"embed", "L0H0", "L2H3", "biases"} <= set(d.parts)


def test_circuits_match_the_weights_by_hand():
    m = tiny(bias=False)
    ids = [5, 6, 7, 8]
    c = at.circuits(m, 1, 2, ids)
    x = m.stack.blocks[1].ln1(m.embed.weight[ids]).detach()
    W = m.stack.blocks[1].attn.W_qkv.weight.detach()
    q, k, v = x @ W[16:24].T, x @ W[32 + 16:32 + 24].T, x @ W[64 + 16:64 + 24].T
    assert c["qk"] == pytest.approx((q @ k.T / 8 ** 0.5).numpy(), abs=1e-5)
    out = v @ m.stack.blocks[1].attn.W_o.weight.detach()[:, 16:24].T * m.stack.ln_final.weight.detach()
    assert c["ov"] == pytest.approx((out @ m.unembed.weight.detach()[ids].T).numpy(), abs=1e-5)


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    from tfviz.interop import from_pretrained
    root = tmp_path_factory.mktemp("hf")
    out = {}
    for kind in ("gpt2", "llama", "bert"):
        hf_folders.build(kind, root / kind)
        out[kind] = from_pretrained(root / kind).model.eval()
    return out


@pytest.mark.parametrize("kind", ["gpt2", "llama", "bert"])
def test_imported_models(imported, kind):
    m = imported[kind]
    t = tokens(B=2, T=9, vocab=min(150, imported[kind].config.vocab_size))
    metric = iv.loss(t)
    sw = iv.sweep(m, t, "head", metric)
    want = by_hand(m, (t,), [("blocks.1.attn.hook_z", zero_head(3))], metric)
    assert sw.values[1, 3] == pytest.approx(want, abs=TOL)
    with torch.no_grad():
        assert torch.equal(at.logit_lens(m, t)[-1], m(t))
    if kind == "bert":
        assert "transforms" in at.attribution_refusal(m) or "post-norm" in at.attribution_refusal(m)
        return
    d = at.direct_logit_attribution(m, t, 11, 12)
    assert sum(d.parts.values()) == pytest.approx(d.total, abs=1e-4)
    assert at.circuits(m, 0, 1, at.top_tokens(m, t[:1], k=12))["ov"].shape == (12, 12)
