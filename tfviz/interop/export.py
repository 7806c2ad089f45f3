"""Out to the ecosystem: a tfviz model as a Hugging Face folder of the family it matches, written
without transformers, so a model trained in tfviz opens in transformers, TransformerLens or bertviz.

    write_folder(model, "models/mine", tokenizer, task)  # config.json, model.safetensors, tokenizer
                                                        # files, tfviz_task.json; checked, atomic
    tfviz.from_pretrained("models/mine")                # gives it back (with its task)
    hf = tfviz.to_hf(model)                             # a transformers model (needs transformers)

    family    what it can express                                          written as
    GPT-2     decoder, learned positions, pre-norm LayerNorm, gelu / tanh     GPT2LMHeadModel
              gelu, multi-head attention, biases, tied or untied head,
              attention-only (MLPs of zeros)
    Llama     decoder, RoPE (any pairing: interleaved pairs are permuted      LlamaForCausalLM
              into Llama's half-split ones), pre-norm RMSNorm, SwiGLU,
              MHA / GQA / MQA, no biases (or biases everywhere), tied or not,
              attention-only (MLPs of zeros)
    BERT      post-norm encoder, learned positions, embedding LayerNorm,      BertForMaskedLM
              gelu / gelu_new / relu, the mlm head, token types (none: one
              token type whose embedding is zero)

A model that matches none is refused naming, per family, every option it cannot express. An
attention-only model is written as its family with every MLP weight and bias zero: such an MLP
adds exactly 0 to the residual stream, so the function is the same (``Adapter.with_zero_mlps``).

One place for each fact: the names and layouts come from the family's ``Adapter``
(``tfviz.interop.families``), the same code that reads a folder in. The export runs that reader
backwards: it hands the adapter stand-in tensors whose entries are their own addresses in the
folder's state dict (``Adapter.hf_shapes``: names and shapes), so each tfviz tensor the adapter
builds says where each of its numbers goes (transposes, concatenations and all). Every number of
the folder must be written exactly once (tied copies excepted), the config the adapter reads
back from config.json must be the exported one, and the folder read back (by tfviz's own import,
which the tests hold to transformers') must give tfviz's logits on a probe input — otherwise the
export is refused and nothing is left behind. transformers does not mask padding by token id:
pass ``attention_mask`` there where tfviz used ``pad_id``.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch

from .. import storage
from ..model import ModelConfig, Transformer
from .families import ADAPTERS, Adapter
from .folder import CONFIG, SPECIAL_TOKENS_MAP, TOKENIZER, TOKENIZER_CONFIG, WEIGHTS

_TAG = 2.0 ** 32   # an address is tag * 2^32 + flat index (exact in float64 up to 2^53)
IGNORED_FIELDS = ("pad_id", "dropout")  # a folder has no padding id or dropout to carry them
GENERATION_CONFIG = "generation_config.json"


def exporters() -> list[type[Adapter]]:
    """The families a tfviz model can be written as, in the order they are tried."""
    return [a for a in ADAPTERS.values() if a.exports_as]


def family_for(cfg) -> type[Adapter]:
    """The family a config matches, or a ValueError naming, per family, what does not fit."""
    if not isinstance(cfg, ModelConfig):
        raise ValueError(f"this model cannot be written as a Hugging Face folder: a "
                         f"{getattr(cfg, 'summary', lambda: type(cfg).__name__)()} is not a transformer "
                         "(tfviz writes GPT-2, Llama and BERT)")
    reasons = {a: a.problems(cfg) for a in exporters()}
    for adapter, problems in reasons.items():
        if not problems:
            return adapter
    raise ValueError("this model cannot be written as " + " — nor as ".join(
        f"{a.label}: {'; '.join(p)}" for a, p in reasons.items()))


def shapes() -> list[type[Adapter]]:
    """The families the Train page offers to train as ("GPT-2-shaped", ...): those with a ``shape``."""
    return [a for a in exporters() if a.shape]


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


@dataclass
class Exported:
    """A tfviz model in a family's layout: what a folder of it holds."""

    family: type[Adapter]
    config: ModelConfig            # the same function in the family's terms (``Adapter.canonical``)
    config_json: dict              # config.json
    tensors: dict[str, torch.Tensor]  # the folder's tensors by their Hugging Face names (float32)


