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
from typing import Iterable, Iterator

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
_RUN_START = re.compile(r"(?<=\S)\s")  # where a long text is cut into pieces


def _sentencepiece_display(raw: str) -> str:
    """'▁the' -> ' the'; a byte-fallback piece '<0x0A>' -> '\\n' (an ASCII byte; others stay)."""
    m = _BYTE_PIECE.fullmatch(raw)
    if m and int(m[1], 16) < 0x80:
        return chr(int(m[1], 16))
    return raw.replace("\u2581", " ")


_BYTE_LEVEL = decoders.ByteLevel()
DISPLAY = {"bpe": lambda raw: _BYTE_LEVEL.decode([raw]), "sentencepiece": _sentencepiece_display}
"""kind -> how a (non-special) vocabulary entry is shown; kinds not listed show the entry itself."""


# -- what tfviz reads: a tokenizer file by construction (issue 40) -------------------------
# A tokenizer.json is a program in a small language: normalizers, a pre-tokenizer with its regex
# engine, a model, a post-processor and a decoder, each with parameters. Bounding what each term
# may do lost four ways (a decoder Sequence of Replaces, a post-processor's special token standing
# for 200,000 ids, a regex with a subexpression call, a WordPiece word of 10^9 characters). So a
# file is no longer run: tfviz reads it as *data* — its vocabulary, merges, added tokens — and the
# names of known components, and ``canonical`` writes a new tokenizer.json of its own from them,
# each component one of the pipelines tfviz knows (its own kinds, byte-level BPE, WordPiece,
# SentencePiece BPE / Unigram), with every parameter checked against its known values or bounds
# and a pre-tokenizer regex only when it EQUALS a known one (``KNOWN_SPLITS``). Anything else is
# refused at load with one sentence naming the component. The tokenizers library then builds
# that file. Defence in depth: ``Tokenizer.__init__`` checks any backend's components the same
# way (also one built in this process), ``encode`` reads at most ``max_chars`` characters a page
# and ``piece_chars`` a call, ``decode`` at most ``max_decode_ids`` ids a call, and whatever the
# library raises, a panic included, is a ``TokenizerError``: "this tokenizer cannot read this
# text". ``tfviz.limits`` holds the configurable numbers (the defaults below are its).
DEFAULT_MAX_GROWTH = 1000           # limits.tokenizer_max_growth()
DEFAULT_MAX_NORMALIZED = 1_000_000  # limits.tokenizer_max_chars()
CANNOT_READ = "this tokenizer cannot read this text"
GROWTH = {"NFC": 3, "NFD": 4, "NFKC": 18, "NFKD": 18, "Lowercase": 2, "ByteLevel": 4, "Strip": 1,
          "StripAccents": 1, "Nmt": 1, "BertNormalizer": 4}
"""Normalizer type -> the most characters it makes of one (the ``tokenizers`` library's own
normalizers run on every code point: NFKC turns U+FDFA into 18, NFD U+1F82 into 4, Lowercase
U+0130 into 2, ByteLevel a 4-byte character into 4; BERT's: spaces around a CJK character 3)."""
PRE_GROWTH = {"ByteLevel": 5, "Metaspace": 2, "Split": 1, "Whitespace": 1, "WhitespaceSplit": 1,
              "BertPreTokenizer": 1, "Punctuation": 1, "Digits": 1, "UnicodeScripts": 1}
"""Pre-tokenizer type -> the most characters it makes of one (ByteLevel: 4 bytes and a prefix
space; Metaspace: a '▁' before a piece)."""
KNOWN_SPLITS = {
    # GPT-2 (ByteLevel's own regex, also written out as a Split)
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+": 1,
    # Llama 3
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+": 2,
    # Qwen2
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+": 2,
    # GPT-4o (o200k)
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+": 2,
    # BLOOM
    r" ?[^(\s|[.,!?…。，、।۔،])]+": 1,
}
"""The pre-tokenizer regexes tfviz reads (a Split's pattern must equal one), each with its degree:
the most unbounded repetitions in one alternative (a search costs about n^(degree+1) steps on a
text of n characters that makes it fail late, so ``piece_chars`` reads degree 2 in short pieces)."""
STEPS_PER_CHAR = 4096
"""What one character of text may cost a regex of degree k: it reads pieces of at most
STEPS_PER_CHAR ** (1 / k) characters (k = 1: 4,096; k = 2: 64)."""
SHORT = 16              # a string parameter: a prefix, a suffix, a literal split, a replacement
MAX_PARTS = 8           # components in one Sequence; items in a template
MAX_SPECIAL_IDS = 4     # ids one post-processor special token stands for (BERT's, Llama's: 1)
MAX_WORD_CHARS = 100    # WordPiece's max_input_chars_per_word (BERT's; its cost is cubic in it: 200 held 20,000 characters 2 s)
MAX_TOKEN_CHARS = 1024  # one vocabulary entry or added token
MAX_PIECE_CHARS = 64    # one Unigram piece (sentencepiece trains at most 16; its lattice costs text x this:
                        # pieces of 1,024 'a's held 20,000 typed 'a's 3.7 s, of 256: 0.5 s, loaded machine)
