"""Behaviour of the whole model: paths agree, masks hold, caches are exact."""
import itertools

import pytest
import torch

import tfviz
from tfviz import ModelConfig, Transformer, record

ARCHS = ("decoder", "encoder", "encoder-decoder")
POS = ("none", "sinusoidal", "learned", "rope", "alibi", "t5")
HEADS = {"mha": 4, "gqa": 2, "mqa": 1}
MASKS = ("plain", "padding", "window")
V = 23


def make(arch="decoder", pos="learned", kv=4, seed=0, **kw):
    torch.manual_seed(seed)
    base = dict(arch=arch, pos=pos, vocab_size=V, d_model=32, n_heads=4, n_kv_heads=kv,
                n_layers=2, d_ff=48, max_len=64)
    base.update(kw)
    return Transformer(ModelConfig(**base)).eval()


def inputs(model, batch=3, T=12, S=10, seed=1, pads=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(1, V, (batch, T), generator=g)
    if pads:  # left-pad the second sequence: the padding mask really has to work
        x[1, :4] = 0
    if model.config.arch == "encoder-decoder":
        src = torch.randint(1, V, (batch, S), generator=g)
        if pads:
            src[2, -3:] = 0
        return (src, x)
    return (x,)


@pytest.mark.parametrize("arch,pos,heads,mask", list(itertools.product(ARCHS, POS, HEADS, MASKS)))
def test_fast_path_equals_recording_path(arch, pos, heads, mask):
    model = make(arch, pos, HEADS[heads], window=3 if mask == "window" else None)
    ins = inputs(model, pads=mask == "padding")
    fast = model(*ins)
    rec = record(model, *ins, names=lambda n: n.endswith(("hook_pattern", "hook_attn_scores")))
    assert len(rec) > 0
    torch.testing.assert_close(rec.output, fast, atol=2e-5, rtol=1e-5)
    model.set_attention_impl("explicit")
    torch.testing.assert_close(model(*ins), fast, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ["decoder", "encoder-decoder"])
@pytest.mark.parametrize("pos", POS)
def test_causality_future_tokens_never_change_the_past(arch, pos):
    model = make(arch, pos, kv=2)
    ins = inputs(model, batch=2, T=10)
    base = model(*ins)
    for t in (0, 4, 8):
        changed = list(ins)
        x = changed[-1].clone()
        x[:, t + 1:] = (x[:, t + 1:] + 5) % (V - 1) + 1
        changed[-1] = x
        out = model(*changed)
        torch.testing.assert_close(out[:, :t + 1], base[:, :t + 1], atol=1e-6, rtol=0)
        assert not torch.allclose(out[:, t + 1:], base[:, t + 1:])


@pytest.mark.parametrize("causal", [True, False])
def test_sliding_window_zero_weight_and_receptive_field(causal):
    w, L, T = 2, 2, 16
    model = make("decoder" if causal else "encoder", "rope", kv=2, window=w, n_layers=L)
    x = inputs(model, batch=1, T=T)[0]
    rec = record(model, x, names=lambda n: n.endswith("hook_pattern"))
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    outside = ~(((i - j) >= 0) & ((i - j) <= w)) if causal else (i - j).abs() > w
    for l in range(L):
        p = rec[f"blocks.{l}.attn.hook_pattern"]
        assert torch.all(p[..., outside] == 0), "keys outside the window must get exactly zero weight"
    # Changing a token outside query q's L-layer receptive field changes nothing at q.
    q = 12
    far = [j for j in range(T) if (q - j > L * w) or (not causal and j - q > L * w)]
    assert far
    y = x.clone()
    y[0, far] = (y[0, far] + 3) % (V - 1) + 1
    torch.testing.assert_close(model(y)[0, q], model(x)[0, q], atol=1e-6, rtol=0)
    near = q - 1  # and a token inside it does change the output
    y = x.clone()
    y[0, near] = y[0, near] % (V - 1) + 1
    assert not torch.allclose(model(y)[0, q], model(x)[0, q])


@pytest.mark.parametrize("arch", ARCHS)
def test_padding_gets_zero_weight_and_its_contents_do_not_matter(arch):
    model = make(arch, "alibi", kv=2)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(1, V, (2, 9), generator=g)
    pad = torch.zeros(2, 9, dtype=torch.bool)
    pad[0, :3] = True  # left padding in the first sequence
    if arch == "encoder-decoder":
        src = torch.randint(1, V, (2, 7), generator=g)
        src_pad = torch.zeros(2, 7, dtype=torch.bool)
        src_pad[1, -2:] = True
        run = lambda s: model(s, x, padding_mask=src_pad)
        base = run(src)
        src2 = src.clone()
        src2[src_pad] = torch.randint(1, V, (int(src_pad.sum()),), generator=g)
        torch.testing.assert_close(run(src2), base, atol=1e-6, rtol=0)
        rec = record(model, src, x, padding_mask=src_pad,
                     names=["encoder.blocks.0.attn.hook_pattern", "decoder.blocks.0.cross_attn.hook_pattern"])
        assert torch.all(rec["decoder.blocks.0.cross_attn.hook_pattern"][1, :, :, -2:] == 0)
        enc = rec["encoder.blocks.0.attn.hook_pattern"][1]
        assert torch.all(enc[:, :5, -2:] == 0)  # real queries never look at pads
        return
    base = model(x, padding_mask=pad)
    x2 = x.clone()
    x2[pad] = torch.randint(1, V, (int(pad.sum()),), generator=g)
    out = model(x2, padding_mask=pad)
    torch.testing.assert_close(out[~pad], base[~pad], atol=1e-6, rtol=0)
    rec = record(model, x, padding_mask=pad, names=lambda n: n.endswith("hook_pattern"))
    p = rec["blocks.1.attn.hook_pattern"][0]  # [head, q_pos, k_pos]
    assert torch.all(p[:, 3:, :3] == 0)


def test_pad_id_is_used_when_no_mask_is_given():
    model = make("encoder", "learned", pad_id=0)
    x = torch.randint(1, V, (1, 8))
    x[0, -3:] = 0
    rec = record(model, x, names=["blocks.0.attn.hook_pattern"])
    assert torch.all(rec["blocks.0.attn.hook_pattern"][0, :, :5, -3:] == 0)


def test_encoder_without_positions_is_permutation_equivariant():
    model = make("encoder", "none")
    x = inputs(model, batch=2, T=11)[0]
    perm = torch.randperm(11, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(model(x[:, perm]), model(x)[:, perm], atol=1e-5, rtol=0)
    # ...and with positions it is not
    model = make("encoder", "sinusoidal")
    assert not torch.allclose(model(x[:, perm]), model(x)[:, perm], atol=1e-4)


@pytest.mark.parametrize("arch", ["decoder", "encoder-decoder"])
@pytest.mark.parametrize("pos", POS)
@pytest.mark.parametrize("kv", [4, 2, 1])
def test_kv_cache_steps_equal_recomputing_the_whole_sequence(arch, pos, kv):
    model = make(arch, pos, kv)
    ins = inputs(model, batch=2, T=9)
    full = model(*ins)
    tgt = ins[-1]
    cache = model.new_cache()
    pieces = [model(*ins[:-1], tgt[:, :4], cache=cache)]  # a prompt, then one token at a time
    for t in range(4, 9):
        pieces.append(model(*ins[:-1], tgt[:, t:t + 1], cache=cache))
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=2e-5, rtol=1e-5)
    assert cache.length == 9


def test_generate_with_and_without_cache_agree():
    for arch in ("decoder", "encoder-decoder"):
        model = make(arch, "rope", 2)
        ins = inputs(model, batch=2, T=3)
        src = ins[0] if arch == "encoder-decoder" else None
        a = model.generate(ins[-1], 8, src=src, use_cache=True)
        b = model.generate(ins[-1], 8, src=src, use_cache=False)
        assert a.shape == (2, 11)
        assert torch.equal(a, b)
        s1 = model.generate(ins[-1], 6, src=src, temperature=1.0, top_k=3,
                            generator=torch.Generator().manual_seed(5))
        s2 = model.generate(ins[-1], 6, src=src, temperature=1.0, top_k=3,
                            generator=torch.Generator().manual_seed(5))
        assert torch.equal(s1, s2)


def _left_padded(prompts, pad):
    n = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (n - len(p)) + p for p in prompts])
    return ids, torch.tensor([[True] * (n - len(p)) + [False] * len(p) for p in prompts])


