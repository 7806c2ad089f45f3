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


# -- bounds: what a tokenizer's rules can do to a text -------------------------------------
# A tokenizer.json is data, but its normalizer and pre-tokenizer are rules the ``tokenizers``
# library runs on every text: a Replace("a" -> 10,000 a's) makes 20,000 typed characters 200
# million (3.2 GB of alignments: the process aborts), a Split regex such as (a|aa)+$ backtracks
# exponentially until the regex engine gives up and the library panics (PanicException, a
# BaseException). So a tokenizer's rules are read when it is built: how many times longer they
# can make a text (``Rules.growth``, from each component's worst case per character: NFKC 18,
# NFD 4, Lowercase 2 — measured over every code point — a Replace its content over its pattern),
# and whether a regex holds a repeated group with a repetition or alternatives inside ((a|aa)+,
# (a+)*: exponential backtracking). Too much growth or such a regex is refused with the reason;
# what is accepted is run under a bound: ``encode`` reads at most ``max_chars`` characters at
# once (so the text after normalisation stays under ``max_normalized`` characters), and whatever
# the library raises, a panic included, is a ``TokenizerError``: "this tokenizer cannot read
# this text". ``tfviz.limits`` holds the configurable numbers (the defaults below are its).
DEFAULT_MAX_GROWTH = 1000           # limits.tokenizer_max_growth()
DEFAULT_MAX_NORMALIZED = 1_000_000  # limits.tokenizer_max_chars()
CANNOT_READ = "this tokenizer cannot read this text"
GROWTH = {"NFC": 3, "NFD": 4, "NFKC": 18, "NFKD": 18, "Lowercase": 2, "ByteLevel": 4, "Strip": 1,
          "StripAccents": 1, "Nmt": 1}
"""Normalizer type -> the most characters it makes of one (the ``tokenizers`` library's own
normalizers run on every code point: NFKC turns U+FDFA into 18, NFD U+1F82 into 4, Lowercase
U+0130 into 2, ByteLevel a 4-byte character into 4)."""
PRE_GROWTH = {"ByteLevel": 5, "Metaspace": 2, "Split": 1, "Whitespace": 1, "WhitespaceSplit": 1,
              "BertPreTokenizer": 1, "Punctuation": 1, "Digits": 1, "UnicodeScripts": 1,
              "CharDelimiterSplit": 1, "FixedLength": 1}
"""Pre-tokenizer type -> the most characters it makes of one (ByteLevel: 4 bytes and a prefix
space; Metaspace: a '▁' before a piece)."""
QUIET_DECODERS = ("ByteLevel", "WordPiece", "Metaspace", "BPEDecoder", "CTC", "Fuse", "Strip",
                  "ByteFallback")


class TokenizerError(ValueError):
    """A text this tokenizer does not read: longer than it reads at once, or one the tokenizers
    library fails (or panics) on. A ``ValueError``: pages show it as a message."""


@dataclass(frozen=True)
class Rules:
    """What a tokenizer's rules can do to a text of n characters: at most ``growth`` * n +
    ``extra`` characters after its normalizer and pre-tokenizer; ``why``: the components that
    grow it; ``degree``: the most unbounded repetitions in one alternative of its regexes
    (``regex_bound``; 0: no regex of its own)."""
    growth: int = 1
    extra: int = 0
    why: tuple[str, ...] = ()
    degree: int = 0

    def then(self, growth: int, extra: int = 0, why: str | None = None) -> "Rules":
        """These rules followed by a step making at most growth * n + extra of n characters."""
        return Rules(self.growth * growth, self.extra * growth + extra,
                     self.why + ((why,) if why and growth > 1 else ()), self.degree)

    def regex(self, pattern: str, where: str) -> "Rules":
        """These rules with ``pattern`` run too (``TokenizerError`` if it can backtrack without bound)."""
        risk, degree = regex_bound(pattern)
        if risk:
            raise TokenizerError(f"the tokenizer's {where} {risk}")
        return Rules(self.growth, self.extra, self.why, max(self.degree, degree))

    @property
    def piece_chars(self) -> int | None:
        """The longest text its regexes should search at once (``STEPS_PER_CHAR``), None: any."""
        return int(STEPS_PER_CHAR ** (1 / self.degree) + 1e-9) if self.degree else None