MAX_SPECIAL_CHARS = 64  # a special token's name (unk_token, a template's token)
MIN_DECODE_IDS = 4096   # ``Tokenizer.max_decode_ids`` is never below this
GIL_FREE_CHARS = 1024   # a longer text is encoded with the GIL released (``Tokenizer._encode_one``)
BEHAVIORS = ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous")


KIND_MODELS = {"char": ("WordLevel",), "word": ("WordLevel",), "bpe": ("BPE",), "wordpiece": ("WordPiece",),
               "sentencepiece": ("BPE", "Unigram")}
"""kind -> the models a tokenizer of that kind has."""


class TokenizerError(ValueError):
    """A text this tokenizer does not read: longer than it reads at once, or one the tokenizers
    library fails (or panics) on; a tokenizer file tfviz does not read. A ``ValueError``: pages
    show it as a message."""


@dataclass(frozen=True)
class Rules:
    """What a tokenizer's rules can do to a text of n characters: at most ``growth`` * n +
    ``extra`` characters after its normalizer and pre-tokenizer; ``why``: the components that
    grow it; ``degree``: the degree of its pre-tokenizer regex (``KNOWN_SPLITS``; 0: none)."""
    growth: int = 1
    extra: int = 0
    why: tuple[str, ...] = ()
    degree: int = 0

    def then(self, growth: int, extra: int = 0, why: str | None = None) -> "Rules":
        """These rules followed by a step making at most growth * n + extra of n characters."""
        return Rules(self.growth * growth, self.extra * growth + extra,
                     self.why + ((why,) if why and growth > 1 else ()), self.degree)

    def regex(self, pattern: str, where: str) -> "Rules":
        """These rules with ``pattern`` run too (``TokenizerError`` unless it is a known one)."""
        risk, degree = regex_bound(pattern)
        if risk:
            raise TokenizerError(f"the tokenizer's {where} {risk}")
        return Rules(self.growth, self.extra, self.why, max(self.degree, degree))

    @property
    def piece_chars(self) -> int | None:
        """The longest text its regexes should search at once (``STEPS_PER_CHAR``), None: any."""
        return int(STEPS_PER_CHAR ** (1 / self.degree) + 1e-9) if self.degree else None


def regex_bound(pattern: str) -> tuple[str | None, int]:
    """(why tfviz does not read ``pattern``, or None; its degree): a regex is read only when it
    equals one of ``KNOWN_SPLITS`` (GPT-2, Llama 3, Qwen2, GPT-4o, BLOOM)."""
    if pattern in KNOWN_SPLITS:
        return None, KNOWN_SPLITS[pattern]
    return (f"regex {pattern[:80]!r} is not one tfviz knows (it reads the pre-tokenizer regexes of "
            "GPT-2, Llama 3, Qwen2, GPT-4o and BLOOM as they are written)"), 0


def regex_risk(pattern: str) -> str | None:
    """Why tfviz does not read ``pattern`` (``regex_bound``), or None."""
    return regex_bound(pattern)[0]


class _Refused(Exception):
    """A component tfviz does not read: the sentence without "the tokenizer's"."""


def _refuse(where: str, what: str) -> None:
    raise _Refused(f"{where} {what}")


def _name(node) -> str:
    t = node.get("type") if isinstance(node, dict) else None
    return repr(t[:40]) if isinstance(t, str) else ("a component without a type" if node is not None else "null")


def _fields(node, where: str, checks: dict) -> dict:
    """A new component of ``node``'s type holding exactly the fields of ``checks`` (field ->
    (default, check)): each present field checked (``check(value) -> value`` or raises
    ``_Refused``), absent ones the default; a field tfviz does not know is refused."""
    t = node["type"]
    extra = sorted(set(node) - set(checks) - {"type"})
    if extra:
        _refuse(where, f"{t} has the field {extra[0][:40]!r}, which tfviz does not know")
    out = {"type": t}
    for key, (default, check) in checks.items():
        value = node.get(key, default)
        try:
            out[key] = check(value)
        except _Refused as e:
            _refuse(where, f"{t}'s {key} {e}")
    return out


def _bool(v):
    if not isinstance(v, bool):
        raise _Refused(f"must be true or false, not {str(v)[:20]!r}")
    return v


def _maybe_bool(v):
    return None if v is None else _bool(v)


def _short(v, most: int = SHORT, empty: bool = True):
    if not isinstance(v, str) or len(v) > most or (not v and not empty):
        raise _Refused(f"must be a string of {'' if empty else '1 to '}at most {most} characters, "
                       f"not {str(v)[:24]!r}")
    return v


