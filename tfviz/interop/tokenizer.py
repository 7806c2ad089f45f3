"""A folder's ``tokenizer.json`` (+ ``tokenizer_config.json``) as a tfviz ``Tokenizer``.

The ids are exactly the file's (``tokenizers.Tokenizer.from_file`` gives the same ones); the
special tokens are named by role from tokenizer_config.json's ``bos_token``, ``eos_token``,
``unk_token``, ``pad_token``, ``mask_token``, ``sep_token``, ``cls_token`` (else from config.json's
``*_token_id``). The kind follows from the file: a byte-level BPE is "bpe" (GPT-2, Llama 3,
Qwen2), a WordPiece model "wordpiece" (BERT), a BPE/Unigram over Metaspace "▁" pieces
"sentencepiece" (Llama 2, Mistral).
"""
from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer

from ..tokenize import ROLES, Tokenizer
from .folder import ModelFolderError


def _walk(node) -> list[str]:
    """Every "type" named anywhere in a tokenizer.json component (they nest in Sequences)."""
    if isinstance(node, dict):
        return ([node["type"]] if isinstance(node.get("type"), str) else []) + [
            t for v in node.values() for t in _walk(v)]
    if isinstance(node, list):
        return [t for v in node for t in _walk(v)]
    return []


def kind_of(spec: dict) -> str:
    """"bpe" | "wordpiece" | "sentencepiece" | "word" from a parsed tokenizer.json."""
    model = (spec.get("model") or {}).get("type")
    parts = set(_walk([spec.get("pre_tokenizer"), spec.get("decoder"), spec.get("normalizer")]))
    if model == "WordPiece":
        return "wordpiece"
    if model == "BPE" and "ByteLevel" in parts:
        return "bpe"
    if model in ("BPE", "Unigram"):
        return "sentencepiece"  # Metaspace / Replace("▁") pieces, usually with byte fallback
    if model == "WordLevel":
        return "word"
    raise ModelFolderError(f"tokenizer.json: a {model!r} model is not supported (tfviz reads BPE, "
                           "WordPiece, Unigram and WordLevel tokenizers)")


def _content(value) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def specials_of(backend: HFTokenizer, tokenizer_config: dict, model_config: dict) -> dict[str, str]:
    """role -> token string, for the roles the files name (and the vocabulary holds)."""
    out = {}
    for role in ROLES:
        token = _content(tokenizer_config.get(f"{role}_token"))
        if token is None:
            i = model_config.get(f"{role}_token_id")
            token = backend.id_to_token(i) if isinstance(i, int) and not isinstance(i, bool) else None
        if token is not None and backend.token_to_id(token) is not None:
            out[role] = token
    return out


def load_tokenizer(path: Path, tokenizer_config: dict, model_config: dict) -> Tokenizer:
    try:
        text = path.read_text(encoding="utf-8")
        spec = json.loads(text)
        backend = HFTokenizer.from_str(text)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ModelFolderError(f"{path}: not a readable tokenizer.json ({e})") from None
    except Exception as e:  # the Rust side raises plain Exception
        raise ModelFolderError(f"{path}: the tokenizers library cannot read it ({e})") from None
    return Tokenizer(backend, kind_of(spec), specials=specials_of(backend, tokenizer_config, model_config))
