"""Out to the ecosystem: a tfviz model as the transformers model of the family it matches, so a
model trained in tfviz opens in transformers, TransformerLens or bertviz.

    hf = tfviz.to_hf(model)            # same logits (float32), eval mode
    hf.save_pretrained("models/mine")  # and tfviz.from_pretrained("models/mine") gives it back

    family    what it can express                                          written as
    GPT-2     decoder, learned positions, pre-norm LayerNorm, gelu / tanh     GPT2LMHeadModel
              gelu, multi-head attention, biases, tied or untied head
    Llama     decoder, RoPE (any pairing: interleaved pairs are permuted      LlamaForCausalLM
              into Llama's half-split ones), pre-norm RMSNorm, SwiGLU,
              MHA / GQA / MQA, no biases (or biases everywhere), tied or not
    BERT      post-norm encoder, learned positions, embedding LayerNorm,      BertForMaskedLM
              gelu / gelu_new / relu, the mlm head, token types (none: one
              token type whose embedding is zero)

A model that matches none is refused naming, per family, every option it cannot express.

One place for each fact: the names and layouts come from the family's ``Adapter``
(``tfviz.interop.families``), the same code that reads a folder in. The export runs that reader
backwards: it hands the adapter stand-in tensors whose entries are their own addresses in the
transformers state dict, so each tfviz tensor the adapter builds says where each of its numbers
goes (transposes, concatenations and all). Every number of the transformers model must be
written exactly once (tied copies and buffers excepted), the config the adapter reads back must
be the exported one, and the transformers model's logits must equal tfviz's on a probe input —
otherwise the export is refused. transformers does not mask padding by token id: pass
``attention_mask`` there where tfviz used ``pad_id``.
"""
from __future__ import annotations

import dataclasses
import os
import re
from types import SimpleNamespace

import torch

from ..model import ModelConfig, Transformer
from .families import ADAPTERS, Adapter

_TAG = 2.0 ** 32   # an address is tag * 2^32 + flat index (exact in float64 up to 2^53)
IGNORED_FIELDS = ("pad_id", "dropout")  # a folder has no padding id or dropout to carry them


def exporters() -> list[type[Adapter]]:
    """The families a tfviz model can be written as, in the order they are tried."""
    return [a for a in ADAPTERS.values() if a.exports_as]


def family_for(cfg: ModelConfig) -> type[Adapter]:
    """The family a config matches, or a ValueError naming, per family, what does not fit."""
    reasons = {a: a.problems(cfg) for a in exporters()}
    for adapter, problems in reasons.items():
        if not problems:
            return adapter
    raise ValueError("this model cannot be written as " + " — nor as ".join(
        f"{a.label}: {'; '.join(p)}" for a, p in reasons.items()))


class _Addresses:
    """Stands in for a folder's ``Weights`` when exporting: ``get(name)`` returns the tensor's own
    addresses (float64), so what the adapter builds from it says where each number came from."""

    traced = True  # no values to compare (Adapter.untie)

    def __init__(self, shapes: dict[str, tuple[int, ...]]):
        self.shapes = shapes
        self.tags = {name: i + 1 for i, name in enumerate(shapes)}  # 0 = a constant (e.g. zero bias)
        self.used: set[str] = set()
        self.folder = SimpleNamespace(path="(export)")

    def names(self) -> list[str]:
        return sorted(self.shapes)

    def __contains__(self, name: str) -> bool:
        return name in self.shapes

    def first(self, *names: str) -> str | None:
        return next((n for n in names if n in self.shapes), None)

    def shape(self, name: str) -> tuple[int, ...]:
        return self.shapes[name]

    def get(self, name: str, dtype=None) -> torch.Tensor:
        shape = self.shapes[name]
        self.used.add(name)
        n = 1
        for d in shape:
            n *= d
        return (self.tags[name] * _TAG + torch.arange(n, dtype=torch.float64)).reshape(shape)


def _differences(a: ModelConfig, b: ModelConfig) -> list[str]:
    return [f"{f.name}: {getattr(a, f.name)!r} -> {getattr(b, f.name)!r}" for f in dataclasses.fields(a)
            if f.name not in IGNORED_FIELDS and getattr(a, f.name) != getattr(b, f.name)]


