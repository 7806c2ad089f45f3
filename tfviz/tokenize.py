"""Three tokenizers behind one interface, all built with the Hugging Face ``tokenizers`` library.

    kind   model                 pre-tokenizer                         decode(encode(x)) == x ?
    char   WordLevel over chars  Split("", isolated): every character  yes, if every char is in vocab
    word   WordLevel over words  Whitespace: \\w+ | [^\\w\\s]+            up to whitespace (tokens joined
                                                                       by one space), if every word is in vocab
    bpe    BPE (Sennrich 2016)   ByteLevel (GPT-2): bytes, never [UNK]  yes, for any text

Every tokenizer has the same special tokens at fixed ids (checked on load):
    [PAD]=0 [UNK]=1 [BOS]=2 [EOS]=3 [MASK]=4 [SEP]=5 [CLS]=6
``lowercase=True`` adds a Lowercase normalizer; offsets still point into the *original* string.

``Encoding.tokens`` are display strings: for char/word the (normalised) surface form, for bpe the
token's bytes decoded as UTF-8 (GPT-2's 'Ġ' becomes a real leading space ' '; a token holding only
part of a multi-byte character shows as '\\ufffd'). ``Encoding.offsets`` are (start, end) character
offsets into the Python string, so ``text[start:end]`` is the token's source span; byte-level pieces
of one multi-byte character share that character's span. Added [BOS]/[EOS] get the empty spans
(0, 0) and (len(text), len(text)).

Special-token literals, one rule for every kind: **a special token's literal in text is that
special token, both ways.** ``encode`` reads "[MASK]" typed in a text as the [MASK] id (the Masks
and MLM views rely on typing [MASK]; its offsets are the literal's span), and ``decode`` writes
every special id back as its literal, so the round trip above holds for texts that contain
"[PAD]", "[MASK]", … too. ``decode(ids, skip_special=True)`` leaves the special ids out: for ids
that carry markers nobody typed (an added [BOS], padding) when only the words are wanted.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Iterable

from tokenizers import Tokenizer as _HFTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[BOS]", "[EOS]", "[MASK]", "[SEP]", "[CLS]")
KINDS = ("char", "word", "bpe")
SPECIAL_LITERAL = re.compile("|".join(map(re.escape, SPECIAL_TOKENS)))
FORMAT = "tfviz-tokenizer"
BPE_MIN_VOCAB = len(SPECIAL_TOKENS) + 256  # specials + the 256 byte symbols


@dataclass(frozen=True)
class Encoding:
    ids: list[int]
    tokens: list[str]
    offsets: list[tuple[int, int]]

    def __len__(self) -> int:
        return len(self.ids)


class Tokenizer:
    """A thin, validated wrapper around a ``tokenizers.Tokenizer`` (the "backend")."""

    def __init__(self, backend: _HFTokenizer, kind: str, lowercase: bool = False) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown tokenizer kind {kind!r}; expected one of {KINDS}")
        for want, tok in enumerate(SPECIAL_TOKENS):
            got = backend.token_to_id(tok)
            if got != want:
                raise ValueError(f"special token {tok} must have id {want}, found {got}")
        # The module's rule (a literal "[MASK]" in text is the [MASK] token), for every backend,
        # also one loaded from a file: specials are matched in the raw text before anything else.
        backend.add_special_tokens(list(SPECIAL_TOKENS))  # no new ids: they are in the vocab
        self.backend = backend
        self.kind = kind
        self.lowercase = lowercase
        self._display: dict[int, str] = {}  # id -> display string (bpe only)
        self._byte_decoder = decoders.ByteLevel()

    # -- vocabulary ------------------------------------------------------------------------
    pad_id = property(lambda self: 0)
    unk_id = property(lambda self: 1)
    bos_id = property(lambda self: 2)
    eos_id = property(lambda self: 3)
    mask_id = property(lambda self: 4)
    sep_id = property(lambda self: 5)
    cls_id = property(lambda self: 6)
    special_ids = property(lambda self: tuple(range(len(SPECIAL_TOKENS))))

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def id_to_token(self, i: int) -> str | None:
        """The raw vocabulary entry (for bpe: with GPT-2's byte symbols, e.g. 'Ġthe')."""
        return self.backend.id_to_token(int(i))

    def display(self, i: int) -> str:
        """The string shown for a token id (bpe: bytes decoded, 'Ġthe' -> ' the')."""
        raw = self.backend.id_to_token(int(i))
        if raw is None:
            return "[UNK]"
        if self.kind != "bpe" or i < len(SPECIAL_TOKENS):
            return raw
        if i not in self._display:
            self._display[i] = self._byte_decoder.decode([raw])
        return self._display[i]

    def tokens_of(self, ids: Iterable[int]) -> list[str]:
        return [self.display(i) for i in ids]

    # -- encode / decode -------------------------------------------------------------------
    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> Encoding:
        """Text -> ids, display tokens and character offsets (linear in len(text))."""
        enc = self.backend.encode(text, add_special_tokens=False)
        ids = list(enc.ids)
        tokens = list(enc.tokens) if self.kind != "bpe" else self.tokens_of(ids)
        offsets = [tuple(o) for o in enc.offsets]
        if add_bos:
            ids, tokens, offsets = [self.bos_id] + ids, ["[BOS]"] + tokens, [(0, 0)] + offsets
        if add_eos:
            n = len(text)
            ids, tokens, offsets = ids + [self.eos_id], tokens + ["[EOS]"], offsets + [(n, n)]
        return Encoding(ids, tokens, offsets)

    def encode_ids(self, text: str) -> list[int]:
        """Just the ids (fast path for dataset generation)."""
        return list(self.backend.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Ids -> text, special ids as their literals ("[MASK]"), the inverse of ``encode``;
        ``skip_special=True`` leaves them out."""
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special)

    # -- serialisation ---------------------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "version": 1, "kind": self.kind,
                           "lowercase": self.lowercase,
                           "tokenizer": json.loads(self.backend.to_str())})

    @classmethod
    def from_json(cls, s: str) -> "Tokenizer":
        """Inverse of ``to_json``; raises ValueError on anything malformed (user-uploaded files)."""
        try:
            data = json.loads(s)
        except (TypeError, ValueError) as e:
            raise ValueError(f"tokenizer JSON could not be parsed: {e}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not a tfviz tokenizer (expected \"format\": \"{FORMAT}\")")
        if not isinstance(data.get("tokenizer"), dict):
            raise ValueError("tokenizer JSON lacks the \"tokenizer\" definition")
        if data.get("kind") not in KINDS:
            raise ValueError(f"tokenizer kind must be one of {KINDS}, got {data.get('kind')!r}")
        try:
            backend = _HFTokenizer.from_str(json.dumps(data["tokenizer"]))
        except Exception as e:  # the Rust side raises plain Exception
            raise ValueError(f"invalid tokenizer definition: {e}") from None
        return cls(backend, data["kind"], bool(data.get("lowercase", False)))

    def __repr__(self) -> str:
        return f"Tokenizer(kind={self.kind!r}, vocab_size={self.vocab_size}, lowercase={self.lowercase})"


# -- construction -------------------------------------------------------------------------
def _backend(kind: str, model, lowercase: bool) -> _HFTokenizer:
    tok = _HFTokenizer(model)
    if lowercase:
        tok.normalizer = normalizers.Lowercase()
    if kind == "char":
        tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
        tok.decoder = decoders.Fuse()
    elif kind == "word":
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
    return tok


def train_tokenizer(kind: str, texts: Iterable[str], vocab_size: int | None = None,
                    lowercase: bool = False, min_frequency: int = 0) -> Tokenizer:
    """Train a tokenizer of ``kind`` on in-memory texts.

    vocab_size: for bpe the target size including specials (required, >= 263: 7 specials + 256
    bytes; a small corpus may stop short of it); for char/word an optional cap that keeps the most
    frequent symbols (None = keep all).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown tokenizer kind {kind!r}; expected one of {KINDS}")
    if isinstance(texts, str):
        texts = [texts]
    specials = list(SPECIAL_TOKENS)
    if kind == "bpe":
        if vocab_size is None or vocab_size < BPE_MIN_VOCAB:
            raise ValueError(f"byte-level BPE needs vocab_size >= {BPE_MIN_VOCAB} "
                             f"({len(SPECIAL_TOKENS)} special tokens + 256 bytes), got {vocab_size}")
        backend = _backend(kind, models.BPE(), lowercase)
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                      min_frequency=min_frequency, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    else:
        backend = _backend(kind, models.WordLevel(unk_token="[UNK]"), lowercase)
        extra = {} if vocab_size is None else {"vocab_size": vocab_size}
        trainer = trainers.WordLevelTrainer(special_tokens=specials, min_frequency=min_frequency,
                                            show_progress=False, **extra)
    # Trained as it will be read: a special literal in a text is its special token, not text, so
    # the pieces around it are trained on their own ("it:[MASK]" teaches ":" as it is read, alone).
    backend.train_from_iterator((p for t in texts for p in SPECIAL_LITERAL.split(t) if p), trainer)
    return Tokenizer(backend, kind, lowercase)


def vocab_tokenizer(words: Iterable[str], kind: str = "word", lowercase: bool = False) -> Tokenizer:
    """A char/word tokenizer with exactly ``words`` at ids 7, 8, ... in the given order
    (generated tasks use it so token ids follow e.g. numeric order)."""
    if kind not in ("char", "word"):
        raise ValueError("vocab_tokenizer builds 'char' or 'word' tokenizers")
    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    for w in words:
        vocab.setdefault(w, len(vocab))
    backend = _backend(kind, models.WordLevel(vocab=vocab, unk_token="[UNK]"), lowercase)
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    return Tokenizer(backend, kind, lowercase)


def compare_tokenizers(text: str, corpus_texts: Iterable[str], bpe_vocab_size: int = 400,
                       lowercase: bool = False) -> list[dict]:
    """Tokenize ``text`` under char, word and bpe tokenizers trained on ``corpus_texts``.

    Returns one dict per kind: kind, tokens, ids, offsets, count, vocab_size, unknowns
    (number of [UNK] tokens; always 0 for byte-level bpe) and chars_per_token.
    ``text`` is not added to the training corpus, so unseen words/characters show up as [UNK].
    """
    corpus = list(corpus_texts)
    rows = []
    for kind in KINDS:
        tok = train_tokenizer(kind, corpus, bpe_vocab_size if kind == "bpe" else None, lowercase)
        enc = tok.encode(text)
        rows.append({
            "kind": kind, "tokens": enc.tokens, "ids": enc.ids, "offsets": enc.offsets,
            "count": len(enc.ids), "vocab_size": tok.vocab_size,
            "unknowns": sum(i == tok.unk_id for i in enc.ids),
            "chars_per_token": len(text) / max(len(enc.ids), 1),
        })
    return rows