def _maybe_short(v, most: int = SHORT):
    return None if v is None else _short(v, most)


def _one_of(*values):
    def check(v):
        if v not in values:
            raise _Refused(f"must be one of {', '.join(map(repr, values))}, not {str(v)[:24]!r}")
        return v
    return check


def _int(lo: int, hi: int):
    def check(v):
        if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
            raise _Refused(f"must be a whole number from {lo:,} to {hi:,}, not {str(v)[:24]!r}")
        return v
    return check


def _literal(v, regex_ok: bool = False):
    """A Replace / Split pattern: {"String": s} with a short s (a regex: never, here)."""
    if isinstance(v, dict) and set(v) == {"String"}:
        return {"String": _short(v["String"])}
    if isinstance(v, dict) and set(v) == {"Regex"} and regex_ok:
        return {"Regex": v["Regex"]}
    raise _Refused("must be a literal string of at most 16 characters" +
                   (" or a known regex" if regex_ok else "") + f", not {str(v)[:40]!r}")


def _sequence(node, where: str, key: str, one) -> list:
    items = node.get(key)
    if not isinstance(items, list) or len(items) > MAX_PARTS:
        _refuse(where, f"Sequence must list at most {MAX_PARTS} components in {key!r}")
    extra = sorted(set(node) - {"type", key})
    if extra:
        _refuse(where, f"Sequence has the field {extra[0][:40]!r}, which tfviz does not know")
    return [one(child) for child in items]


def _precompiled_growth(node: dict) -> int:
    """A sentencepiece charsmap (Precompiled): the longest replacement it holds (a 4-byte trie
    size, the trie, then NUL-terminated replacements); ValueError when it cannot be read."""
    import base64
    import struct

    blob = base64.b64decode(node.get("precompiled_charsmap") or "", validate=False)
    if len(blob) < 4:
        return 1
    (trie,) = struct.unpack("<I", blob[:4])
    if 4 + trie > len(blob):
        raise ValueError("its Precompiled normalizer's charsmap is truncated")
    return max([1, *(len(s.decode("utf-8", "replace")) for s in blob[4 + trie:].split(b"\0"))])


