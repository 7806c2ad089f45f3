"""A folder's ``tokenizer.json`` (+ ``tokenizer_config.json``) as a tfviz ``Tokenizer``.

The ids are exactly the file's (``tokenizers.Tokenizer.from_file`` gives the same ones); the
special tokens are named by role ("bos", "eos", "unk", "pad", "mask", "sep", "cls"), for each role
from the first of: tokenizer_config.json's ``{role}_token``, special_tokens_map.json's, config.json's
``{role}_token_id``, the model's own unk token, and a special token of the file spelled the
conventional way ([CLS], [SEP], [MASK], <s>, </s>, <unk>, <pad>, ...; older BERT folders name
their specials nowhere else). The kind follows from the file: a byte-level BPE is "bpe" (GPT-2, Llama 3,
Qwen2), a WordPiece model "wordpiece" (BERT), a BPE/Unigram over Metaspace "▁" pieces
"sentencepiece" (Llama 2, Mistral).
"""
from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer

from .. import limits, storage
from ..tokenize import ROLES, Tokenizer, TokenizerError, build, canonical
from .folder import ModelFolderError, tokenizer_json_max_bytes


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


CONVENTIONAL = {"pad": ("[PAD]", "<pad>"), "unk": ("[UNK]", "<unk>"), "bos": ("<s>", "[BOS]"),
                "eos": ("</s>", "[EOS]"), "mask": ("[MASK]", "<mask>"), "sep": ("[SEP]",),
                "cls": ("[CLS]",)}
"""role -> the usual spellings, recognised among a file's special tokens when nothing names them."""


def specials_of(backend: HFTokenizer, spec: dict, *configs: dict, model_config: dict) -> dict[str, str]:
    """role -> token string, for the roles the files name (and the vocabulary holds); ``configs``:
    tokenizer_config.json, special_tokens_map.json (first wins)."""
    marked = {t.content for t in backend.get_added_tokens_decoder().values() if t.special}
    out = {}
    for role in ROLES:
        found = [_content(c.get(f"{role}_token")) for c in configs]
        i = model_config.get(f"{role}_token_id")
        found.append(backend.id_to_token(i) if isinstance(i, int) and not isinstance(i, bool)
                     and 0 <= i < 2**31 else None)
        if role == "unk":
            found.append(_content((spec.get("model") or {}).get("unk_token")))
        found += [t for t in CONVENTIONAL[role] if t in marked]
        token = next((t for t in found if t is not None and backend.token_to_id(t) is not None), None)
        if token is not None:
            out[role] = token
    return out


STRINGS_PER_TOKEN, SPARE_STRINGS = 8, 10_000
"""A tokenizer.json for V tokens holds about V strings (its vocabulary) + 1-2 per merge + a few for
its settings: Llama 3's 5.4 per token, Qwen2's 3, GPT-2's 2. More is refused before parsing."""


def read_spec(path: Path, max_tokens: int | None = None) -> tuple[str, dict]:
    """(text, parsed) of a tokenizer.json, bounded before it is parsed (``TFVIZ_TOKENIZER_MAX_MB``,
    ``limits.TOKENIZER_CONTAINERS`` brackets, ``storage.MAX_JSON_DEPTH`` levels), every component
    one tfviz knows (``tokenize.canonical``: known types, checked parameters, a pre-tokenizer regex
    equal to a known one, growth within ``TFVIZ_TOKENIZER_MAX_GROWTH``; the folder listing shows
    the reason); with
    ``max_tokens`` (the model's vocab_size) a vocabulary larger than the model's is refused before
    the tokenizers library builds it (3M tokens took it 28 s and 1.5 GB)."""
    limit = tokenizer_json_max_bytes()
    try:
        text = storage.read_text(path, "tokenizer.json", max_bytes=limit)
        if max_tokens is not None:  # counted in C, before json.loads holds the GIL for seconds
            strings = (text.count('"') - text.count('\\"')) // 2
            most = STRINGS_PER_TOKEN * max_tokens + SPARE_STRINGS
            if strings > most:
                raise ModelFolderError(f"{path}: tokenizer.json holds about {strings:,} strings; a tokenizer "
                                       f"for the model's {max_tokens:,} embeddings needs at most {most:,}")
        spec = storage.loads(text, path, "tokenizer.json", max_bytes=limit,
                             max_containers=limits.TOKENIZER_CONTAINERS, bound="tfviz reads at most")
    except storage.CheckpointError as e:
        raise ModelFolderError(str(e)) from None
    model = spec.get("model") if isinstance(spec, dict) else None
    if not isinstance(model, dict):
        raise ModelFolderError(f"{path}: not a tokenizer.json (it needs a \"model\" object)")
    try:  # any component tfviz does not know: refused before anything is built
        canonical(spec, max_growth=limits.tokenizer_max_growth())
    except TokenizerError as e:
        raise ModelFolderError(f"{path}: {e}") from None
    vocab = model.get("vocab")
    n = len(vocab) if isinstance(vocab, (dict, list)) else 0
    if max_tokens is not None and n > max_tokens:
        raise ModelFolderError(f"{path}: tokenizer.json has {n:,} tokens but the model only "
                               f"{max_tokens:,} embeddings")
    return text, spec


def load_tokenizer(path: Path, tokenizer_config: dict, model_config: dict,
                   special_tokens_map: dict | None = None, max_tokens: int | None = None) -> Tokenizer:
    """The folder's tokenizer (``read_spec`` bounds the file; ``max_tokens``: the model's vocab_size)."""
    text, spec = read_spec(path, max_tokens)
    try:  # rebuilt by tfviz from the file's data, never run as the file writes it
        backend = build(spec, max_growth=limits.tokenizer_max_growth())
    except TokenizerError as e:
        raise ModelFolderError(f"{path}: the tokenizers library cannot read it ({str(e)[:300]})") from None
    try:
        specials = specials_of(backend, spec, tokenizer_config, special_tokens_map or {},
                               model_config=model_config)
        return Tokenizer(backend, kind_of(spec), specials=specials, **limits.tokenizer_bounds())
    except ModelFolderError:
        raise
    except TokenizerError as e:  # rules that can grow a text without bound, or backtrack
        raise ModelFolderError(f"{path}: {e}") from None
    except (ValueError, TypeError, AttributeError, KeyError, OverflowError) as e:
        raise ModelFolderError(f"{path}: its special tokens cannot be read ({type(e).__name__}: "
                               f"{str(e)[:300]})") from None