def _skip_escape(p: str, i: int) -> int:
    """The index after the escape at p[i] ('\\\\'): \\p{L}, \\x{41}, \\k<name> or one character."""
    if i + 1 < len(p) and p[i + 1] in "pPxkgu" and i + 2 < len(p) and p[i + 2] in "{<'":
        close = {"{": "}", "<": ">", "'": "'"}[p[i + 2]]
        j = p.find(close, i + 3)
        return len(p) if j < 0 else j + 1
    return min(i + 2, len(p))


def _skip_class(p: str, i: int) -> int:
    """The index after the character class opening at p[i] ('['), nested classes included."""
    depth, j = 0, i
    while j < len(p):
        c = p[j]
        if c == "\\":
            j = _skip_escape(p, j)
            continue
        if c == "[":
            depth += 1
            j += 1
            if p.startswith("^", j):
                j += 1
            if p.startswith("]", j):  # a ']' first in a class is a character
                j += 1
            continue
        if c == "]":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return len(p)


_QUANT = re.compile(r"\*|\+|\?|\{(\d*)(,?)(\d*)\}")
FEW = 16  # a repetition of at most this many ({1,3}) is a constant factor, not a degree
MAX_DEGREE = 2
r"""The most unbounded repetitions one alternative of a regex may hold: a search with k of them can
take about n^(k+1) steps on a text of n characters that makes it fail late (a*a*\d on 2,000 'a's:
21 s; \w*\w*\w*[^\w] on 300: 9 s). Llama 3's and GPT-4o's patterns hold 2 (\s*[\r\n]+), GPT-2's 1."""
STEPS_PER_CHAR = 4096
"""What one character of text may cost a regex of degree k: it reads pieces of at most
STEPS_PER_CHAR ** (1 / k) characters (k = 1: 4,096; k = 2: 64), so a text of n characters costs
at most about n * STEPS_PER_CHAR steps (20,000 characters: 8e7, a second or two)."""


def _quantifier(p: str, i: int) -> tuple[int, bool, int]:
    """(how many times it may match its atom: 0 none, 1 at most once, FEW + 1 unbounded or more
    than FEW, else its maximum; possessive; the index after) for a quantifier at p[i]. A
    possessive quantifier (a++) never backtracks."""
    m = _QUANT.match(p, i)
    if m is None or (m[0].startswith("{") and not (m[1] or m[3])):
        return 0, False, i
    if m[0].startswith("{"):  # {n}, {n,}, {,m}, {n,m}
        most = (int(m[3]) if m[3] else FEW + 1) if m[2] else int(m[1])
    else:
        most = 1 if m[0] == "?" else FEW + 1
    j = m.end()
    possessive = j < len(p) and p[j] == "+" and not m[0].startswith("{")
    if j < len(p) and p[j] in "?+":
        j += 1
    return min(most, FEW + 1), possessive, j