@pytest.mark.parametrize("kw", [dict(pos="learned"), dict(pos="sinusoidal"), dict(pos="rope"),
                                dict(pos="rope", rope_pairs="half", n_kv_heads=2), dict(pos="alibi"),
                                dict(pos="t5"), dict(pos="rope", window=3), dict(pos="none")])
def test_left_padded_batch_generates_each_row_as_alone(kw):
    """generate(padding_mask=...): a row of a left-padded batch never attends to its pads and
    counts its positions from its own first token, so it gives what it gives alone (greedy,
    token for token), with and without the cache."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=40, d_model=32, n_heads=4, n_layers=2, max_len=32,
                                    pad_id=None, **kw)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    prompts = [[5, 9, 3, 7, 2, 8, 1], [4, 6], [11, 12, 13, 14]]
    ids, mask = _left_padded(prompts, pad=0)
    out = model.generate(ids, 8, padding_mask=mask)
    assert torch.equal(out, model.generate(ids, 8, padding_mask=mask, use_cache=False))
    for row, prompt in zip(out, prompts):
        alone = model.generate(torch.tensor([prompt]), 8)[0]
        assert row[ids.shape[1] - len(prompt):].tolist() == alone.tolist()


def test_left_padding_by_pad_id_generates_each_row_as_alone():
    """tfviz's own models mask their pad_id: prompts that open with it are a left-padded batch."""
    model = make("decoder", "learned", 2)  # pad_id=0
    prompts = [[5, 9, 3, 7, 2], [4, 6], [11, 12, 13]]
    ids, _ = _left_padded(prompts, pad=0)
    for use_cache in (True, False):
        out = model.generate(ids, 6, use_cache=use_cache)
        for row, prompt in zip(out, prompts):
            assert row[ids.shape[1] - len(prompt):].tolist() == model.generate(torch.tensor([prompt]), 6)[0].tolist()
    from tfviz.generation import generate_with_attention  # the recorded loop, too
    assert generate_with_attention(model, [0, 0, 4, 6], 6).ids[2:] == model.generate(torch.tensor([[4, 6]]), 6)[0].tolist()


