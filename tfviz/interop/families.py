"""Model families, one small adapter each, behind one registry (``ADAPTERS``; ``MODEL_TYPES`` maps
a config.json ``model_type`` to its family). An adapter knows two things about its family:

    model_config(hf, weights)  config.json (a dict) -> ModelConfig, refusing what tfviz cannot
                               compute exactly (rope scaling, a partial rotary, ...), with notes
    state_dict(cfg, weights)   Hugging Face tensor names -> tfviz's state_dict names

and, to write a tfviz model out (``tfviz.interop.export`` runs ``state_dict`` backwards, so
the names live in one place): ``exports_as`` (the transformers class), ``problems(cfg)`` (why a
config is not this family), ``hf_config(cfg)`` (config.json's settings), ``hf_shapes(cfg)`` (the
tensors a folder holds, so a folder is written without transformers), ``canonical`` (the same
function in the family's layout, e.g. RoPE pairs permuted, an attention-only model's MLPs as
zeros) and ``shape`` (the settings that make a model this family: the Train page's choice).

Every tensor of the folder must be used or named in ``ignored_for(cfg)`` (buffers, poolers, heads
tfviz does not show; a tied head's copies only when tied, checked equal), so a weight that a
mapping forgot is an error, never a silent difference.
Foreign conventions stay here: GPT-2's Conv1D weights are [in, out] (transposed into nn.Linear's
[out, in]); BERT's and Llama's separate q/k/v become one W_qkv = [q; k; v]; Llama's gate/up
become W_in = [gate; up] (tfviz's SwiGLU reads gate first); Llama's RoPE pairs dims (i, i + d/2)
(``rope_pairs="half"``); GPT-2 uses the tanh GELU ("gelu_new"); imported models mask no token
by id (``pad_id=None``: GPT-2's token 0 is "!").

To add a family: an ``Adapter`` subclass here and its class in ``ADAPTERS``; new conventions become
registry entries in ``tfviz.model`` (a norm, an activation, a head, a RoPE pairing).
"""
from __future__ import annotations

import re
from collections.abc import Iterator

import torch

from ..model import ModelConfig
from ..model.positional import ROTARY_PAIRS
from .folder import ModelFolderError, Weights


