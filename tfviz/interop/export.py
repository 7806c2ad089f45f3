"""Out to the ecosystem: a GPT-2-shaped tfviz model as transformers' ``GPT2LMHeadModel``, so a
model trained in tfviz opens in transformers, TransformerLens or bertviz.

    hf = tfviz.to_hf(model)            # same logits (float32), eval mode
    hf.save_pretrained("models/mine")  # and tfviz.from_pretrained("models/mine") gives it back

GPT-2 can express: a decoder with learned positions, pre-norm LayerNorm, exact or tanh GELU,
multi-head attention (n_kv_heads = n_heads), biases on every linear layer, an MLP in every block,
a tied or untied head. Anything else is named in the error. transformers does not mask padding by
token id: pass ``attention_mask`` there where tfviz used ``pad_id``.
"""
from __future__ import annotations

import torch

from ..model import Transformer

GPT2_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_new"}  # tfviz -> GPT2Config.activation_function


def gpt2_problems(cfg) -> list[str]:
    """What keeps a tfviz config from being a GPT-2 (empty: it is one)."""
    checks = [
        (cfg.arch == "decoder", f"arch={cfg.arch!r} (GPT-2 is a decoder)"),
        (cfg.pos == "learned", f"pos={cfg.pos!r} (GPT-2 has learned positions)"),
        (cfg.norm == "pre", f"norm={cfg.norm!r} (GPT-2 is pre-norm)"),
        (cfg.normalization == "layernorm", f"normalization={cfg.normalization!r} (GPT-2 uses LayerNorm)"),
        (cfg.activation in GPT2_ACTIVATIONS, f"activation={cfg.activation!r} (GPT-2: gelu or gelu_new)"),
        (cfg.n_kv_heads == cfg.n_heads, f"n_kv_heads={cfg.n_kv_heads} (GPT-2 has one key/value head per head)"),
        (cfg.bias, "bias=False (GPT-2 has biases in every linear layer)"),
        (not cfg.attn_only, "attn_only=True (every GPT-2 block has an MLP)"),
        (cfg.window is None and not cfg.global_tokens, "a sliding window (GPT-2 attends to every earlier token)"),
        (cfg.head == "linear", f"head={cfg.head!r} (GPT-2's head is one linear map)"),
        (not cfg.embed_norm, "embed_norm=True (GPT-2 has no norm on the embeddings)"),
        (not cfg.n_token_types, "token types (GPT-2 has none)"),
    ]
    return [why for ok, why in checks if not ok]


def to_hf(model: Transformer):
    """A ``transformers.GPT2LMHeadModel`` holding ``model``'s weights (copies), in eval mode.
    ValueError naming every option GPT-2 cannot express; ImportError if transformers is missing."""
    if not isinstance(model, Transformer):
        raise ValueError(f"to_hf needs a tfviz.Transformer, not {type(model).__name__}")
    cfg = model.config
    problems = gpt2_problems(cfg)
    if problems:
        raise ValueError("this model cannot be written as GPT-2: " + "; ".join(problems))
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        raise ImportError("to_hf needs the transformers package (pip install 'transformers>=5,<6')") from None
    hf_cfg = GPT2Config(
        vocab_size=cfg.vocab_size, n_positions=cfg.max_len, n_embd=cfg.d_model, n_layer=cfg.n_layers,
        n_head=cfg.n_heads, n_inner=cfg.d_ff, activation_function=GPT2_ACTIVATIONS[cfg.activation],
        layer_norm_epsilon=cfg.layer_norm_eps, resid_pdrop=cfg.dropout, embd_pdrop=cfg.dropout,
        attn_pdrop=cfg.dropout, tie_word_embeddings=cfg.tie_embeddings, bos_token_id=None,
        eos_token_id=None, pad_token_id=None)
    src = {k: v.detach().to("cpu", torch.float32) for k, v in model.state_dict().items()}
    sd = {"transformer.wte.weight": src["embed.weight"], "transformer.wpe.weight": src["stack.pos.table.weight"],
          "transformer.ln_f.weight": src["stack.ln_final.weight"], "transformer.ln_f.bias": src["stack.ln_final.bias"],
          "lm_head.weight": src["unembed.weight"]}
    conv1d = {"attn.c_attn": "attn.W_qkv", "attn.c_proj": "attn.W_o", "mlp.c_fc": "mlp.W_in",
              "mlp.c_proj": "mlp.W_out"}  # GPT-2's Conv1D stores weights as [in, out]
    for i in range(cfg.n_layers):
        h, t = f"transformer.h.{i}.", f"stack.blocks.{i}."
        for ln_hf, ln_ours in (("ln_1", "ln1"), ("ln_2", "ln2")):
            sd[f"{h}{ln_hf}.weight"], sd[f"{h}{ln_hf}.bias"] = src[f"{t}{ln_ours}.weight"], src[f"{t}{ln_ours}.bias"]
        for hf_name, ours in conv1d.items():
            sd[f"{h}{hf_name}.weight"] = src[f"{t}{ours}.weight"].T.contiguous()
            sd[f"{h}{hf_name}.bias"] = src[f"{t}{ours}.bias"]
    hf = GPT2LMHeadModel(hf_cfg)
    missing, unexpected = hf.load_state_dict(sd, strict=False)
    missing = [k for k in missing if not (cfg.tie_embeddings and k == "lm_head.weight")]
    if missing or unexpected:  # this transformers names GPT-2's parts differently
        raise ValueError(f"GPT2LMHeadModel did not take the weights: missing {missing[:4]}, "
                         f"unexpected {unexpected[:4]}")
    return hf.eval()