def _normalizer(node, rules: list[Rules]) -> dict:
    """The known normalizer ``node`` is, rebuilt; ``rules[0]`` grown by it."""
    where, t = "normalizer", node.get("type") if isinstance(node, dict) else None
    if t == "Sequence":
        return {"type": "Sequence", "normalizers": _sequence(node, where, "normalizers",
                                                             lambda c: _normalizer(c, rules))}
    if t in ("NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents", "Nmt", "ByteLevel"):
        out = _fields(node, where, {})
    elif t == "Strip":
        out = _fields(node, where, {"strip_left": (True, _bool), "strip_right": (True, _bool)})
    elif t == "BertNormalizer":
        out = _fields(node, where, {"clean_text": (True, _bool), "handle_chinese_chars": (True, _bool),
                                    "strip_accents": (None, _maybe_bool), "lowercase": (True, _bool)})
    elif t == "Prepend":  # once before each piece between special tokens (each >= 1 character)
        out = _fields(node, where, {"prepend": (None, lambda v: _short(v, 4, empty=False))})
        extra = len(out["prepend"])
        rules[0] = rules[0].then(1 + extra, extra, f"normalizer Prepend ({extra} characters)")
        return out
    elif t == "Replace":  # Llama 2's " " -> "▁": a literal for a literal, never a regex
        out = _fields(node, where, {"pattern": (None, _literal),
                                    "content": (None, lambda v: _short(v, 4))})
        pat, content = out["pattern"]["String"], out["content"]
        if not pat:
            _refuse(where, "Replace of an empty string is not one tfviz knows")
        growth = max(1, -(-len(content) // len(pat)))
        rules[0] = rules[0].then(growth, 0, f"normalizer Replace {pat!r} -> {len(content)} characters")
        return out
    elif t == "Precompiled":  # a sentencepiece charsmap: data, its growth its longest replacement
        out = _fields(node, where, {"precompiled_charsmap": (None, lambda v: v if isinstance(v, str) else
                                                             _short(None))})
        rules[0] = rules[0].then(_precompiled_growth(out), 0, "Precompiled normalizer")
        return out
    else:
        _refuse(where, f"has a component of type {_name(node)} that tfviz does not read (it reads "
                       "NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Nmt, BertNormalizer, "
                       "Prepend, Replace of a literal, Precompiled, ByteLevel and Sequences of them)")
    rules[0] = rules[0].then(GROWTH.get(t, 1), 0, f"{t} normalizer")
    return out


_METASPACE = {"replacement": ("\u2581", lambda v: _short(v, 1, empty=False)),
              "prepend_scheme": ("always", _one_of("always", "never", "first")),
              "split": (True, _bool)}
_BYTE_LEVEL_FIELDS = {"add_prefix_space": (True, _bool), "trim_offsets": (True, _bool),
                      "use_regex": (True, _bool)}


def _metaspace(node, where: str) -> dict:
    node = dict(node)
    if "add_prefix_space" in node:  # the older spelling (tokenizers < 0.19)
        legacy = node.pop("add_prefix_space")
        if not isinstance(legacy, bool):
            _refuse(where, "Metaspace's add_prefix_space must be true or false")
        node.setdefault("prepend_scheme", "always" if legacy else "never")
    node.pop("str_rep", None)  # the older copy of replacement
    return _fields(node, where, _METASPACE)


def _pre_tokenizer(node, rules: list[Rules]) -> dict:
    where, t = "pre-tokenizer", node.get("type") if isinstance(node, dict) else None
    if t == "Sequence":
        return {"type": "Sequence", "pretokenizers": _sequence(node, where, "pretokenizers",
                                                               lambda c: _pre_tokenizer(c, rules))}
    if t in ("Whitespace", "WhitespaceSplit", "BertPreTokenizer", "UnicodeScripts"):
        out = _fields(node, where, {})
    elif t == "ByteLevel":
        out = _fields(node, where, _BYTE_LEVEL_FIELDS)
    elif t == "Metaspace":
        out = _metaspace(node, where)
    elif t == "Digits":
        out = _fields(node, where, {"individual_digits": (False, _bool)})
    elif t == "Punctuation":
        out = _fields(node, where, {"behavior": ("Isolated", _one_of(*BEHAVIORS))})
    elif t == "Split":
        out = _fields(node, where, {"pattern": (None, lambda v: _literal(v, regex_ok=True)),
                                    "behavior": (None, _one_of(*BEHAVIORS)), "invert": (False, _bool)})
        if "Regex" in out["pattern"]:
            try:
                rules[0] = rules[0].regex(out["pattern"]["Regex"], where)
            except TokenizerError as e:
                raise _Refused(str(e).removeprefix("the tokenizer's ")) from None
    else:
        _refuse(where, f"has a component of type {_name(node)} that tfviz does not read (it reads "
                       "ByteLevel, Whitespace, WhitespaceSplit, BertPreTokenizer, Metaspace, Digits, "
                       "Punctuation, UnicodeScripts, Split on a literal or a known regex, and Sequences)")
    rules[0] = rules[0].then(PRE_GROWTH.get(t, 1), 0, f"{t} pre-tokenizer")
    return out


def _decoder(node) -> dict:
    where, t = "decoder", node.get("type") if isinstance(node, dict) else None
    if t == "Sequence":
        return {"type": "Sequence", "decoders": _sequence(node, where, "decoders", _decoder)}
    if t in ("ByteFallback", "Fuse"):
        return _fields(node, where, {})
    if t == "ByteLevel":
        return _fields(node, where, _BYTE_LEVEL_FIELDS)
    if t == "WordPiece":
        return _fields(node, where, {"prefix": ("##", _short), "cleanup": (True, _bool)})
    if t == "Metaspace":
        return _metaspace(node, where)
    if t == "BPEDecoder":
        return _fields(node, where, {"suffix": ("</w>", _short)})
    if t == "Strip":
        return _fields(node, where, {"content": (" ", lambda v: _short(v, 1, empty=False)),
                                     "start": (0, _int(0, SHORT)), "stop": (0, _int(0, SHORT))})
    if t == "Replace":  # Llama 2's "▁" -> " ": never longer than what it replaces
        out = _fields(node, where, {"pattern": (None, _literal), "content": (None, _short)})
        if not out["pattern"]["String"] or len(out["content"]) > len(out["pattern"]["String"]):
            _refuse(where, f"Replace {out['pattern']['String']!r} -> {len(out['content']):,} characters "
                           "is not one tfviz knows (a decoder's Replace never lengthens a text)")
        return out
    _refuse(where, f"has a component of type {_name(node)} that tfviz does not read (it reads "
                   "ByteLevel, WordPiece, Metaspace, BPEDecoder, ByteFallback, Fuse, Strip, Replace of "
                   "a literal by one no longer, and Sequences of them)")


def _pair(v):
    if not (isinstance(v, list) and len(v) == 2 and isinstance(v[1], int) and not isinstance(v[1], bool)):
        raise _Refused(f"must be a [token, id] pair, not {str(v)[:40]!r}")
    return [_short(v[0], MAX_SPECIAL_CHARS, empty=False), _int(0, 2**31 - 1)(v[1])]


def _template(items, specials: dict) -> list:
    if not isinstance(items, list) or len(items) > MAX_PARTS:
        raise _Refused(f"must be a list of at most {MAX_PARTS} pieces")
    out = []
    for item in items:
        if isinstance(item, dict) and len(item) == 1 and "Sequence" in item:
            body = item["Sequence"]
            out.append({"Sequence": {"id": _one_of("A", "B")(body.get("id") if isinstance(body, dict) else None),
                                     "type_id": _int(0, 1)(body.get("type_id"))}})
        elif isinstance(item, dict) and len(item) == 1 and "SpecialToken" in item:
            body = item["SpecialToken"]
            name = body.get("id") if isinstance(body, dict) else None
            if name not in specials:
                raise _Refused(f"names a special token {str(name)[:40]!r} it does not define")
            out.append({"SpecialToken": {"id": name, "type_id": _int(0, 1)(body.get("type_id"))}})
        else:
            raise _Refused(f"holds a piece tfviz does not know ({str(item)[:40]!r})")
    return out


def _template_specials(v) -> dict:
    if not isinstance(v, dict) or len(v) > MAX_PARTS:
        raise _Refused(f"must map at most {MAX_PARTS} names to tokens")
    out = {}
    for name, body in v.items():
        ids, tokens = (body.get("ids"), body.get("tokens")) if isinstance(body, dict) else (None, None)
        if not (isinstance(ids, list) and isinstance(tokens, list) and 1 <= len(ids) <= MAX_SPECIAL_IDS
                and len(ids) == len(tokens) and body.get("id") == name):
            raise _Refused(f"{str(name)[:40]!r} must stand for 1 to {MAX_SPECIAL_IDS} tokens, "
                           f"not {len(ids) if isinstance(ids, list) else 'an unreadable list of'}")
        out[_short(name, MAX_SPECIAL_CHARS, empty=False)] = {
            "id": name, "ids": [_int(0, 2**31 - 1)(i) for i in ids],
            "tokens": [_short(t, MAX_SPECIAL_CHARS, empty=False) for t in tokens]}
    return out


def _post_processor(node) -> dict:
    where, t = "post-processor", node.get("type") if isinstance(node, dict) else None
    if t == "Sequence":
        return {"type": "Sequence", "processors": _sequence(node, where, "processors", _post_processor)}
    if t == "ByteLevel":
        return _fields(node, where, _BYTE_LEVEL_FIELDS)
    if t == "BertProcessing":
        return _fields(node, where, {"sep": (None, _pair), "cls": (None, _pair)})
    if t == "RobertaProcessing":
        return _fields(node, where, {"sep": (None, _pair), "cls": (None, _pair),
                                     "trim_offsets": (True, _bool), "add_prefix_space": (True, _bool)})
    if t == "TemplateProcessing":
        try:
            specials = _template_specials(node.get("special_tokens", {}))
        except _Refused as e:
            raise _Refused(f"{where} TemplateProcessing's special_tokens {e}") from None
        return _fields(node, where, {"single": (None, lambda v: _template(v, specials)),
                                     "pair": (None, lambda v: _template(v, specials)),
                                     "special_tokens": (None, lambda v: specials)})
    _refuse(where, f"has a component of type {_name(node)} that tfviz does not read (it reads "
                   "TemplateProcessing with short templates, BertProcessing, RobertaProcessing, "
                   "ByteLevel and Sequences of them)")


def _token_string(v, what: str) -> str:
    if not isinstance(v, str) or len(v) > MAX_TOKEN_CHARS:
        raise _Refused(f"holds {what} of {len(v) if isinstance(v, str) else 'no'} characters "
                       f"(tfviz reads tokens of at most {MAX_TOKEN_CHARS:,})")
    return v


def _vocab(v, what: str = "vocab") -> dict:
    if not isinstance(v, dict):
        raise _Refused(f"{what} must map tokens to ids")
    for token, i in v.items():
        if len(token) > MAX_TOKEN_CHARS:
            _token_string(token, "a token")
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < 2**31:
            raise _Refused(f"{what} gives {token[:40]!r} the id {str(i)[:20]!r}")
    return v


def _merges(v) -> list:
    if not isinstance(v, list):
        raise _Refused("merges must be a list")
    for m in v:
        if not (isinstance(m, str) or (isinstance(m, list) and len(m) == 2
                                       and isinstance(m[0], str) and isinstance(m[1], str))):
            raise _Refused(f"merges hold {str(m)[:40]!r}, not a pair of tokens")
    return v


def _unigram_vocab(v) -> list:
    if not isinstance(v, list):
        raise _Refused("vocab must be a list of [piece, score]")
    for item in v:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
                and isinstance(item[1], (int, float)) and not isinstance(item[1], bool)):
            raise _Refused(f"vocab holds {str(item)[:40]!r}, not a [piece, score]")
        if len(item[0]) > MAX_PIECE_CHARS:
            raise _Refused(f"vocab holds a piece of {len(item[0]):,} characters (tfviz reads Unigram "
                           f"pieces of at most {MAX_PIECE_CHARS})")
    return v


def _dropout(v):
    if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1):
        raise _Refused(f"must be null or from 0 to 1, not {str(v)[:20]!r}")
    return v