def test_padding_mask_in_generate_is_checked():
    model = make("decoder", "learned", 1)
    ids, mask = _left_padded([[5, 6, 7], [8]], pad=0)
    with pytest.raises(ValueError, match="pad the prompts on the left"):
        model.generate(ids, 2, padding_mask=mask.flip(1))
    with pytest.raises(ValueError, match="shaped like the prompt"):
        model.generate(ids, 2, padding_mask=mask[:, 1:])
    with pytest.raises(ValueError, match="all padding"):
        model.generate(ids, 2, padding_mask=torch.ones_like(mask))
    enc_dec = make("encoder-decoder", "learned", 1)
    with pytest.raises(ValueError, match="for decoder-only transformers"):
        enc_dec.generate(ids, 2, src=ids, padding_mask=mask)


def test_top_k_one_is_greedy():
    model = make("decoder", "alibi", 1)
    x = inputs(model, batch=2, T=3)[0]
    greedy = model.generate(x, 5)
    sampled = model.generate(x, 5, temperature=0.7, top_k=1, generator=torch.Generator().manual_seed(0))
    assert torch.equal(greedy, sampled)


def test_cache_size_mha_gqa_mqa():
    sizes = {}
    for name, kv in HEADS.items():
        model = make("decoder", "rope", kv, n_layers=3)
        cache = model.new_cache()
        model(torch.randint(1, V, (2, 10)), cache=cache)
        sizes[name] = cache.nbytes
        assert cache.nbytes == 2 * 3 * kv * 8 * 10 * 2 * 4  # 2·L·n_kv·d_head·T·B·bytes
    assert sizes["mha"] == 4 * sizes["mqa"] == 2 * sizes["gqa"]


def test_gqa_equals_mha_with_shared_key_value_heads():
    gqa = make("decoder", "rope", kv=2, seed=4)
    mha = make("decoder", "rope", kv=4, seed=5)
    # Query head h reads kv head h // 2: give the MHA model kv heads [0, 0, 1, 1].
    sd = gqa.state_dict()
    new = {}
    d, dh = 32, 8
    for k, v in sd.items():
        if k.endswith("W_qkv.weight") or k.endswith("W_qkv.bias"):
            q, kk, vv = v.split([d, 2 * dh, 2 * dh], dim=0)
            rep = lambda t: t.unflatten(0, (2, dh)).repeat_interleave(2, dim=0).flatten(0, 1)
            v = torch.cat([q, rep(kk), rep(vv)])
        new[k] = v
    mha.load_state_dict(new)
    x = torch.randint(1, V, (2, 7))
    torch.testing.assert_close(mha(x), gqa(x), atol=1e-5, rtol=0)
    # and n_kv_heads = n_heads is exactly MHA (the default)
    assert ModelConfig(n_heads=4, d_model=32).n_kv_heads == 4


