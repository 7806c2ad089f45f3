"""Tokenizers behind one interface, all built on the Hugging Face ``tokenizers`` library.

tfviz trains three kinds itself:

    kind   model                 pre-tokenizer                         decode(encode(x)) == x ?
    char   WordLevel over chars  Split("", isolated): every character  yes, if every char is in vocab
    word   WordLevel over words  Whitespace: \\w+ | [^\\w\\s]+            up to whitespace (tokens joined
                                                                       by one space), if every word is in vocab
    bpe    BPE (Sennrich 2016)   ByteLevel (GPT-2): bytes, never [UNK]  yes, for any text

and every tokenizer it trains has the same special tokens at fixed ids (checked on load):
    [PAD]=0 [UNK]=1 [BOS]=2 [EOS]=3 [MASK]=4 [SEP]=5 [CLS]=6
``lowercase=True`` adds a Lowercase normalizer; offsets still point into the *original* string.

A tokenizer read from a Hugging Face ``tokenizer.json`` (``tfviz.interop``) keeps its file's ids
and names its special tokens by role (``specials``: {"bos": "<|endoftext|>", ...}): GPT-2 has one
``<|endoftext|>`` at 50256 (its bos, eos and unk), BERT [PAD]=0 [UNK]=100 [CLS]=101 [SEP]=102
[MASK]=103, Llama ``<unk>``, ``<s>``, ``</s>``. Every special id is asked of the tokenizer
(``pad_id``, ``bos_id``, ..., None where the file has no such token; ``special_ids``), never
assumed. Its kind is "bpe" (byte-level: GPT-2, Llama 3, Qwen2), "wordpiece" (BERT) or
"sentencepiece" (Metaspace "▁" pieces with byte fallback: Llama 2, Mistral).

``Encoding.tokens`` are display strings (``display``): for char/word/wordpiece the (normalised)
vocabulary entry, for bpe the token's bytes decoded as UTF-8 (GPT-2's 'Ġ' becomes a real leading
space ' '; a token holding only part of a multi-byte character shows as '\\ufffd'), for
sentencepiece '▁' as a space and byte pieces '<0x0A>' as the character. ``Encoding.offsets`` are
(start, end) character offsets into the Python string, so ``text[start:end]`` is the token's
source span; byte-level pieces of one multi-byte character share that character's span. Added
specials get the empty spans (0, 0) and (len(text), len(text)).

Special-token literals, one rule for every kind: **a special token's literal in text is that
special token, both ways.** ``encode`` reads "[MASK]" (or GPT-2's "<|endoftext|>") typed in a text
as that special id (the Masks and MLM views rely on typing [MASK]; its offsets are the literal's
span), and ``decode`` writes every special id back as its literal, so the round trip above holds
for texts that contain "[PAD]", "[MASK]", … too. ``decode(ids, skip_special=True)`` leaves the
special ids out: for ids that carry markers nobody typed (an added [BOS], padding) when only the
words are wanted.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Iterable

from tokenizers import Tokenizer as _HFTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[BOS]", "[EOS]", "[MASK]", "[SEP]", "[CLS]")
ROLES = ("pad", "unk", "bos", "eos", "mask", "sep", "cls")  # what each of SPECIAL_TOKENS is for
KINDS = ("char", "word", "bpe")  # the kinds tfviz trains
IMPORTED_KINDS = ("wordpiece", "sentencepiece")  # kinds read from tokenizer.json files (and bpe)
SPECIAL_LITERAL = re.compile("|".join(map(re.escape, SPECIAL_TOKENS)))
FORMAT = "tfviz-tokenizer"
BPE_MIN_VOCAB = len(SPECIAL_TOKENS) + 256  # specials + the 256 byte symbols
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _sentencepiece_display(raw: str) -> str:
    """'▁the' -> ' the'; a byte-fallback piece '<0x0A>' -> '\\n' (an ASCII byte; others stay)."""
    m = _BYTE_PIECE.fullmatch(raw)
    if m and int(m[1], 16) < 0x80:
        return chr(int(m[1], 16))
    return raw.replace("\u2581", " ")


_BYTE_LEVEL = decoders.ByteLevel()
DISPLAY = {"bpe": lambda raw: _BYTE_LEVEL.decode([raw]), "sentencepiece": _sentencepiece_display}
"""kind -> how a (non-special) vocabulary entry is shown; kinds not listed show the entry itself."""


@dataclass(frozen=True)
class Encoding:
    ids: list[int]
    tokens: list[str]
    offsets: list[tuple[int, int]]

    def __len__(self) -> int:
        return len(self.ids)


class Tokenizer:
    """A thin, validated wrapper around a ``tokenizers.Tokenizer`` (the "backend").

    ``specials``: role ("pad", "unk", "bos", "eos", "mask", "sep", "cls") -> token string, for a
    tokenizer read from a file; None for tfviz's own (SPECIAL_TOKENS at ids 0..6, checked)."""

    def __init__(self, backend: _HFTokenizer, kind: str, lowercase: bool = False,
                 specials: Mapping[str, str] | None = None) -> None:
        if kind not in KINDS + IMPORTED_KINDS:
            raise ValueError(f"unknown tokenizer kind {kind!r}; expected one of {KINDS + IMPORTED_KINDS}")
        self.fixed_specials = specials is None
        if specials is None:
            for want, tok in enumerate(SPECIAL_TOKENS):
                got = backend.token_to_id(tok)
                if got != want:
                    raise ValueError(f"special token {tok} must have id {want}, found {got}")
            specials = dict(zip(ROLES, SPECIAL_TOKENS))
        else:
            specials = {role: tok for role, tok in dict(specials).items() if tok is not None}
            unknown = sorted(set(specials) - set(ROLES))
            if unknown:
                raise ValueError(f"unknown special-token role(s) {unknown}; roles are {ROLES}")
            missing = {role: tok for role, tok in specials.items() if backend.token_to_id(tok) is None}
            if missing:
                raise ValueError(f"special token(s) {missing} are not in the vocabulary")
        # The module's rule (a literal special in text is that token), for every backend, also one
        # loaded from a file: specials are matched in the raw text before anything else. Tokens a
        # file already marks special are left as they are (its ids stay exactly the file's).
        added = backend.get_added_tokens_decoder()
        marked = {t.content for t in added.values() if t.special}
        unmarked = [t for t in dict.fromkeys(specials.values()) if t not in marked]
        if unmarked:
            backend.add_special_tokens(unmarked)  # no new ids: they are in the vocab
            added = backend.get_added_tokens_decoder()
        self.backend = backend
        self.kind = kind
        self.lowercase = lowercase
        self.specials: dict[str, str] = specials
        self._role_ids = {role: backend.token_to_id(tok) for role, tok in specials.items()}
        self._special_ids = tuple(sorted({*self._role_ids.values(),
                                          *(i for i, t in added.items() if t.special)}))
        self._special_set = frozenset(self._special_ids)
        self._show = DISPLAY.get(kind)
        self._display: dict[int, str] = {}  # id -> display string (kinds with a DISPLAY rule)

    # -- vocabulary ------------------------------------------------------------------------
    def special_id(self, role: str) -> int | None:
        """The id of the special token for ``role`` ("pad", "bos", ...), None if there is none."""
        if role not in ROLES:
            raise ValueError(f"unknown special-token role {role!r}; roles are {ROLES}")
        return self._role_ids.get(role)

    pad_id = property(lambda self: self._role_ids.get("pad"))
    unk_id = property(lambda self: self._role_ids.get("unk"))
    bos_id = property(lambda self: self._role_ids.get("bos"))
    eos_id = property(lambda self: self._role_ids.get("eos"))
    mask_id = property(lambda self: self._role_ids.get("mask"))
    sep_id = property(lambda self: self._role_ids.get("sep"))
    cls_id = property(lambda self: self._role_ids.get("cls"))
    special_ids = property(lambda self: self._special_ids, doc="every special token's id, sorted")

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def id_to_token(self, i: int) -> str | None:
        """The raw vocabulary entry (for bpe: with GPT-2's byte symbols, e.g. 'Ġthe')."""
        return self.backend.id_to_token(int(i))

    def display(self, i: int) -> str:
        """The string shown for a token id (bpe: bytes decoded, 'Ġthe' -> ' the'; sentencepiece:
        '▁the' -> ' the'); special tokens as their literal."""
        i = int(i)
        raw = self.backend.id_to_token(i)
        if raw is None:
            return self.specials.get("unk", "[UNK]")
        if self._show is None or i in self._special_set:
            return raw
        if i not in self._display:
            self._display[i] = self._show(raw)
        return self._display[i]

    def tokens_of(self, ids: Iterable[int]) -> list[str]:
        return [self.display(i) for i in ids]

    # -- encode / decode -------------------------------------------------------------------
    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False,
               template: bool = False) -> Encoding:
        """Text -> ids, display tokens and character offsets (linear in len(text)).
        ``template``: add the special tokens the file's post-processor puts around a text, as
        the model saw them in training ([CLS] … [SEP] for BERT, <s> … for Llama; nothing for
        GPT-2 and tfviz's own tokenizers)."""
        enc = self.backend.encode(text, add_special_tokens=template)
        ids = list(enc.ids)
        tokens = list(enc.tokens) if self._show is None else self.tokens_of(ids)
        offsets = [tuple(o) for o in enc.offsets]
        for add, role, at in ((add_bos, "bos", 0), (add_eos, "eos", len(text))):
            if not add:
                continue
            i = self._role_ids.get(role)
            if i is None:
                raise ValueError(f"this tokenizer has no {role} token")
            if role == "bos":
                ids, tokens, offsets = [i] + ids, [self.display(i)] + tokens, [(at, at)] + offsets
            else:
                ids, tokens, offsets = ids + [i], tokens + [self.display(i)], offsets + [(at, at)]
        return Encoding(ids, tokens, offsets)

    def encode_ids(self, text: str) -> list[int]:
        """Just the ids (fast path for dataset generation)."""
        return list(self.backend.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Ids -> text, special ids as their literals ("[MASK]"), the inverse of ``encode``;
        ``skip_special=True`` leaves them out."""
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special)

    # -- serialisation ---------------------------------------------------------------------
    def fingerprint(self) -> str:
        """A hash of ``to_json()`` (computed once): equal for the same vocabulary, rules and
        specials — a cache key for things built with this tokenizer."""
        if getattr(self, "_fingerprint", None) is None:
            import hashlib

            self._fingerprint = hashlib.sha256(self.to_json().encode()).hexdigest()[:32]
        return self._fingerprint

    def to_json(self) -> str:
        data = {"format": FORMAT, "version": 1, "kind": self.kind, "lowercase": self.lowercase,
                "tokenizer": json.loads(self.backend.to_str())}
        if not self.fixed_specials:
            data["specials"] = self.specials
        return json.dumps(data)

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
        if data.get("kind") not in KINDS + IMPORTED_KINDS:
            raise ValueError(f"tokenizer kind must be one of {KINDS + IMPORTED_KINDS}, got {data.get('kind')!r}")
        specials = data.get("specials")
        if specials is not None and not (isinstance(specials, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in specials.items())):
            raise ValueError("tokenizer \"specials\" must map roles to token strings")
        try:
            backend = _HFTokenizer.from_str(json.dumps(data["tokenizer"]))
        except Exception as e:  # the Rust side raises plain Exception
            raise ValueError(f"invalid tokenizer definition: {e}") from None
        return cls(backend, data["kind"], bool(data.get("lowercase", False)), specials)

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