def regex_bound(pattern: str) -> tuple[str | None, int]:
    """(why ``pattern`` can backtrack without bound, or None; its degree: the most unbounded
    repetitions in one of its top-level alternatives, nested groups included).

    Refused (the reason): a repeated group that holds a repetition or alternatives ((a|aa)+,
    (a+)*, (?:x*y)+: exponential), a back-reference, more than ``MAX_DEGREE`` repetitions in one
    alternative (polynomial of a high degree). A group repeated possessively ((…)++) or atomic
    ((?>…)+) is never backtracked into. Conservative (it refuses some harmless patterns, e.g.
    (ab|cd)+), but the pre-tokenizer patterns of GPT-2 (degree 1), Llama 3, Qwen2, GPT-4o (2),
    BLOOM and DeepSeek (1) pass."""
    frames = [[False, False, 0, False]]  # per open group: holds a repetition, alternatives, start, atomic
    degree = branch = 0
    i, n = 0, len(pattern)

    def refuse(why: str) -> tuple[str, int]:
        return f"regex {pattern[:80]!r} {why}", degree

    while i < n:
        c = pattern[i]
        if c == "\\":
            if re.match(r"\\(?:[1-9]|k[<'{])", pattern[i:]):
                return refuse("holds a back-reference: matching it can take exponential time")
            j = _skip_escape(pattern, i)
        elif c == "[":
            j = _skip_class(pattern, i)
        elif c == "(":
            if pattern.startswith("(?#", i):  # a comment
                k = pattern.find(")", i)
                i = n if k < 0 else k + 1
                continue
            m = re.match(r"\(\?(?:[imx-]*:|[=!>]|<[=!]|<[A-Za-z_]\w*>|P<[A-Za-z_]\w*>|'[A-Za-z_]\w*')?",
                         pattern[i:])
            frames.append([False, False, i, pattern.startswith("(?>", i)])
            i += len(m[0]) if m else 1
            continue
        elif c == ")" and len(frames) > 1:
            repeats, alternatives, start, atomic = frames.pop()
            most, possessive, j = _quantifier(pattern, i + 1)
            if most > 1 and not possessive and not atomic and (repeats or alternatives):
                what = "a repetition" if repeats else "alternatives"
                return refuse(f"repeats a group that holds {what} ({pattern[start:j][:40]!r}): it can "
                              "backtrack for exponential time")
            frames[-1][0] = frames[-1][0] or repeats or most > 1
            frames[-1][1] = frames[-1][1] or alternatives
            if most > FEW and not possessive:
                branch += 1
        elif c == "|":
            frames[-1][1] = True
            if len(frames) == 1:
                branch = 0
            i += 1
            continue
        else:
            j = i + 1
        most, possessive, k = _quantifier(pattern, j) if c != ")" else (0, False, j)
        if k > j:  # the quantifier of the atom just read
            frames[-1][0] = frames[-1][0] or most > 1
            if most > FEW and not possessive:
                branch += 1
            j = k
        degree = max(degree, branch)
        if degree > MAX_DEGREE:
            return refuse(f"holds {degree} repetitions in one alternative: on some texts it "
                          f"backtracks for about n^{degree + 1} steps (tfviz reads regexes with at "
                          f"most {MAX_DEGREE})")
        i = j
    return None, degree


def regex_risk(pattern: str) -> str | None:
    """Why ``pattern`` can backtrack without bound (``regex_bound``), or None."""
    return regex_bound(pattern)[0]


def _pattern(node: dict) -> tuple[str, bool]:
    """(the pattern, is it a regex) of a Replace / Split component."""
    pat = node.get("pattern")
    if isinstance(pat, dict) and isinstance(pat.get("Regex"), str):
        return pat["Regex"], True
    if isinstance(pat, dict) and isinstance(pat.get("String"), str):
        return pat["String"], False
    return (pat, False) if isinstance(pat, str) else ("", True)