def _model(node) -> dict:
    where, t = "model", node.get("type") if isinstance(node, dict) else None
    unk = (None, lambda v: None if v is None else _short(v, MAX_SPECIAL_CHARS, empty=False))
    if t == "BPE":
        return _fields(node, where, {"dropout": (None, _dropout), "unk_token": unk,
                                     "continuing_subword_prefix": (None, _maybe_short),
                                     "end_of_word_suffix": (None, _maybe_short),
                                     "fuse_unk": (False, _bool), "byte_fallback": (False, _bool),
                                     "ignore_merges": (False, _bool), "vocab": (None, _vocab),
                                     "merges": ([], _merges)})
    if t == "WordPiece":
        return _fields(node, where, {"unk_token": ("[UNK]", unk[1]),
                                     "continuing_subword_prefix": ("##", _short),
                                     "max_input_chars_per_word": (100, _int(1, MAX_WORD_CHARS)),
                                     "vocab": (None, _vocab)})
    if t == "Unigram":
        return _fields(node, where, {"unk_id": (None, lambda v: None if v is None else _int(0, 2**31 - 1)(v)),
                                     "vocab": (None, _unigram_vocab), "byte_fallback": (False, _bool)})
    if t == "WordLevel":
        return _fields(node, where, {"vocab": (None, _vocab), "unk_token": unk})
    _refuse(where, f"is of type {_name(node)}, which tfviz does not read (it reads BPE, WordPiece, "
                   "Unigram and WordLevel)")


