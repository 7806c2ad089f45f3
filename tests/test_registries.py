"""The model's registries (positional schemes, norms, activations) and the hook-name builder: every
capability is asked of the class, a new entry is one class + one line, names come from one place."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tfviz import ModelConfig, Transformer, record
from tfviz.model import hook_name, layer_template, parse_hook_name, shape_of, stack_layers
from tfviz.model.activations import ACTIVATIONS
from tfviz.model.decoding import check_generation, sample_next
from tfviz.model.norms import NORMS
from tfviz.model.positional import SCHEMES, Learned, Positional

ARCHS = ("decoder", "encoder", "encoder-decoder")


def model(**kw) -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelConfig(**{**dict(vocab_size=20, d_model=16, n_heads=2, n_layers=2,
                                              max_len=12), **kw})).eval()


def inputs(arch: str, n: int = 6):
    x = torch.arange(1, n + 1)[None]
    return (x, x[:, :4]) if arch == "encoder-decoder" else (x,)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("pos", list(SCHEMES))
def test_a_scheme_adds_exactly_the_hook_points_its_class_names(arch, pos):
    m = model(arch=arch, pos=pos)
    scheme, names = SCHEMES[pos], set(m.hook_points())
    for stack in (["encoder", "decoder"] if arch == "encoder-decoder" else [""]):
        for hook in ("hook_pos_embed",):
            assert (hook_name(None, hook, stack) in names) == (hook in scheme.stack_hooks())
        for hook in ("hook_rot_q", "hook_rot_k", "hook_pos_bias"):
            assert (hook_name(0, f"attn.{hook}", stack) in names) == (hook in scheme.attention_hooks())
            assert hook_name(0, f"cross_attn.{hook}", stack) not in names  # never on cross-attention
    assert scheme.embeds == bool(scheme.stack_hooks())
    assert set(scheme.formula_tables) <= set(scheme.table_names)
    from tfviz import positional_tables
    got = {k.split(".")[-1] for k in positional_tables(m, 8)}
    assert got == set(scheme.table_names)


@pytest.mark.parametrize("pos", list(SCHEMES))
def test_length_limits_come_from_the_scheme(pos):
    cfg = ModelConfig(vocab_size=20, d_model=16, n_heads=2, max_len=8, pos=pos)
    m = model(pos=pos, max_len=8)
    x = torch.ones(1, 9, dtype=torch.long)
    if cfg.max_positions is None:
        assert cfg.scheme.length_limit(cfg) == ""
        assert m(x).shape == (1, 9, 20)
        check_generation(cfg, 8, 100, 0.0, None, has_src=False)
    else:
        assert cfg.max_positions == 8
        with pytest.raises(ValueError, match="cannot extrapolate") as e:
            m(x)
        assert cfg.scheme.length_limit(cfg) in str(e.value)
        with pytest.raises(ValueError, match="ask for at most 3 new tokens"):
            check_generation(cfg, 5, 4, 0.0, None, has_src=False)


@pytest.mark.parametrize("pos", [p for p, s in SCHEMES.items() if s.adds_bias])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("offset", [0, 5])
def test_a_score_mod_adds_the_same_bias_as_score_bias(pos, causal, offset):
    cfg = ModelConfig(vocab_size=20, d_model=16, n_heads=4, pos=pos)
    torch.manual_seed(0)
    scheme = SCHEMES[pos](cfg, causal)
    assert scheme.score_mod_ok
    q, k = torch.arange(offset, offset + 7), torch.arange(offset + 7)
    want = scheme.score_bias(q, k)  # [head, q_pos, k_pos]
    h = torch.arange(4)[:, None, None]
    qi, ki = torch.arange(7)[None, :, None], k[None, None, :]
    score = torch.randn(4, 7, len(k))
    got = scheme.score_mod(q_offset=offset)(score, 0, h, qi, ki)
    torch.testing.assert_close(got - score, want.to(score.dtype))


def test_a_new_scheme_is_one_class_and_one_line(monkeypatch):
    class Doubled(Learned):
        """A learned table counted twice (a stand-in for any new scheme)."""
        name, label = "learned-x2", "Learned ×2"

        def embed(self, positions):
            return 2 * super().embed(positions)

    monkeypatch.setitem(SCHEMES, Doubled.name, Doubled)
    m = model(pos="learned-x2")
    rec = record(m, torch.arange(1, 7)[None], names=["hook_pos_embed"])
    torch.testing.assert_close(rec["hook_pos_embed"][0], 2 * m.stack.pos.table.weight[:6].detach())
    assert ModelConfig(pos="learned-x2").max_positions == 256
    with pytest.raises(ValueError, match="pos='nope' is not one of 'none', 'sinusoidal'"):
        ModelConfig(pos="nope")


@pytest.mark.parametrize("norm", list(NORMS))
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_every_registered_norm_and_activation_builds_and_runs(norm, activation):
    m = model(normalization=norm, activation=activation)
    assert torch.isfinite(m(torch.arange(1, 7)[None])).all()
    for bad, field in (("nope", "normalization"), ("nope", "activation")):
        with pytest.raises(ValueError, match=f"{field}='nope' is not one of"):
            ModelConfig(**{field: bad})


def test_mlp_width_follows_the_activation():
    for name, cls in ACTIVATIONS.items():
        m = model(activation=name, d_ff=24)
        assert m.stack.blocks[0].mlp.W_in.out_features == (48 if cls.gated else 24)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("pos", ["rope", "alibi", "learned"])
def test_hook_names_are_built_and_read_in_one_place(arch, pos):
    m = model(arch=arch, pos=pos)
    for name in m.hook_points():
        h = parse_hook_name(name)
        assert hook_name(h.layer, h.hook, h.stack) == name
        assert h.template.format(l=h.layer) == name
        assert shape_of(name).startswith("[")
        assert h.attention in (None, "attn", "cross_attn")
    assert hook_name(1, "cross_attn.hook_pattern", "decoder") == "decoder.blocks.1.cross_attn.hook_pattern"
    assert layer_template("attn.hook_z") == "blocks.{l}.attn.hook_z"
    with pytest.raises(ValueError, match="not a hook point name"):
        parse_hook_name("blocks.0.attn.W_q")


def test_stack_layers_stacks_tensors_and_arrays():
    t = {f"blocks.{l}.attn.hook_pattern": torch.full((2, 3), float(l)) for l in range(3)}
    a = {k: v.numpy() for k, v in t.items()}
    tpl = layer_template("attn.hook_pattern")
    assert isinstance(stack_layers(t, tpl), torch.Tensor) and stack_layers(t, tpl).shape == (3, 2, 3)
    np.testing.assert_array_equal(stack_layers(a, tpl)[:, 0, 0], [0, 1, 2])
    with pytest.raises(KeyError):
        stack_layers(a, layer_template("attn.hook_z"))


def test_one_validation_and_one_sampler_for_generation():
    cfg = ModelConfig(vocab_size=20, d_model=16, n_heads=2)
    for bad, match in (((1, -1, 0.0, None, False), "max_new_tokens=-1"),
                       ((1, 2, -1.0, None, False), "temperature"),
                       ((1, 2, 0.0, 0, False), "top_k=0"),
                       ((1, 2, 0.0, None, True), "only an encoder-decoder")):
        with pytest.raises(ValueError, match=match):
            check_generation(cfg, *bad)
    check_generation(cfg, 1, 0, 0.0, None, False)  # zero new tokens: the prompt comes back
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 1.0]])
    assert sample_next(logits).tolist() == [1, 0]
    g = torch.Generator().manual_seed(0)
    assert sample_next(logits, temperature=5.0, top_k=1, generator=g).tolist() == [1, 0]
    assert isinstance(Positional.length_limit(cfg), str)