def test_positions_beyond_max_len():
    for pos in ("sinusoidal", "rope", "alibi", "t5", "none"):
        model = make("decoder", pos, max_len=8)
        assert model(torch.randint(1, V, (1, 20))).shape == (1, 20, V)
    model = make("decoder", "learned", max_len=8)
    with pytest.raises(ValueError, match="cannot extrapolate"):
        model(torch.randint(1, V, (1, 9)))


def test_swiglu_and_attention_only_models_run():
    for kw in (dict(activation="swiglu"), dict(attn_only=True), dict(norm="post"), dict(tie_embeddings=True)):
        model = make("decoder", "rope", 2, **kw)
        x = torch.randint(1, V, (2, 6))
        out = model(x)
        assert out.shape == (2, 6, V) and torch.isfinite(out).all()
        torch.testing.assert_close(record(model, x).output, out, atol=2e-5, rtol=0)


@pytest.mark.parametrize("bad,match", [
    (lambda m: m(torch.tensor([[1, 2, V]])), "outside the vocabulary"),
    (lambda m: m(torch.tensor([[-1, 2]])), "outside the vocabulary"),
    (lambda m: m(torch.zeros(1, 0, dtype=torch.long)), "empty"),
    (lambda m: m(torch.zeros(0, 3, dtype=torch.long)), "empty"),
    (lambda m: m(torch.tensor([1, 2, 3])), r"\[batch, pos\]"),
    (lambda m: m(torch.rand(1, 3)), "integer token ids"),
    (lambda m: m([[1, 2]]), "torch tensor"),
    (lambda m: m(torch.ones(1, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.long)), "one input"),
    (lambda m: m.generate(torch.ones(1, 3, dtype=torch.long), -1), "max_new_tokens"),
    (lambda m: m.generate(torch.ones(1, 3, dtype=torch.long), 2, temperature=-1.0), "temperature"),
    (lambda m: m.generate(torch.ones(1, 60, dtype=torch.long), 10), "learned position table"),
])
def test_bad_input_is_a_clear_value_error(bad, match):
    with pytest.raises(ValueError, match=match):
        bad(make())


def test_encoder_decoder_needs_two_inputs():
    model = make("encoder-decoder")
    with pytest.raises(ValueError, match=r"model\(src, tgt\)"):
        model(torch.ones(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="src="):
        model.generate(torch.ones(1, 1, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="all padding"):
        model(torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 2, dtype=torch.long))


def test_encoder_does_not_generate_or_cache():
    model = make("encoder")
    with pytest.raises(ValueError, match="encoder cannot generate"):
        model.generate(torch.ones(1, 3, dtype=torch.long), 2)
    with pytest.raises(ValueError, match="nothing to cache"):
        model(torch.ones(1, 3, dtype=torch.long), cache=model.new_cache())


def test_dropout_training_mode_runs_both_paths():
    model = make("decoder", "learned", dropout=0.1).train()
    x = torch.randint(1, V, (2, 6))
    model(x).sum().backward()
    rec = record(model, x, names=["blocks.0.attn.hook_pattern"])
    assert model.training  # record restores the mode it found
    assert torch.allclose(rec["blocks.0.attn.hook_pattern"].sum(-1), torch.ones(2, 4, 6))


@pytest.mark.parametrize("pos", ["alibi", "t5"])
def test_windowed_bias_model_never_builds_the_full_bias(pos):
    """The banded window kernel asks the positional scheme for the band only: O(n·w), not n²."""
    model = make("decoder", pos, kv=2, window=4, max_len=256)
    stack = model.stack
    sizes = []
    original = stack.pos.score_bias

    def spy(q_pos, k_pos):
        out = original(q_pos, k_pos)
        sizes.append(out.numel())
        return out

    stack.pos.score_bias = spy
    x = torch.randint(1, V, (1, 200))
    fast = model(x)
    assert sizes and max(sizes) < 4 * 200 * 200 / 4, sizes  # never the full [head, n, n]
    sizes.clear()
    torch.testing.assert_close(record(model, x, names=["blocks.0.attn.hook_pattern"]).output, fast,
                               atol=2e-5, rtol=1e-5)
    assert max(sizes) == 4 * 200 * 200  # the recording path does build it, once per forward