class Adapter:
    """The interface (see the module docstring)."""

    name = ""
    label = ""
    model_types: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()   # what config.json's "architectures" may say
    prefixes: tuple[str, ...] = ("",)     # where the base model sits in a task model's names
    anchor = ""                           # a tensor every checkpoint of the family has (unprefixed)
    ignored: tuple[str, ...] = ()         # regexes of tensors tfviz has no use for (on export: left
                                          # as transformers initialised them)
    tied_copies: tuple[str, ...] = ()     # ... with a tied head: copies of the embeddings (equal)

    @classmethod
    def model_config(cls, hf: dict, w: Weights) -> tuple[ModelConfig, list[str]]:
        raise NotImplementedError

    # ------------------------------------------------------------ out (tfviz.interop.export)
    exports_as = ""                       # the transformers class a tfviz model is written as

    @classmethod
    def problems(cls, cfg: ModelConfig) -> list[str]:
        """What keeps a tfviz config from being this family (empty: it is one)."""
        return [f"tfviz does not write {cls.label}"]

    @classmethod
    def hf_config(cls, cfg: ModelConfig) -> dict:
        """config.json's settings (with "model_type") for a config without ``problems``."""
        raise NotImplementedError

    @classmethod
    def canonical(cls, cfg: ModelConfig, state: dict) -> tuple[ModelConfig, dict]:
        """The same function in the family's own layout (e.g. RoPE pairs permuted): the config
        and state dict that ``model_config`` / ``state_dict`` read back from the exported folder."""
        return cfg, state

    @classmethod
    def hf_config_file(cls, cfg: ModelConfig) -> dict:
        """config.json as a folder of this family holds it (``hf_config`` plus the class, the dtype
        and the settings transformers would otherwise take from its defaults)."""
        return {"architectures": [cls.exports_as], **cls.hf_config(cfg), "dtype": "float32"}

    @classmethod
    def hf_shapes(cls, cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
        """Every tensor a folder of this family holds for a config without ``problems`` (the
        names save_pretrained writes: a tied head's copy left out) -> its shape."""
        raise NotImplementedError

    @classmethod
    def copies(cls, cfg: ModelConfig) -> dict[str, str]:
        """Tensors a folder holds that the family's model never reads, written equal to another
        (copy -> source) so that transformers finds every tensor it expects."""
        return {}

    # ------------------------------------------------------------ the Train page's choice
    shape: dict = {}      # ModelConfig settings that make a model this family (empty: none offered)
    shape_label = ""      # "GPT-2-shaped"

    @classmethod
    def shaped(cls, fields: dict) -> dict:
        """``fields`` (ModelConfig fields, e.g. a form's) with ``shape`` applied: a config built
        from the result has no ``problems`` for this family (tests check it for every preset)."""
        return {**fields, **cls.shape}

    @staticmethod
    def with_zero_mlps(cfg: ModelConfig, state: dict) -> tuple[ModelConfig, dict]:
        """An attention-only model as the same model with an MLP in every block whose weights and
        biases are all zero: each MLP then adds exactly 0 to the residual stream (W_out = 0 and a
        zero bias give 0 for any finite input; x + 0 = x), so the function is unchanged; the norm
        before it (weight 1, bias 0) only feeds that MLP."""
        if not cfg.attn_only:
            return cfg, state
        from ..model.families import tensor_shapes

        full = cfg.replace(attn_only=False)
        state = dict(state)
        for name, (_, shape) in tensor_shapes(full).items():
            if name not in state:
                fill = torch.ones if re.search(r"\.ln2\.weight$", name) else torch.zeros
                state[name] = fill(shape)
        return full, state

    @staticmethod
    def check(checks: list[tuple[bool, str]]) -> list[str]:
        return [why for ok, why in checks if not ok]

    @classmethod
    def ignored_for(cls, cfg: ModelConfig) -> tuple[str, ...]:
        """The tensors this model may leave unread: ``ignored``, plus what a tied head makes a copy
        (``tied_copies``). An untied head must read its own tensors, so none of them is hidden."""
        return cls.ignored + (cls.tied_copies if cfg.tie_embeddings else ())

    @classmethod
    def state_dict(cls, cfg: ModelConfig, w: Weights) -> Iterator[tuple[str, torch.Tensor]]:
        raise NotImplementedError

    # ---------------------------------------------------------------- shared helpers
    @classmethod
    def prefix(cls, w: Weights) -> str:
        for p in cls.prefixes:
            if p + cls.anchor in w:
                return p
        raise ModelFolderError(f"{w.folder.path}: the weights have no {cls.anchor!r} (with any of the "
                               f"prefixes {cls.prefixes}): not a {cls.label} checkpoint")

    @classmethod
    def refuse(cls, option: str, why: str) -> ModelFolderError:
        return ModelFolderError(f"{cls.label}: {option} is not supported ({why})")

    @classmethod
    def check_architectures(cls, hf: dict) -> None:
        archs = hf.get("architectures") or []
        if not isinstance(archs, list):  # a string would be refused letter by letter
            raise ModelFolderError(f'config.json: "architectures" must be a list of class names, e.g. '
                                   f'["{cls.architectures[0]}"], not {type(archs).__name__} {archs!r:.60}')
        odd = [a for a in archs if a not in cls.architectures]
        if odd:
            raise cls.refuse(f"architectures {odd}", f"tfviz reads {', '.join(cls.architectures)}")

    @staticmethod
    def number(hf: dict, key: str, default=None, kind=int):
        value = hf.get(key, default)
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or (
                kind is int and int(value) != value):
            raise ModelFolderError(f"config.json: {key}={value!r} must be a number")
        return kind(value)

    @classmethod
    def tied(cls, hf: dict, w: Weights, default: bool, notes: list[str]) -> bool:
        """Whether the logits read the token embeddings back out: config.json's
        ``tie_word_embeddings`` (``default`` when absent), or a folder without ``lm_head`` (noted);
        not when the folder holds an lm_head that differs from the embeddings (``untie``)."""
        tie = bool(hf.get("tie_word_embeddings", default))
        if not tie and "lm_head.weight" not in w:
            tie = True
            notes.append("the folder has no lm_head: logits read the token embeddings back out (tied)")
        return tie and not cls.untie(w, "lm_head.weight", cls.prefix(w) + cls.anchor, notes)

    @staticmethod
    def untie(w: Weights, copy: str, source: str, notes: list[str]) -> bool:
        """True when config.json says tied but the folder holds ``copy`` with other values than
        ``source``: transformers 5 then keeps both as stored (``PreTrainedModel.tie_weights``),
        so tfviz reads ``copy`` too (noted). False when there are no values to compare (discovery
        reads config.json alone; an export traces names)."""
        if getattr(w, "traced", False) or not hasattr(w, "get") or copy not in w or source not in w:
            return False
        if torch.equal(w.get(copy), w.get(source)):
            return False
        notes.append(f"config.json says tie_word_embeddings, but {copy} differs from {source}: "
                     "transformers keeps them apart, and so does tfviz (untied)")
        return True

    @staticmethod
    def linear(w: Weights, name: str, cfg: ModelConfig, out: int, transpose: bool = False):
        """(weight, bias) of an HF linear layer ``name`` (without .weight); a missing bias is zeros
        when ``cfg.bias`` (adding zero is exact: Qwen2 has q/k/v biases but none on o_proj)."""
        weight = w.get(f"{name}.weight")
        weight = weight.T.contiguous() if transpose else weight
        bias = w.get(f"{name}.bias") if f"{name}.bias" in w else None
        if bias is None and cfg.bias:
            bias = torch.zeros(out)
        return weight, bias


def _layernorm(w: Weights, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight, bias) of a LayerNorm; old BERT checkpoints call them gamma and beta."""
    g, b = w.first(f"{name}.weight", f"{name}.gamma"), w.first(f"{name}.bias", f"{name}.beta")
    if g is None or b is None:
        raise ModelFolderError(f"{w.folder.path}: no weights for the LayerNorm {name!r}")
    return w.get(g), w.get(b)


ACTIVATION_NAMES = {"gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new", "gelu": "gelu",
                    "relu": "relu"}
"""Hugging Face hidden_act -> tfviz activation (both tanh variants are the same formula)."""


def _activation(cls: type[Adapter], act) -> str:
    if act not in ACTIVATION_NAMES:
        raise cls.refuse(f"activation {act!r}", f"supported: {', '.join(ACTIVATION_NAMES)}")
    return ACTIVATION_NAMES[act]


# ==================================================================================== GPT-2
class GPT2(Adapter):
    """Radford et al. 2019: learned positions, pre-norm LayerNorm, tanh GELU, tied head, Conv1D."""

    name, label = "gpt2", "GPT-2"
    model_types = ("gpt2",)
    architectures = ("GPT2LMHeadModel", "GPT2Model")
    prefixes = ("transformer.", "")
    anchor = "wte.weight"
    ignored = (r"(transformer\.)?h\.\d+\.attn\.(masked_)?bias",)  # causal-mask buffers (old files)
    tied_copies = (r"lm_head\.weight",)  # with tied embeddings it is wte again

    @classmethod
    def model_config(cls, hf, w):
        cls.check_architectures(hf)
        for key, want in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False),
                          ("add_cross_attention", False)):
            if bool(hf.get(key, want)) != want:
                raise cls.refuse(f"{key}={hf[key]}", "tfviz scales scores by 1/sqrt(d_head) alone "
                                 "and has no cross-attention in a decoder-only model")
        d = cls.number(hf, "n_embd", 768)
        notes = []
        tie = cls.tied(hf, w, True, notes)
        cfg = ModelConfig(
            arch="decoder", vocab_size=cls.number(hf, "vocab_size", 50257), d_model=d,
            n_heads=cls.number(hf, "n_head", 12), n_layers=cls.number(hf, "n_layer", 12),
            d_ff=hf.get("n_inner") or 4 * d, max_len=cls.number(hf, "n_positions", 1024),
            pos="learned", norm="pre", normalization="layernorm",
            activation=_activation(cls, hf.get("activation_function", "gelu_new")),
            dropout=0.0, bias=True, tie_embeddings=tie, pad_id=None,
            layer_norm_eps=cls.number(hf, "layer_norm_epsilon", 1e-5, float))
        return cfg, notes

    exports_as = "GPT2LMHeadModel"

    @classmethod
    def problems(cls, cfg):
        return cls.check([
            (cfg.arch == "decoder", f"arch={cfg.arch!r} (GPT-2 is a decoder)"),
            (cfg.pos == "learned", f"pos={cfg.pos!r} (GPT-2 has learned positions)"),
            (cfg.norm == "pre", f"norm={cfg.norm!r} (GPT-2 is pre-norm)"),
            (cfg.normalization == "layernorm", f"normalization={cfg.normalization!r} (GPT-2 uses LayerNorm)"),
            (cfg.activation in ("gelu", "gelu_new"), f"activation={cfg.activation!r} (GPT-2: gelu or gelu_new)"),
            (cfg.n_kv_heads == cfg.n_heads, f"n_kv_heads={cfg.n_kv_heads} (GPT-2 has one key/value head per head)"),
            (cfg.bias, "bias=False (GPT-2 has biases in every linear layer)"),
            (cfg.window is None and not cfg.global_tokens, "a sliding window (GPT-2 attends to every earlier token)"),
            (cfg.head == "linear", f"head={cfg.head!r} (GPT-2's head is one linear map)"),
            (not cfg.embed_norm, "embed_norm=True (GPT-2 has no norm on the embeddings)"),
            (not cfg.n_token_types, "token types (GPT-2 has none)")])

    @classmethod
    def hf_config(cls, cfg):
        return dict(model_type="gpt2", vocab_size=cfg.vocab_size, n_positions=cfg.max_len, n_embd=cfg.d_model,
                    n_layer=cfg.n_layers, n_head=cfg.n_heads, n_inner=cfg.d_ff, activation_function=cfg.activation,
                    layer_norm_epsilon=cfg.layer_norm_eps, resid_pdrop=cfg.dropout, embd_pdrop=cfg.dropout,
                    attn_pdrop=cfg.dropout, tie_word_embeddings=cfg.tie_embeddings, bos_token_id=None,
                    eos_token_id=None, pad_token_id=None)

    @classmethod
    def hf_config_file(cls, cfg):
        return {**super().hf_config_file(cfg), "scale_attn_weights": True,
                "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
                "add_cross_attention": False}

    @classmethod
    def canonical(cls, cfg, state):
        """An attention-only model: GPT-2 blocks whose MLPs are all zeros (exactly the same function)."""
        return cls.with_zero_mlps(cfg, state)

    @classmethod
    def hf_shapes(cls, cfg):
        d, f, p = cfg.d_model, cfg.d_ff, "transformer."
        out = {p + "wte.weight": (cfg.vocab_size, d), p + "wpe.weight": (cfg.max_len, d)}
        for i in range(cfg.n_layers):  # Conv1D weights are [in, out]
            h = f"{p}h.{i}."
            out.update({h + "ln_1.weight": (d,), h + "ln_1.bias": (d,),
                        h + "attn.c_attn.weight": (d, 3 * d), h + "attn.c_attn.bias": (3 * d,),
                        h + "attn.c_proj.weight": (d, d), h + "attn.c_proj.bias": (d,),
                        h + "ln_2.weight": (d,), h + "ln_2.bias": (d,),
                        h + "mlp.c_fc.weight": (d, f), h + "mlp.c_fc.bias": (f,),
                        h + "mlp.c_proj.weight": (f, d), h + "mlp.c_proj.bias": (d,)})
        out.update({p + "ln_f.weight": (d,), p + "ln_f.bias": (d,)})
        if not cfg.tie_embeddings:
            out["lm_head.weight"] = (cfg.vocab_size, d)
        return out

    shape = dict(arch="decoder", pos="learned", norm="pre", normalization="layernorm",
                 activation="gelu_new", bias=True, tie_embeddings=True, window=None, global_tokens=0,
                 head="linear", embed_norm=False, n_token_types=0)
    shape_label = "GPT-2-shaped"

    @classmethod
    def shaped(cls, fields):
        return {**super().shaped(fields), "n_kv_heads": fields.get("n_heads")}  # one K/V head per head

    @classmethod
    def state_dict(cls, cfg, w):
        p = cls.prefix(w)
        yield "embed.weight", w.get(p + "wte.weight")
        yield "stack.pos.table.weight", w.get(p + "wpe.weight")
        d = cfg.d_model
        for i in range(cfg.n_layers):
            h, t = f"{p}h.{i}.", f"stack.blocks.{i}."
            yield from _named(t + "ln1", _layernorm(w, h + "ln_1"))
            yield from _named(t + "attn.W_qkv", cls.linear(w, h + "attn.c_attn", cfg, 3 * d, transpose=True))
            yield from _named(t + "attn.W_o", cls.linear(w, h + "attn.c_proj", cfg, d, transpose=True))
            yield from _named(t + "ln2", _layernorm(w, h + "ln_2"))
            yield from _named(t + "mlp.W_in", cls.linear(w, h + "mlp.c_fc", cfg, cfg.d_ff, transpose=True))
            yield from _named(t + "mlp.W_out", cls.linear(w, h + "mlp.c_proj", cfg, d, transpose=True))
        yield from _named("stack.ln_final", _layernorm(w, p + "ln_f"))
        if not cfg.tie_embeddings:
            yield "unembed.weight", w.get("lm_head.weight")


# ==================================================================================== BERT
class Bert(Adapter):
    """Devlin et al. 2019: post-norm encoder, learned positions + token types + an embedding
    LayerNorm, exact GELU, and (BertForMaskedLM) the MLM head with its output bias."""

    name, label = "bert", "BERT"
    model_types = ("bert",)
    architectures = ("BertForMaskedLM", "BertModel", "BertForPreTraining")
    prefixes = ("bert.", "")
    anchor = "embeddings.word_embeddings.weight"
    # The logits are cls.predictions.decoder(h): its weight and bias. Tied (tie_word_embeddings,
    # and equal where both are saved), transformers makes decoder.weight the word embeddings and
    # decoder.bias cls.predictions.bias; untied, cls.predictions.bias is a parameter its forward
    # never reads. So the bias read is decoder.bias where the folder has it, else cls.predictions.bias.
    ignored = (r"(bert\.)?embeddings\.position_ids", r"(bert\.)?pooler\..*",  # the [CLS] pooler
               r"cls\.seq_relationship\..*",  # next-sentence head (BertForPreTraining)
               r"cls\.predictions\.bias")  # read only without decoder.bias (see above)
    tied_copies = (r"cls\.predictions\.decoder\.weight",)

    @classmethod
    def model_config(cls, hf, w):
        cls.check_architectures(hf)
        if hf.get("position_embedding_type", "absolute") != "absolute":
            raise cls.refuse(f"position_embedding_type={hf['position_embedding_type']!r}",
                             "tfviz reads BERT's absolute (learned) positions")
        if hf.get("is_decoder") or hf.get("add_cross_attention"):
            raise cls.refuse("is_decoder / add_cross_attention", "tfviz reads BERT as an encoder")
        notes = []
        mlm = "cls.predictions.transform.dense.weight" in w
        said_tied = bool(hf.get("tie_word_embeddings", True))
        if mlm and not said_tied and not all(f"cls.predictions.decoder.{x}" in w for x in ("weight", "bias")):
            raise ModelFolderError(f"{w.folder.path}: tie_word_embeddings is false but the folder has "
                                   "no cls.predictions.decoder.weight and .bias (the untied head's own)")
        tie = said_tied and not (mlm and cls.untie(w, "cls.predictions.decoder.weight",
                                                   cls.prefix(w) + cls.anchor, notes))
        if not mlm:
            tie = True
            notes.append("no masked-LM head in this folder (a BertModel): logits read the token "
                         "embeddings back out (tied, no head transform); they are not BERT's predictions")
        cfg = ModelConfig(
            arch="encoder", vocab_size=cls.number(hf, "vocab_size", 30522),
            d_model=cls.number(hf, "hidden_size", 768), n_heads=cls.number(hf, "num_attention_heads", 12),
            n_layers=cls.number(hf, "num_hidden_layers", 12), d_ff=cls.number(hf, "intermediate_size", 3072),
            max_len=cls.number(hf, "max_position_embeddings", 512), pos="learned", norm="post",
            normalization="layernorm", activation=_activation(cls, hf.get("hidden_act", "gelu")),
            dropout=0.0, bias=True, tie_embeddings=tie, pad_id=None,
            layer_norm_eps=cls.number(hf, "layer_norm_eps", 1e-12, float), embed_norm=True,
            n_token_types=cls.number(hf, "type_vocab_size", 2), head="mlm" if mlm else "linear")
        return cfg, notes

    exports_as = "BertForMaskedLM"

    @classmethod
    def problems(cls, cfg):
        return cls.check([
            (cfg.arch == "encoder", f"arch={cfg.arch!r} (BERT is an encoder)"),
            (cfg.pos == "learned", f"pos={cfg.pos!r} (BERT has learned positions)"),
            (cfg.norm == "post", f"norm={cfg.norm!r} (BERT is post-norm)"),
            (cfg.normalization == "layernorm", f"normalization={cfg.normalization!r} (BERT uses LayerNorm)"),
            (cfg.activation in ACTIVATION_NAMES.values(), f"activation={cfg.activation!r} (BERT: "
             f"{', '.join(sorted(set(ACTIVATION_NAMES.values())))})"),
            (cfg.n_kv_heads == cfg.n_heads, f"n_kv_heads={cfg.n_kv_heads} (BERT has one key/value head per head)"),
            (cfg.bias, "bias=False (BERT has biases in every linear layer)"),
            (not cfg.attn_only, "attn_only=True (every BERT layer has an MLP)"),
            (cfg.window is None and not cfg.global_tokens, "a sliding window (BERT attends to every token)"),
            (cfg.head == "mlm", f"head={cfg.head!r} (BertForMaskedLM's head is 'mlm': dense, activation, "
             "norm, unembedding with a bias)"),
            (cfg.embed_norm, "embed_norm=False (BERT has a LayerNorm on the embeddings)")])

    @classmethod
    def hf_config(cls, cfg):
        return dict(model_type="bert", vocab_size=cfg.vocab_size, hidden_size=cfg.d_model,
                    num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads,
                    intermediate_size=cfg.d_ff, hidden_act=cfg.activation, max_position_embeddings=cfg.max_len,
                    type_vocab_size=cfg.n_token_types, layer_norm_eps=cfg.layer_norm_eps,
                    hidden_dropout_prob=cfg.dropout, attention_probs_dropout_prob=cfg.dropout,
                    tie_word_embeddings=cfg.tie_embeddings, position_embedding_type="absolute",
                    pad_token_id=cfg.pad_id if cfg.pad_id is not None else 0)

    @classmethod
    def canonical(cls, cfg, state):
        """A model without token types is a BERT whose one token type embeds as zeros."""
        if cfg.n_token_types:
            return cfg, state
        return cfg.replace(n_token_types=1), {**state, "token_type_embed.weight": torch.zeros(1, cfg.d_model)}

    @classmethod
    def hf_config_file(cls, cfg):
        return {**super().hf_config_file(cfg), "is_decoder": False, "add_cross_attention": False}

    @classmethod
    def hf_shapes(cls, cfg):
        d, f, v, p = cfg.d_model, cfg.d_ff, cfg.vocab_size, "bert."
        e, c = p + "embeddings.", "cls.predictions."
        out = {e + "word_embeddings.weight": (v, d), e + "position_embeddings.weight": (cfg.max_len, d),
               e + "token_type_embeddings.weight": (cfg.n_token_types, d),
               e + "LayerNorm.weight": (d,), e + "LayerNorm.bias": (d,)}
        for i in range(cfg.n_layers):
            h = f"{p}encoder.layer.{i}."
            for x in ("query", "key", "value"):
                out.update({f"{h}attention.self.{x}.weight": (d, d), f"{h}attention.self.{x}.bias": (d,)})
            out.update({h + "attention.output.dense.weight": (d, d), h + "attention.output.dense.bias": (d,),
                        h + "attention.output.LayerNorm.weight": (d,), h + "attention.output.LayerNorm.bias": (d,),
                        h + "intermediate.dense.weight": (f, d), h + "intermediate.dense.bias": (f,),
                        h + "output.dense.weight": (d, f), h + "output.dense.bias": (d,),
                        h + "output.LayerNorm.weight": (d,), h + "output.LayerNorm.bias": (d,)})
        out.update({c + "transform.dense.weight": (d, d), c + "transform.dense.bias": (d,),
                    c + "transform.LayerNorm.weight": (d,), c + "transform.LayerNorm.bias": (d,),
                    c + "bias": (v,)})
        if not cfg.tie_embeddings:  # the untied head reads its own weight and bias
            out.update({c + "decoder.weight": (v, d), c + "decoder.bias": (v,)})
        return out

    @classmethod
    def copies(cls, cfg):
        """Untied, transformers' head reads decoder.bias; cls.predictions.bias is written equal."""
        return {} if cfg.tie_embeddings else {"cls.predictions.bias": "cls.predictions.decoder.bias"}

    shape = dict(arch="encoder", pos="learned", norm="post", normalization="layernorm", activation="gelu",
                 bias=True, tie_embeddings=True, window=None, global_tokens=0, attn_only=False,
                 head="mlm", embed_norm=True)
    shape_label = "BERT-shaped"

    @classmethod
    def shaped(cls, fields):
        return {**super().shaped(fields), "n_kv_heads": fields.get("n_heads")}

    @classmethod
    def state_dict(cls, cfg, w):
        p = cls.prefix(w)
        e = p + "embeddings."
        yield "embed.weight", w.get(e + "word_embeddings.weight")
        yield "stack.pos.table.weight", w.get(e + "position_embeddings.weight")
        yield "token_type_embed.weight", w.get(e + "token_type_embeddings.weight")
        yield from _named("stack.ln_embed", _layernorm(w, e + "LayerNorm"))
        d = cfg.d_model
        for i in range(cfg.n_layers):
            h, t = f"{p}encoder.layer.{i}.", f"stack.blocks.{i}."
            qkv = [cls.linear(w, f"{h}attention.self.{x}", cfg, d) for x in ("query", "key", "value")]
            yield t + "attn.W_qkv.weight", torch.cat([q[0] for q in qkv])
            yield t + "attn.W_qkv.bias", torch.cat([q[1] for q in qkv])
            yield from _named(t + "attn.W_o", cls.linear(w, h + "attention.output.dense", cfg, d))
            yield from _named(t + "ln1", _layernorm(w, h + "attention.output.LayerNorm"))
            yield from _named(t + "mlp.W_in", cls.linear(w, h + "intermediate.dense", cfg, cfg.d_ff))
            yield from _named(t + "mlp.W_out", cls.linear(w, h + "output.dense", cfg, d))
            yield from _named(t + "ln2", _layernorm(w, h + "output.LayerNorm"))
        if cfg.head == "mlm":
            c = "cls.predictions."
            yield from _named("head_transform.dense", cls.linear(w, c + "transform.dense", cfg, d))
            yield from _named("head_transform.ln", _layernorm(w, c + "transform.LayerNorm"))
            yield "unembed.bias", w.get(w.first(c + "decoder.bias", c + "bias") or c + "bias")
            if not cfg.tie_embeddings:
                yield "unembed.weight", w.get(c + "decoder.weight")


# ==================================================================================== Llama
class Llama(Adapter):
    """Touvron et al. 2023 (and Mistral, Qwen2 where Llama-shaped): pre-norm RMSNorm, SwiGLU,
    RoPE on half-split pairs, grouped-query attention, no biases (Qwen2: q/k/v biases)."""

    name, label = "llama", "Llama-family"
    model_types = ("llama", "mistral", "qwen2")
    architectures = ("LlamaForCausalLM", "LlamaModel", "MistralForCausalLM", "MistralModel",
                     "Qwen2ForCausalLM", "Qwen2Model")
    prefixes = ("model.", "")
    anchor = "embed_tokens.weight"
    ignored = (r"(model\.)?layers\.\d+\.self_attn\.rotary_emb\.inv_freq",)  # computed, old files
    tied_copies = (r"lm_head\.weight",)  # with tied embeddings it is embed_tokens again

    @classmethod
    def rope(cls, hf: dict) -> float:
        """rope_theta, refusing every RoPE variant but the plain one."""
        params = hf.get("rope_parameters") or {}
        scaling = hf.get("rope_scaling")
        kind = params.get("rope_type", "default") if isinstance(params, dict) else "?"
        if scaling or kind not in ("default", None):
            what = kind if kind not in ("default", None) else (scaling or {}).get("rope_type", scaling)
            raise cls.refuse(f"RoPE scaling {what!r}", "tfviz implements plain RoPE, theta_i = "
                             "base^(-2i/d_head), without long-context frequency scaling")
        if float(hf.get("partial_rotary_factor", params.get("partial_rotary_factor", 1.0)) or 1.0) != 1.0:
            raise cls.refuse("partial_rotary_factor", "tfviz rotates every dimension of q and k")
        theta = params.get("rope_theta", hf.get("rope_theta", 10000.0))
        return cls.number({"rope_theta": theta}, "rope_theta", kind=float)

    @classmethod
    def window(cls, hf: dict) -> int | None:
        """tfviz's window w (a query sees keys i - w .. i) from the sliding-window settings: HF
        lets query i see key j when i - j < sliding_window, so w = sliding_window - 1."""
        model_type = hf.get("model_type")
        size = hf.get("sliding_window")
        if model_type == "qwen2":
            layers = hf.get("layer_types") or []
            if not hf.get("use_sliding_window", False) or size is None:
                return None
            if not layers or any(t != "sliding_attention" for t in layers):
                raise cls.refuse("a sliding window on some layers only (max_window_layers / layer_types)",
                                 "tfviz's window applies to every layer alike")
        elif model_type == "llama" or size is None:
            return None
        size = cls.number(hf, "sliding_window")
        if size < 2:
            raise cls.refuse(f"sliding_window={size}", "a window must let a token see its predecessor")
        return size - 1

    @classmethod
    def model_config(cls, hf, w):
        cls.check_architectures(hf)
        model_type = hf.get("model_type")
        if hf.get("hidden_act", "silu") != "silu":
            raise cls.refuse(f"hidden_act={hf.get('hidden_act')!r}",
                             "tfviz's Llama-family MLP is SwiGLU (silu)")
        d, n_heads = cls.number(hf, "hidden_size"), cls.number(hf, "num_attention_heads")
        head_dim = hf.get("head_dim")
        if head_dim is not None and head_dim * n_heads != d:
            raise cls.refuse(f"head_dim={head_dim} with hidden_size={d} and {n_heads} heads",
                             "tfviz needs d_head = d_model / n_heads")
        bias = model_type == "qwen2" or bool(hf.get("attention_bias")) or bool(hf.get("mlp_bias"))
        notes = []
        if bias and model_type == "qwen2":
            notes.append("Qwen2 has biases on q, k and v only: o_proj and the MLP get zero biases "
                         "(exactly the same numbers)")
        tie = cls.tied(hf, w, False, notes)
        cfg = ModelConfig(
            arch="decoder", vocab_size=cls.number(hf, "vocab_size"), d_model=d, n_heads=n_heads,
            n_kv_heads=cls.number(hf, "num_key_value_heads", n_heads),
            n_layers=cls.number(hf, "num_hidden_layers"), d_ff=cls.number(hf, "intermediate_size"),
            max_len=cls.number(hf, "max_position_embeddings", 2048), pos="rope", rope_pairs="half",
            rope_base=cls.rope(hf), norm="pre", normalization="rmsnorm", activation="swiglu",
            dropout=0.0, bias=bias, tie_embeddings=tie, pad_id=None, window=cls.window(hf),
            layer_norm_eps=cls.number(hf, "rms_norm_eps", 1e-6, float))
        return cfg, notes

    exports_as = "LlamaForCausalLM"

    @classmethod
    def problems(cls, cfg):
        return cls.check([
            (cfg.arch == "decoder", f"arch={cfg.arch!r} (Llama is a decoder)"),
            (cfg.pos == "rope", f"pos={cfg.pos!r} (Llama rotates q and k: pos='rope')"),
            (cfg.norm == "pre", f"norm={cfg.norm!r} (Llama is pre-norm)"),
            (cfg.normalization == "rmsnorm", f"normalization={cfg.normalization!r} (Llama uses RMSNorm)"),
            (cfg.activation == "swiglu", f"activation={cfg.activation!r} (Llama's MLP is SwiGLU)"),
            (cfg.window is None and not cfg.global_tokens, "a sliding window (Llama attends to every earlier token)"),
            (cfg.head == "linear", f"head={cfg.head!r} (Llama's head is one linear map)"),
            (not cfg.embed_norm, "embed_norm=True (Llama has no norm on the embeddings)"),
            (not cfg.n_token_types, "token types (Llama has none)")])

    @classmethod
    def hf_config(cls, cfg):
        return dict(model_type="llama", vocab_size=cfg.vocab_size, hidden_size=cfg.d_model,
                    intermediate_size=cfg.d_ff, num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads,
                    num_key_value_heads=cfg.n_kv_heads, hidden_act="silu", max_position_embeddings=cfg.max_len,
                    rms_norm_eps=cfg.layer_norm_eps, rope_theta=float(cfg.rope_base),
                    attention_bias=cfg.bias, mlp_bias=cfg.bias, attention_dropout=cfg.dropout,
                    tie_word_embeddings=cfg.tie_embeddings, bos_token_id=None, eos_token_id=None,
                    pad_token_id=None)

    @classmethod
    def hf_config_file(cls, cfg):
        out = {**super().hf_config_file(cfg), "head_dim": cfg.d_head, "pretraining_tp": 1}
        out["rope_parameters"] = {"rope_theta": out.pop("rope_theta"), "rope_type": "default"}
        return out

    @classmethod
    def hf_shapes(cls, cfg):
        d, f, p = cfg.d_model, cfg.d_ff, "model."
        hq, hkv = cfg.n_heads * cfg.d_head, cfg.n_kv_heads * cfg.d_head
        out = {p + "embed_tokens.weight": (cfg.vocab_size, d)}
        for i in range(cfg.n_layers):
            h = f"{p}layers.{i}."
            parts = {"self_attn.q_proj": (hq, d), "self_attn.k_proj": (hkv, d), "self_attn.v_proj": (hkv, d),
                     "self_attn.o_proj": (d, hq), "mlp.gate_proj": (f, d), "mlp.up_proj": (f, d),
                     "mlp.down_proj": (d, f)}
            for name, shape in parts.items():
                out[f"{h}{name}.weight"] = shape
                if cfg.bias:  # attention_bias and mlp_bias
                    out[f"{h}{name}.bias"] = shape[:1]
            out.update({h + "input_layernorm.weight": (d,), h + "post_attention_layernorm.weight": (d,)})
        out[p + "norm.weight"] = (d,)
        if not cfg.tie_embeddings:
            out["lm_head.weight"] = (cfg.vocab_size, d)
        return out

    shape = dict(arch="decoder", pos="rope", rope_pairs="half", norm="pre", normalization="rmsnorm",
                 activation="swiglu", bias=False, tie_embeddings=False, window=None, global_tokens=0,
                 head="linear", embed_norm=False, n_token_types=0)
    shape_label = "Llama-shaped"

    @classmethod
    def canonical(cls, cfg, state):
        """An attention-only model: Llama layers whose MLPs are all zeros (``with_zero_mlps``).
        Llama rotates half-split pairs: a model trained with another pairing (tfviz's own:
        interleaved) is the same function with each head's q and k dimensions reordered so that
        its pair i lands on (i, i + d_head/2) — q.k is unchanged by permuting both alike."""
        cfg, state = cls.with_zero_mlps(cfg, state)
        if cfg.rope_pairs == "half":
            return cfg, state
        perm = rope_permutation(cfg.rope_pairs, "half", cfg.d_head)
        hq, hkv = cfg.n_heads * cfg.d_head, cfg.n_kv_heads * cfg.d_head
        rows = torch.cat([h * cfg.d_head + perm for h in range(cfg.n_heads + cfg.n_kv_heads)]
                         + [torch.arange(hq + hkv, hq + 2 * hkv)])  # q heads, k heads; v unchanged
        state = dict(state)
        for i in range(cfg.n_layers):
            for part in ("weight", "bias"):
                name = f"stack.blocks.{i}.attn.W_qkv.{part}"
                if name in state:
                    state[name] = state[name][rows]
        return cfg.replace(rope_pairs="half"), state

    @classmethod
    def state_dict(cls, cfg, w):
        p = cls.prefix(w)
        yield "embed.weight", w.get(p + "embed_tokens.weight")
        hq, hkv = cfg.n_heads * cfg.d_head, cfg.n_kv_heads * cfg.d_head
        for i in range(cfg.n_layers):
            h, t = f"{p}layers.{i}.", f"stack.blocks.{i}."
            yield t + "ln1.weight", w.get(h + "input_layernorm.weight")
            qkv = [cls.linear(w, f"{h}self_attn.{x}_proj", cfg, n) for x, n in (("q", hq), ("k", hkv), ("v", hkv))]
            yield t + "attn.W_qkv.weight", torch.cat([q[0] for q in qkv])
            if cfg.bias:
                yield t + "attn.W_qkv.bias", torch.cat([q[1] for q in qkv])
            yield from _named(t + "attn.W_o", cls.linear(w, h + "self_attn.o_proj", cfg, cfg.d_model))
            yield t + "ln2.weight", w.get(h + "post_attention_layernorm.weight")
            gate, up = (cls.linear(w, f"{h}mlp.{x}_proj", cfg, cfg.d_ff) for x in ("gate", "up"))
            yield t + "mlp.W_in.weight", torch.cat([gate[0], up[0]])  # SwiGLU reads [gate; up]
            if cfg.bias:
                yield t + "mlp.W_in.bias", torch.cat([gate[1], up[1]])
            yield from _named(t + "mlp.W_out", cls.linear(w, h + "mlp.down_proj", cfg, cfg.d_model))
        yield "stack.ln_final.weight", w.get(p + "norm.weight")
        if not cfg.tie_embeddings:
            yield "unembed.weight", w.get("lm_head.weight")


def rope_permutation(source: str, target: str, d_head: int) -> torch.Tensor:
    """[d_head] indices: dimension j of a head under pairing ``target`` is dimension perm[j] under
    ``source`` (``positional.ROTARY_PAIRS``), so that pair i stays pair i."""
    (a1, a2), (b1, b2) = ROTARY_PAIRS[source].pair_dims(d_head), ROTARY_PAIRS[target].pair_dims(d_head)
    perm = torch.empty(d_head, dtype=torch.long)
    perm[b1], perm[b2] = a1, a2
    return perm


def _named(name: str, pair) -> Iterator[tuple[str, torch.Tensor]]:
    weight, bias = pair
    yield f"{name}.weight", weight
    if bias is not None:
        yield f"{name}.bias", bias


ADAPTERS: dict[str, type[Adapter]] = {cls.name: cls for cls in (GPT2, Bert, Llama)}
"""family name -> adapter."""
MODEL_TYPES: dict[str, type[Adapter]] = {t: cls for cls in ADAPTERS.values() for t in cls.model_types}
"""config.json model_type -> adapter."""


def adapter_for(hf: dict) -> type[Adapter]:
    """The adapter for a config.json, or a ModelFolderError naming what is supported."""
    model_type = hf.get("model_type")
    if not isinstance(model_type, str) or model_type not in MODEL_TYPES:  # a list is unhashable
        raise ModelFolderError(
            f"model_type {model_type!r} is not supported; tfviz opens "
            + "; ".join(f"{c.label} ({', '.join(c.model_types)})" for c in ADAPTERS.values()))
    return MODEL_TYPES[model_type]


def unused(w: Weights, family: type[Adapter], cfg: ModelConfig) -> list[str]:
    """Tensors of the folder that the mapping did not read and that are not known to be unneeded
    for this model (``Adapter.ignored_for(cfg)``: a tied head's copies, never an untied head's own)."""
    ignored = family.ignored_for(cfg)
    pattern = re.compile("|".join(f"(?:{r})" for r in ignored)) if ignored else None
    return [n for n in w.names() if n not in w.used and not (pattern and pattern.fullmatch(n))]