_ADDED = {"id": (None, _int(0, 2**31 - 1)), "content": (None, lambda v: _token_string(v, "an added token")),
          "single_word": (False, _bool), "lstrip": (False, _bool), "rstrip": (False, _bool),
          "normalized": (False, _bool), "special": (False, _bool)}


def _added_tokens(v) -> list:
    if v is None:
        return []
    if not isinstance(v, list):
        raise _Refused("added_tokens must be a list")
    out = []
    for t in v:
        if not isinstance(t, dict):
            raise _Refused(f"added_tokens hold {str(t)[:40]!r}")
        out.append(_fields({"type": "added token", **t}, "added_tokens", _ADDED))
        del out[-1]["type"]
    return out


PARTS = ("normalizer", "pre_tokenizer", "model", "decoder", "post_processor")


def canonical(spec: dict, max_growth: int = DEFAULT_MAX_GROWTH) -> tuple[dict, Rules]:
    """A parsed tokenizer.json -> (a new tokenizer.json written by tfviz from its data, the rules
    it runs): every component one tfviz knows with checked parameters, the vocabulary, merges and
    added tokens kept as data, padding and truncation dropped (tfviz never uses them).
    ``TokenizerError`` (a ValueError) with one sentence naming the component otherwise, or when
    its normalizer and pre-tokenizer can make a text more than ``max_growth`` times longer."""
    if not isinstance(spec, dict):
        raise TokenizerError("the tokenizer is not a JSON object")
    rules = [Rules()]
    try:
        out = {"version": "1.0", "truncation": None, "padding": None,
               "added_tokens": _added_tokens(spec.get("added_tokens")),
               "normalizer": None if spec.get("normalizer") is None else _normalizer(spec["normalizer"], rules),
               "pre_tokenizer": (None if spec.get("pre_tokenizer") is None
                                 else _pre_tokenizer(spec["pre_tokenizer"], rules)),
               "post_processor": (None if spec.get("post_processor") is None
                                  else _post_processor(spec["post_processor"])),
               "decoder": None if spec.get("decoder") is None else _decoder(spec["decoder"]),
               "model": _model(spec.get("model"))}
    except _Refused as e:
        raise TokenizerError(f"the tokenizer's {e}") from None
    except (ValueError, TypeError, AttributeError, KeyError) as e:  # a malformed component
        raise TokenizerError(f"the tokenizer's rules cannot be read ({type(e).__name__}: "
                             f"{str(e)[:200]})") from None
    _check_growth(rules[0], max_growth)
    return out, rules[0]


def _check_growth(rules: Rules, max_growth: int) -> None:
    if rules.growth > max_growth:
        raise TokenizerError(f"the tokenizer's {' then '.join(rules.why)} can make a text "
                             f"{rules.growth:,} times longer; tfviz reads tokenizers that make a text "
                             f"at most {max_growth:,} times longer (TFVIZ_TOKENIZER_MAX_GROWTH)")


def build(spec: dict, max_growth: int = DEFAULT_MAX_GROWTH) -> _HFTokenizer:
    """The tokenizers library's tokenizer for ``canonical(spec)`` (never for ``spec`` itself):
    ``TokenizerError`` with the reason when tfviz does not read it or the library cannot build it."""
    rebuilt, _ = canonical(spec, max_growth)
    try:
        return _HFTokenizer.from_str(json.dumps(rebuilt))
    except Exception as e:  # the Rust side raises plain Exception
        raise TokenizerError(f"invalid tokenizer definition: {str(e)[:300]}") from None