def to_hf(model: Transformer, *, check: bool = True):
    """The transformers model (``GPT2LMHeadModel``, ``LlamaForCausalLM`` or ``BertForMaskedLM``)
    holding ``model``'s weights (copies), in eval mode. ValueError naming every option no family
    can express; ImportError if transformers is missing. ``check``: compare the logits of both
    on a probe input and refuse when they differ (see the module docstring)."""
    if not isinstance(model, Transformer):
        raise ValueError(f"to_hf needs a tfviz.Transformer, not {type(model).__name__}")
    adapter = family_for(model.config)
    try:
        import transformers
    except ImportError:
        raise ImportError("to_hf needs the transformers package (pip install 'transformers>=5,<6')") from None
    source = {k: v.detach().to("cpu", torch.float32) for k, v in model.state_dict().items()}
    cfg, state = adapter.canonical(model.config, source)
    settings = adapter.hf_config(cfg)
    hf_cfg = transformers.AutoConfig.for_model(**settings)
    hf = getattr(transformers, adapter.exports_as)(hf_cfg)
    hf_state = hf.state_dict()
    shapes = {n: tuple(t.shape) for n, t in hf_state.items()}

    # The adapter reads back the config transformers will write, and builds tfviz's tensors.
    addresses = _Addresses(shapes)
    back, _ = adapter.model_config(hf_cfg.to_dict(), addresses)
    wrong = _differences(cfg, back)
    if wrong:
        raise ValueError(f"a {adapter.label} folder would read back as another model ({'; '.join(wrong)}): "
                         "refused")
    names = list(addresses.tags)
    values = {n: torch.full((hf_state[n].numel(),), float("nan"), dtype=torch.float32) for n in names}
    written = set()
    for name, where in adapter.state_dict(back, addresses):
        written.add(name)
        value = state.get(name)
        if value is None or tuple(value.shape) != tuple(where.shape):
            raise ValueError(f"{name}: tfviz has {None if value is None else tuple(value.shape)}, the "
                             f"{adapter.label} layout needs {tuple(where.shape)}")
        where, value = where.reshape(-1), value.reshape(-1)
        const = where < _TAG
        if bool(const.any()) and bool((value[const] != 0).any()):
            raise ValueError(f"{name}: {adapter.label} has no place for these numbers (only zeros fit)")
        tags, index = (where[~const] // _TAG).long(), (where[~const] % _TAG).long()
        for tag in tags.unique().tolist():
            sel = tags == tag
            values[names[tag - 1]][index[sel]] = value[~const][sel]
    ignored = re.compile("|".join(f"(?:{r})" for r in adapter.ignored_for(back)) or "(?!)")
    out, missing = {}, []
    for n in names:
        if bool(values[n].isnan().any()):
            if not ignored.fullmatch(n):
                missing.append(n)
            continue
        out[n] = values[n].reshape(shapes[n])
    unexpected = [n for n in sorted(set(state) - written)
                  if not (back.tie_embeddings and n == "unembed.weight")]  # the embeddings again
    if missing or unexpected:
        raise ValueError(f"the {adapter.label} layout leaves numbers unwritten ({', '.join(missing[:4])}) "
                         f"or tfviz tensors unused ({', '.join(unexpected[:4])}): refused")
    hf.load_state_dict(out, strict=False)
    hf.eval()
    if check:
        _check_logits(model, hf, cfg)
    return hf


def _check_logits(model: Transformer, hf, cfg: ModelConfig) -> None:
    """Refuse an export whose logits differ from tfviz's on a probe input (never the pad id)."""
    n = min(8, cfg.max_positions or 8)
    ids = torch.randint(0, cfg.vocab_size, (1, n), generator=torch.Generator().manual_seed(0))
    if cfg.pad_id is not None:
        ids[ids == cfg.pad_id] = (cfg.pad_id + 1) % cfg.vocab_size
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            ours = model(ids.to(device)).float().cpu()
            theirs = hf(ids).logits.float()
    finally:
        model.train(was_training)
    diff = float((ours - theirs).abs().max())
    allowed = 1e-4 * max(1.0, float(ours.abs().max()))
    if not diff <= allowed:
        raise ValueError(f"the exported model's logits differ from tfviz's by {diff:.3g} (allowed "
                         f"{allowed:.3g}): refused")


ROLE_KEYS = {"pad": "pad_token", "unk": "unk_token", "bos": "bos_token", "eos": "eos_token",
             "mask": "mask_token", "sep": "sep_token", "cls": "cls_token"}  # tfviz role -> transformers


def export_folder(model: Transformer, out, tokenizer=None):
    """``to_hf(model).save_pretrained(out)``, with ``tokenizer`` (a ``tfviz.Tokenizer``) saved
    beside it as transformers writes a fast tokenizer (tokenizer.json, its special tokens named in
    tokenizer_config.json): a folder ``tfviz.from_pretrained`` and transformers both open. Refuses
    an ``out`` that exists and is not an empty folder (nothing is overwritten), a link to nothing,
    and a place where no folder can be made (under a file, in /proc: ``ValueError``, one line); a
    folder it made is removed again when writing into it fails. -> the folder."""
    import shutil
    from pathlib import Path
    out = Path(out).expanduser()
    if out.is_symlink() and not out.exists():
        raise ValueError(f"{out} is a link to nothing ({os.readlink(out)}): pick a new folder")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out} already exists and is not an empty folder: pick a new one")
    if tokenizer is not None and tokenizer.vocab_size > model.config.vocab_size:
        raise ValueError(f"the tokenizer has {tokenizer.vocab_size} tokens, the model {model.config.vocab_size}")
    hf = to_hf(model)
    if tokenizer is not None:
        from transformers import PreTrainedTokenizerFast
        fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer.backend, **{
            ROLE_KEYS[role]: tok for role, tok in tokenizer.specials.items() if role in ROLE_KEYS})
    made = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"cannot make the folder {out}: {e.strerror or e}") from None
    try:
        hf.save_pretrained(str(out))
        if tokenizer is not None:
            fast.save_pretrained(str(out))
    except OSError as e:  # a full disk, a folder made read-only meanwhile
        if made:
            shutil.rmtree(out, ignore_errors=True)
        raise ValueError(f"cannot write the model into {out}: {e.strerror or e}") from None
    return out