def _replace_growth(node: dict, where: str) -> tuple[int, int, str]:
    """(growth, extra, why) of a Replace: its content for each match of its pattern; a regex
    or an empty string can match between any two characters (then content + 1 per character)."""
    pat, regex = _pattern(node)
    content = node.get("content") if isinstance(node.get("content"), str) else ""
    why = f"{where} Replace {pat[:20]!r} -> {len(content):,} characters"
    if regex or not pat:
        return 1 + len(content), len(content), why
    return max(1, -(-len(content) // len(pat))), 0, why


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


def _walk_normalizer(node, rules: Rules) -> Rules:
    t = node.get("type") if isinstance(node, dict) else None
    if t == "Sequence":
        for child in node.get("normalizers") or []:
            rules = _walk_normalizer(child, rules)
        return rules
    if t == "Replace":
        pat, regex = _pattern(node)
        rules = rules.regex(pat, "normalizer") if regex else rules
        return rules.then(*_replace_growth(node, "normalizer"))
    if t == "Prepend":  # once before each piece between special tokens (each >= 1 character)
        extra = len(node.get("prepend") or "")
        return rules.then(1 + extra, extra, f"normalizer Prepend ({extra} characters)")
    if t == "BertNormalizer":  # spaces around CJK characters: 3; accents stripped, lowercased: <= 4
        return rules.then(4, 0, "BertNormalizer")
    if t == "Precompiled":
        return rules.then(_precompiled_growth(node), 0, "Precompiled normalizer")
    if t in GROWTH:
        return rules.then(GROWTH[t], 0, f"{t} normalizer")
    raise TokenizerError(f"the tokenizer's normalizer has a component of type {str(t)[:40]!r} whose "
                         "effect on a text tfviz cannot bound")


def _walk_pre(node, rules: Rules) -> Rules:
    t = node.get("type") if isinstance(node, dict) else None
    if t == "Sequence":
        for child in node.get("pretokenizers") or []:
            rules = _walk_pre(child, rules)
        return rules
    if t == "Split":
        pat, regex = _pattern(node)
        rules = rules.regex(pat, "pre-tokenizer") if regex else rules
    if t in PRE_GROWTH:
        return rules.then(PRE_GROWTH[t], 0, f"{t} pre-tokenizer")
    raise TokenizerError(f"the tokenizer's pre-tokenizer has a component of type {str(t)[:40]!r} "
                         "whose effect on a text tfviz cannot bound")


def _check_decoder(node, max_growth: int) -> None:
    t = node.get("type") if isinstance(node, dict) else None
    if t == "Sequence":
        for child in node.get("decoders") or []:
            _check_decoder(child, max_growth)
    elif t == "Replace":
        pat, regex = _pattern(node)
        if regex and (risk := regex_risk(pat)):  # a decoder reads a model's few tokens: no degree
            raise TokenizerError(f"the tokenizer's decoder {risk}")
        growth, _, why = _replace_growth(node, "decoder")
        if growth > max_growth:
            raise TokenizerError(f"the tokenizer's {why} can make a text {growth:,} times longer; "
                                 f"tfviz reads tokenizers that make a text at most {max_growth:,} "
                                 "times longer (TFVIZ_TOKENIZER_MAX_GROWTH)")
    elif t not in QUIET_DECODERS:
        raise TokenizerError(f"the tokenizer's decoder has a component of type {str(t)[:40]!r} "
                             "tfviz does not know")


def _state(component) -> dict | None:
    return None if component is None else json.loads(component.__getstate__())


def read_rules(backend: _HFTokenizer, max_growth: int = DEFAULT_MAX_GROWTH) -> Rules:
    """How much ``backend``'s normalizer and pre-tokenizer can grow a text (``Rules``), checked
    against ``max_growth``, and that none of its regexes (normalizer, pre-tokenizer, decoder) can
    backtrack without bound: ``TokenizerError`` (a ValueError) with the reason otherwise."""
    return rules_of(_state(backend.normalizer), _state(backend.pre_tokenizer), _state(backend.decoder),
                    max_growth)


def rules_of(normalizer: dict | None, pre_tokenizer: dict | None, decoder: dict | None = None,
             max_growth: int = DEFAULT_MAX_GROWTH) -> Rules:
    """``read_rules`` on a tokenizer.json's parsed "normalizer", "pre_tokenizer" and "decoder"
    (before the tokenizers library builds anything from it)."""
    rules = Rules()
    try:
        if normalizer is not None:
            rules = _walk_normalizer(normalizer, rules)
        if pre_tokenizer is not None:
            rules = _walk_pre(pre_tokenizer, rules)
        if decoder is not None:
            _check_decoder(decoder, max_growth)
    except TokenizerError:
        raise
    except (ValueError, TypeError, AttributeError, KeyError) as e:  # a malformed component
        raise TokenizerError(f"the tokenizer's rules cannot be read ({type(e).__name__}: "
                             f"{str(e)[:200]})") from None
    if rules.growth > max_growth:
        raise TokenizerError(f"the tokenizer's {' then '.join(rules.why)} can make a text "
                             f"{rules.growth:,} times longer; tfviz reads tokenizers that make a text "
                             f"at most {max_growth:,} times longer (TFVIZ_TOKENIZER_MAX_GROWTH)")
    return rules


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
        # its rules first: a tokenizer that can grow a text without bound, or backtrack, is refused
        self.rules = read_rules(backend, max_growth)
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
            parts = [(0, self._library(self.backend.encode, text, add_special_tokens=True))]
        else:
            parts, at = [], 0
            for piece in self.pieces(text):
                parts.append((at, self._library(self.backend.encode, piece, add_special_tokens=False)))
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
                for i in self._library(self.backend.encode, piece, add_special_tokens=False).ids]

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

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Ids -> text, special ids as their literals ("[MASK]"), the inverse of ``encode``;
        ``skip_special=True`` leaves them out."""
        return self._library(self.backend.decode, [int(i) for i in ids], skip_special_tokens=skip_special)

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
        and on rules that can grow a text without bound or backtrack (``read_rules``; ``bounds``:
        ``max_growth``, ``max_normalized``)."""
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