def _state(component) -> dict | None:
    return None if component is None else json.loads(component.__getstate__())


def read_rules(backend: _HFTokenizer, max_growth: int = DEFAULT_MAX_GROWTH) -> Rules:
    """``backend``'s components checked as ``canonical`` checks a file's (its model by type and
    parameters, not its vocabulary), and the rules they run: ``TokenizerError`` otherwise."""
    model = backend.model
    name = type(model).__name__
    try:
        if name not in ("BPE", "WordPiece", "Unigram", "WordLevel"):
            _refuse("model", f"is of type {name[:40]!r}, which tfviz does not read")
        try:
            if name == "WordPiece":
                _int(1, MAX_WORD_CHARS)(model.max_input_chars_per_word)
        except _Refused as e:
            _refuse("model", f"WordPiece's max_input_chars_per_word {e}")
        try:
            if name == "BPE":
                _dropout(model.dropout)
        except _Refused as e:
            _refuse("model", f"BPE's dropout {e}")
        if backend.post_processor is not None:
            _post_processor(_state(backend.post_processor))
    except _Refused as e:
        raise TokenizerError(f"the tokenizer's {e}") from None
    return rules_of(_state(backend.normalizer), _state(backend.pre_tokenizer), _state(backend.decoder),
                    max_growth)