def hf_tensors(model: Transformer) -> Exported:
    """``model``'s weights under the names and layout of the family it matches (no transformers
    needed). ValueError naming every option no family can express, or any number the layout
    would leave unwritten or has no place for."""
    if not isinstance(model, Transformer):
        raise ValueError(f"a Hugging Face folder needs a tfviz.Transformer, not {type(model).__name__}")
    adapter = family_for(model.config)
    source = {k: v.detach().to("cpu", torch.float32) for k, v in model.state_dict().items()}
    cfg, state = adapter.canonical(model.config, source)
    config_json = adapter.hf_config_file(cfg)
    shapes = adapter.hf_shapes(cfg)

    # The adapter reads back the config.json written, and builds tfviz's tensors from addresses.
    addresses = _Addresses(shapes)
    back, _ = adapter.model_config(config_json, addresses)
    wrong = _differences(cfg, back)
    if wrong:
        raise ValueError(f"a {adapter.label} folder would read back as another model ({'; '.join(wrong)}): "
                         "refused")
    names = list(addresses.tags)
    values = {n: torch.full((_numel(shapes[n]),), float("nan"), dtype=torch.float32) for n in names}
    written = set()
    for name, where in adapter.state_dict(back, addresses):
        written.add(name)
        value = state.get(name)
        if value is None or tuple(value.shape) != tuple(where.shape):
            raise ValueError(f"{name}: tfviz has {None if value is None else tuple(value.shape)}, the "
                             f"{adapter.label} layout needs {tuple(where.shape)}")
        where, value = where.reshape(-1), value.reshape(-1)
        lo, hi = float(where.min()), float(where.max())
        if lo >= _TAG and lo // _TAG == hi // _TAG:  # one folder tensor (most are): no sorting
            tag = int(lo // _TAG)
            values[names[tag - 1]][(where - tag * _TAG).long()] = value
            continue
        const = where < _TAG
        if bool(const.any()) and bool((value[const] != 0).any()):
            raise ValueError(f"{name}: {adapter.label} has no place for these numbers (only zeros fit)")
        tags, index = (where[~const] // _TAG).long(), (where[~const] % _TAG).long()
        for tag in tags.unique().tolist():
            sel = tags == tag
            values[names[tag - 1]][index[sel]] = value[~const][sel]
    copies = adapter.copies(back)
    out, missing = {}, []
    for n in names:
        if n in copies:
            continue
        if bool(values[n].isnan().any()):
            missing.append(n)
            continue
        out[n] = values[n].reshape(shapes[n])
    for copy, src in copies.items():
        out[copy] = out[src].clone()
    unexpected = [n for n in sorted(set(state) - written)
                  if not (back.tie_embeddings and n == "unembed.weight")]  # the embeddings again
    if missing or unexpected:
        raise ValueError(f"the {adapter.label} layout leaves numbers unwritten ({', '.join(missing[:4])}) "
                         f"or tfviz tensors unused ({', '.join(unexpected[:4])}): refused")
    return Exported(adapter, cfg, config_json, out)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def to_hf(model: Transformer, *, check: bool = True):
    """The transformers model (``GPT2LMHeadModel``, ``LlamaForCausalLM`` or ``BertForMaskedLM``)
    holding ``model``'s weights (copies), in eval mode: the folder ``write_folder`` writes, opened
    by transformers. ValueError naming every option no family can express; ImportError if
    transformers is missing. ``check``: compare the logits of both on a probe input and refuse
    when they differ (see the module docstring)."""
    import tempfile

    exported = hf_tensors(model)  # the reason first, whether transformers is there or not
    try:
        import transformers
    except ImportError:
        raise ImportError("to_hf needs the transformers package (pip install 'transformers>=5,<6'); "
                          "write_folder writes the same folder without it") from None
    with tempfile.TemporaryDirectory(prefix="tfviz-to-hf-") as tmp:
        folder = write_folder(model, Path(tmp) / "model", check=False, exported=exported)
        hf = getattr(transformers, exported.family.exports_as).from_pretrained(str(folder)).eval()
    back, _ = exported.family.model_config(hf.config.to_dict(), _Addresses(exported.family.hf_shapes(exported.config)))
    wrong = _differences(exported.config, back)
    if wrong:  # transformers read config.json otherwise than tfviz does
        raise ValueError(f"transformers reads the {exported.family.label} folder as another model "
                         f"({'; '.join(wrong)}): refused")
    if check:
        _check_logits(model, lambda ids: hf(ids).logits, exported.config)
    return hf


def _check_logits(model: Transformer, theirs, cfg: ModelConfig) -> None:
    """Refuse an export whose logits (``theirs(ids)``) differ from tfviz's on a probe input
    (never the pad id)."""
    n = min(8, cfg.max_positions or 8)
    ids = torch.randint(0, cfg.vocab_size, (1, n), generator=torch.Generator().manual_seed(0))
    if model.config.pad_id is not None:
        ids[ids == model.config.pad_id] = (model.config.pad_id + 1) % cfg.vocab_size
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            ours = model(ids.to(device)).float().cpu()
            other = theirs(ids).float().cpu()
    finally:
        model.train(was_training)
    diff = float((ours - other).abs().max())
    allowed = 1e-4 * max(1.0, float(ours.abs().max()))
    if not diff <= allowed:
        raise ValueError(f"the exported model's logits differ from tfviz's by {diff:.3g} (allowed "
                         f"{allowed:.3g}): refused")


ROLE_KEYS = {"pad": "pad_token", "unk": "unk_token", "bos": "bos_token", "eos": "eos_token",
             "mask": "mask_token", "sep": "sep_token", "cls": "cls_token"}  # tfviz role -> transformers


def tokenizer_files(tokenizer, max_len: int | None = None) -> dict[str, bytes]:
    """The files transformers reads a fast tokenizer from: tokenizer.json (``tokenizer``'s own
    definition, its ids exactly), tokenizer_config.json and special_tokens_map.json (the
    special tokens by role)."""
    roles = {ROLE_KEYS[r]: t for r, t in tokenizer.specials.items() if r in ROLE_KEYS}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", **roles, "clean_up_tokenization_spaces": False}
    if max_len is not None:
        config["model_max_length"] = max_len
    return {TOKENIZER: tokenizer.backend.to_str().encode(), TOKENIZER_CONFIG: _json(config),
            SPECIAL_TOKENS_MAP: _json(roles)}


def _json(data) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()


def _generation_config(cfg: ModelConfig, tokenizer) -> dict | None:
    """generation_config.json for a decoder: its special tokens' ids (where it has them)."""
    if cfg.arch != "decoder":
        return None
    ids = {f"{r}_token_id": tokenizer.special_id(r) for r in ("bos", "eos", "pad")} if tokenizer else {}
    return {"_from_model_config": True, **{k: v for k, v in ids.items() if v is not None}}


def write_folder(model: Transformer, out, tokenizer=None, task: dict | None = None, *,
                 check: bool = True, exported: Exported | None = None) -> Path:
    """Write ``model`` as a Hugging Face model folder ``out`` — config.json, model.safetensors,
    generation_config.json (a decoder), with ``tokenizer`` (a ``tfviz.Tokenizer``) its
    tokenizer.json, tokenizer_config.json and special_tokens_map.json, with ``task`` (a task spec)
    tfviz_task.json — without transformers. ``check``: the folder is read back by
    ``tfviz.from_pretrained`` and its logits compared with ``model``'s before it is moved into
    place (a refused export leaves nothing). Written into a hidden folder beside ``out``, then
    renamed: ``out`` appears whole or not at all. Refuses an ``out`` that exists and is not an
    empty folder (nothing is overwritten). -> the folder."""
    out = Path(out).expanduser()
    _free(out)
    if tokenizer is not None and tokenizer.vocab_size > model.config.vocab_size:
        raise ValueError(f"the tokenizer has {tokenizer.vocab_size} tokens, the model {model.config.vocab_size}")
    ex = exported or hf_tensors(model)
    tmp = out.with_name(f".{out.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:  # under a file, in /proc, a read-only place: one sentence (issue 29, defect 12)
        try:
            tmp.mkdir()
        except FileNotFoundError:  # a new parent folder: made, then the hidden one inside it
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp.mkdir()
    except OSError as e:
        raise ValueError(f"cannot make the folder {out}: {e.strerror or e}") from None
    try:
        files = {CONFIG: _json(ex.config_json)}
        if (gen := _generation_config(ex.config, tokenizer)) is not None:
            files[GENERATION_CONFIG] = _json(gen)
        if tokenizer is not None:
            files.update(tokenizer_files(tokenizer, ex.config.max_len))
        for name, data in files.items():
            storage.atomic_write(tmp / name, data)
        storage.write(tmp / WEIGHTS, {k: v.contiguous() for k, v in ex.tensors.items()}, {"format": "pt"})
        if task is not None:
            from . import taskfile

            taskfile.write(tmp, task, tokenizer, model.config)
        if check:
            from .load import from_pretrained

            back = from_pretrained(tmp, max_bytes=2**62)
            _check_logits(model, lambda ids: back.model(ids), ex.config)
        _free(out)
        if out.is_dir():
            out.rmdir()  # empty (checked): the finished folder takes its place
        os.replace(tmp, out)
    except OSError as e:  # a full disk, a folder made read-only meanwhile: one sentence, nothing left
        shutil.rmtree(tmp, ignore_errors=True)
        raise ValueError(f"cannot write the model into {out}: {e.strerror or e}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _free(out: Path) -> None:
    if out.is_symlink() and not out.exists():
        raise ValueError(f"{out} is a link to nothing ({os.readlink(out)}): pick a new folder")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out} already exists and is not an empty folder: pick a new one")


def write_checkpoint(ck, out, *, check: bool = True) -> Path:
    """A tfviz ``Checkpoint`` (a trained model: its model, tokenizer and task) as a folder ``out``
    (``write_folder``)."""
    return write_folder(ck.model, out, ck.tokenizer, ck.task, check=check)


def zip_folder(folder) -> bytes:
    """The folder's files as a zip, under a folder of its name (``unzip`` gives the folder):
    the weights stored as they are (float32 numbers hardly compress), the JSON files deflated."""
    folder = Path(folder)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for f in sorted(folder.iterdir()):
            if f.is_file():
                kind = zipfile.ZIP_STORED if f.suffix == ".safetensors" else zipfile.ZIP_DEFLATED
                z.write(f, f"{folder.name}/{f.name}", compress_type=kind)
    return buf.getvalue()


def export_zip(ck, name: str, *, check: bool = True) -> bytes:
    """``write_checkpoint`` into a temporary folder ``name``, as zip bytes (a download)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tfviz-export-") as tmp:
        return zip_folder(write_checkpoint(ck, Path(tmp) / name, check=check))


def export_folder(model: Transformer, out, tokenizer=None, task: dict | None = None) -> Path:
    """``write_folder`` (kept for ``python -m tfviz export`` and older callers)."""
    return write_folder(model, out, tokenizer, task)