def rules_of(normalizer: dict | None, pre_tokenizer: dict | None, decoder: dict | None = None,
             max_growth: int = DEFAULT_MAX_GROWTH) -> Rules:
    """``canonical``'s checks of a tokenizer.json's parsed "normalizer", "pre_tokenizer" and
    "decoder", and the rules they run (``Rules``: growth, regex degree)."""
    rules = [Rules()]
    try:
        if normalizer is not None:
            _normalizer(normalizer, rules)
        if pre_tokenizer is not None:
            _pre_tokenizer(pre_tokenizer, rules)
        if decoder is not None:
            _decoder(decoder)
    except _Refused as e:
        raise TokenizerError(f"the tokenizer's {e}") from None
    except (ValueError, TypeError, AttributeError, KeyError) as e:  # a malformed component
        raise TokenizerError(f"the tokenizer's rules cannot be read ({type(e).__name__}: "
                             f"{str(e)[:200]})") from None
    _check_growth(rules[0], max_growth)
    return rules[0]


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
    tokenizer read from a file; None for tfviz's own (SPECIAL_TOKENS at ids 0..6, checked).
    ``max_growth`` / ``max_normalized``: the bounds its rules are held to (``read_rules``,
    ``max_chars``; ``tfviz.limits.tokenizer_bounds()`` where a server sets them)."""

    def __init__(self, backend: _HFTokenizer, kind: str, lowercase: bool = False,
                 specials: Mapping[str, str] | None = None, *, max_growth: int = DEFAULT_MAX_GROWTH,
                 max_normalized: int = DEFAULT_MAX_NORMALIZED) -> None:
        if kind not in KINDS + IMPORTED_KINDS:
            raise ValueError(f"unknown tokenizer kind {kind!r}; expected one of {KINDS + IMPORTED_KINDS}")
        # its components first: each one tfviz knows, with checked parameters (``read_rules``)
        self.rules = read_rules(backend, max_growth)
        self.max_normalized = int(max_normalized)
        self.max_chars = max(1, (int(max_normalized) - self.rules.extra) // self.rules.growth)
        """The longest text a page should read with it: its rules make at most ``max_normalized``
        characters of it (``tfviz.limits.tokenizer_max_chars``), so its tokens are bounded too."""
        self.piece_chars = min(self.max_chars, self.rules.piece_chars or self.max_chars)
        """The longest text one call of the tokenizers library reads (``pieces``): ``max_chars``,
        less for a regex of a higher degree (``Rules.piece_chars``: GPT-2's 4,096, Llama 3's 64)."""
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
        GPT-2 and tfviz's own tokenizers). A text longer than ``piece_chars`` is read in
        ``pieces`` (as ``encode_ids``); with ``template`` it is refused (``TokenizerError``)."""
        if template:
            self.check_length(text, self.piece_chars)
            parts = [(0, self._library(self._encode_one, text, True))]
        else:
            parts, at = [], 0
            for piece in self.pieces(text):
                parts.append((at, self._library(self._encode_one, piece, False)))
                at += len(piece)
        ids = [i for _, enc in parts for i in enc.ids]
        tokens = [t for _, enc in parts for t in enc.tokens] if self._show is None else self.tokens_of(ids)
        offsets = [(s + at, e + at) for at, enc in parts for s, e in enc.offsets]
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
        """Just the ids (fast path for dataset generation). A text longer than ``piece_chars`` is
        read in ``pieces``, cut before a whitespace: the ids of the whole text for word, char and
        byte-level tokenizers (up to a run of mixed whitespace at a cut); a sentencepiece one may
        start a piece with one more '▁'."""
        return [i for piece in self.pieces(text)
                for i in self._library(self._encode_one, piece, False).ids]

    def pieces(self, text: str) -> Iterator[str]:
        """``text`` in pieces of at most ``piece_chars`` characters, each cut where a run of
        whitespace starts (before " word", never inside a run of spaces or line breaks), where
        the piece has one."""
        start, m = 0, self.piece_chars
        while len(text) - start > m:
            cut = start + m
            for found in _RUN_START.finditer(text, start + 1, start + m + 1):
                cut = found.start()
            yield text[start:cut]
            start = cut
        yield text[start:]

    def check_length(self, text: str, most: int | None = None) -> None:
        """``TokenizerError`` when ``text`` is longer than ``most`` (default ``max_chars``)."""
        most = self.max_chars if most is None else most
        if len(text) > most:
            raise TokenizerError(f"the text has {len(text):,} characters; this tokenizer reads at most "
                                 f"{most:,} at once")

    def _encode_one(self, text: str, add_special_tokens: bool):
        """``backend.encode(text)``; a text of more than ``GIL_FREE_CHARS`` through
        ``encode_batch``, which releases the GIL while the library works: a long encode holds
        only its own session, not every other one (issue 40: the worst accepted text held another
        thread 0.37 s through ``encode``, 0.12 s so). Short texts (a dataset's examples) keep
        ``encode``: 18 µs a call against ``encode_batch``'s 26."""
        if len(text) <= GIL_FREE_CHARS:
            return self.backend.encode(text, add_special_tokens=add_special_tokens)
        return self.backend.encode_batch([text], add_special_tokens=add_special_tokens)[0]

    def _decode_one(self, ids: list[int], skip_special: bool) -> str:
        """``backend.decode(ids)``; many ids through ``decode_batch`` (the GIL released, as
        ``_encode_one``)."""
        if len(ids) <= GIL_FREE_CHARS // 4:
            return self.backend.decode(ids, skip_special_tokens=skip_special)
        return self.backend.decode_batch([ids], skip_special_tokens=skip_special)[0]

    @staticmethod
    def _library(fn, *args, **kwargs):
        """``fn(...)`` of the tokenizers library; whatever it raises — a Rust panic is a
        ``PanicException``, a BaseException — is a ``TokenizerError`` saying so."""
        try:
            return fn(*args, **kwargs)
        except (KeyboardInterrupt, SystemExit, GeneratorExit):
            raise
        except BaseException as e:  # noqa: BLE001 - pyo3_runtime.PanicException derives from it
            raise TokenizerError(f"{CANNOT_READ} ({type(e).__name__}: {str(e)[:200]})") from None

    @property
    def max_decode_ids(self) -> int:
        """The most ids one ``decode`` reads: what makes at most ``max_normalized`` characters
        with its longest token (tokens are at most ``MAX_TOKEN_CHARS``; decoders never lengthen)."""
        if getattr(self, "_max_decode_ids", None) is None:
            longest = max((len(t) for t in self.backend.get_vocab(with_added_tokens=True)), default=1)
            self._max_decode_ids = max(MIN_DECODE_IDS, self.max_normalized // max(longest, 1))
        return self._max_decode_ids

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Ids -> text, special ids as their literals ("[MASK]"), the inverse of ``encode``;
        ``skip_special=True`` leaves them out. More than ``max_decode_ids`` ids: ``TokenizerError``."""
        ids = [int(i) for i in ids]
        if len(ids) > self.max_decode_ids:
            raise TokenizerError(f"{len(ids):,} ids; this tokenizer decodes at most "
                                 f"{self.max_decode_ids:,} at once")
        return self._library(self._decode_one, ids, skip_special)

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
    def from_json(cls, s: str, **bounds) -> "Tokenizer":
        """Inverse of ``to_json``; raises ValueError on anything malformed (user-uploaded files)
        and on any component tfviz does not know: the tokenizer is rebuilt from the file's data
        by ``build`` (``canonical``), never run as written (``bounds``: ``max_growth``,
        ``max_normalized``)."""
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
        model = data["tokenizer"].get("model")
        want = KIND_MODELS[data["kind"]]
        if not isinstance(model, dict) or model.get("type") not in want:
            raise TokenizerError(f"a {data['kind']} tokenizer's model must be {' or '.join(want)}, not "
                                 f"{_name(model)}")
        backend = build(data["tokenizer"], bounds.get("max_growth", DEFAULT_MAX_GROWTH))  # rebuilt, never run as given
        return cls(backend, data["kind"], bool(data.get("lowercase", False)), specials, **bounds)

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
