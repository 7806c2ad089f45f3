"""Tokenizers: special ids, lossless round-trips, offsets, JSON, validation, speed."""
import json
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers

from tfviz.tasks import make_task
from tfviz.tasks.coref import MISSION
from tfviz.tokenize import (SPECIAL_TOKENS, Tokenizer, compare_tokenizers, train_tokenizer,
                            vocab_tokenizer)

CORPUS = ["The quick brown fox jumps over the lazy dog.", "Hello, world! It's 3.14 degrees.",
          "Unicode: naïve café, ünïcödé ✓ 日本語\nnew line\ttab."] * 5


@pytest.fixture(scope="module")
def toks():
    return {"char": train_tokenizer("char", CORPUS), "word": train_tokenizer("word", CORPUS),
            "bpe": train_tokenizer("bpe", CORPUS, vocab_size=300),
            "word_lower": train_tokenizer("word", CORPUS, lowercase=True)}


def test_special_ids_fixed(toks):
    for tok in toks.values():
        assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == list(range(7))
        assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id, tok.mask_id, tok.sep_id,
                tok.cls_id) == (0, 1, 2, 3, 4, 5, 6)
        assert tok.vocab_size > 7


def test_kinds_and_bad_args():
    assert train_tokenizer("char", CORPUS).kind == "char"
    with pytest.raises(ValueError):
        train_tokenizer("sentencepiece", CORPUS)
    with pytest.raises(ValueError, match="263"):
        train_tokenizer("bpe", CORPUS, vocab_size=100)


@pytest.mark.parametrize("kind", ["char", "word", "bpe"])
def test_empty_text(toks, kind):
    enc = toks[kind].encode("")
    assert enc.ids == [] and enc.tokens == [] and enc.offsets == []
    assert toks[kind].decode([]) == ""
    enc = toks[kind].encode("", add_bos=True, add_eos=True)
    assert enc.ids == [2, 3] and enc.tokens == ["[BOS]", "[EOS]"] and enc.offsets == [(0, 0), (0, 0)]


# Texts that hold special-token literals on purpose ("ab[MASK]c", "[PAD]", "[PA[PAD]D]"), the one
# rule of tfviz.tokenize: a literal is that special token when encoding, and decodes back to it.
SPECIAL_LITERAL = re.compile("|".join(map(re.escape, SPECIAL_TOKENS)))
TEXTS = st.lists(st.one_of(st.text(max_size=12), st.sampled_from(SPECIAL_TOKENS),
                           st.sampled_from(["[", "]", "[PA", "D]", "MASK"])), max_size=8).map("".join)


def check_specials(tok, text: str, enc) -> None:
    """Every special id comes from its literal in the text (its offsets are the literal's span;
    so no [UNK] but a typed one), and skip_special=True leaves exactly the literals out."""
    literals = SPECIAL_LITERAL.findall(text)
    assert [enc.tokens[i] for i, x in enumerate(enc.ids) if x in tok.special_ids] == literals
    for t, x, (s, e) in zip(enc.tokens, enc.ids, enc.offsets):
        if x in tok.special_ids:
            assert text[s:e] == t == SPECIAL_TOKENS[x]
    if tok.kind != "word":
        assert tok.decode(enc.ids, skip_special=True) == SPECIAL_LITERAL.sub("", text)


@settings(max_examples=60, deadline=None)
@given(TEXTS)
def test_char_roundtrip_lossless(text):
    tok = train_tokenizer("char", [text, "abc"])
    enc = tok.encode(text)
    assert tok.decode(enc.ids) == text
    assert "".join(enc.tokens) == text
    assert all(text[s:e] == t for t, (s, e) in zip(enc.tokens, enc.offsets))
    check_specials(tok, text, enc)


@settings(max_examples=60, deadline=None)
@given(TEXTS)
def test_bpe_roundtrip_lossless_on_any_text(toks, text):
    enc = toks["bpe"].encode(text)
    assert toks["bpe"].decode(enc.ids) == text  # byte-level: nothing is unknown (check_specials)
    for t, (s, e) in zip(enc.tokens, enc.offsets):
        if "\ufffd" not in t:  # whole characters: the display string is the source span
            assert text[s:e] == t
    check_specials(toks["bpe"], text, enc)


@settings(max_examples=60, deadline=None)
@given(TEXTS)
def test_word_roundtrip_up_to_whitespace(text):
    tok = train_tokenizer("word", [text, "abc"])
    enc = tok.encode(text)
    assert "".join(tok.decode(enc.ids).split()) == "".join(text.split())
    check_specials(tok, text, enc)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(["cat", "sat", "mat", *SPECIAL_TOKENS]), max_size=10))
def test_task_vocab_tokenizer_reads_and_writes_special_literals(words):
    tok = vocab_tokenizer(["cat", "sat", "mat"])
    text = " ".join(words)
    enc = tok.encode(text)
    assert enc.tokens == words and tok.decode(enc.ids) == text
    check_specials(tok, text, enc)


def test_special_literal_rule_survives_json():
    """A tokenizer loaded from a file whose specials were plain vocabulary entries follows the rule."""
    plain = HFTokenizer(models.WordLevel(vocab={t: i for i, t in enumerate([*SPECIAL_TOKENS, "a"])},
                                         unk_token="[UNK]"))
    plain.pre_tokenizer = pre_tokenizers.Whitespace()
    data = {"format": "tfviz-tokenizer", "version": 1, "kind": "word", "lowercase": False,
            "tokenizer": json.loads(plain.to_str())}
    tok = Tokenizer.from_json(json.dumps(data))
    assert tok.encode("a[MASK]a").ids == [7, 4, 7] and tok.decode([7, 4, 7]) == "a [MASK] a"


def test_bpe_offsets_and_display(toks):
    text = "The quick brown fox, café ✓"
    enc = toks["bpe"].encode(text)
    assert any(t.startswith(" ") for t in enc.tokens)  # 'Ġ' shown as a space
    assert not any("Ġ" in t for t in enc.tokens)
    assert all(0 <= s <= e <= len(text) for s, e in enc.offsets)
    ascii_part = [(t, o) for t, o in zip(enc.tokens, enc.offsets) if o[1] <= text.index("é")]
    assert all(text[s:e] == t for t, (s, e) in ascii_part)


def test_word_roundtrip_modulo_whitespace_and_case(toks):
    text = "The   quick brown fox,\njumps over the lazy dog."
    for name in ("word", "word_lower"):
        tok = toks[name]
        enc = tok.encode(text)
        assert tok.unk_id not in enc.ids
        out = tok.decode(enc.ids)
        assert out == " ".join(enc.tokens)  # documented: tokens joined by single spaces
        want = text.lower() if tok.lowercase else text
        assert "".join(out.split()) == "".join(want.split())
        for t, (s, e) in zip(enc.tokens, enc.offsets):
            assert (text[s:e].lower() if tok.lowercase else text[s:e]) == t


def test_word_unknowns(toks):
    enc = toks["word"].encode("the zebra")
    assert enc.tokens == ["the", "[UNK]"] and enc.offsets[1] == (4, 9)


def test_bos_eos(toks):
    enc = toks["char"].encode("fox", add_bos=True, add_eos=True)
    assert enc.ids[0] == 2 and enc.ids[-1] == 3 and enc.offsets[-1] == (3, 3)
    assert toks["char"].decode(enc.ids) == "[BOS]fox[EOS]"  # every id, as encode reads it back
    assert toks["char"].decode(enc.ids, skip_special=True) == "fox"


@pytest.mark.parametrize("name", ["char", "word", "bpe", "word_lower"])
def test_json_roundtrip_identical(toks, name):
    tok = toks[name]
    again = Tokenizer.from_json(tok.to_json())
    assert (again.kind, again.vocab_size, again.lowercase) == (tok.kind, tok.vocab_size, tok.lowercase)
    for text in CORPUS[:3] + ["", "Zebra QUICK 日本 ✓✓"]:
        assert again.encode(text, True, True) == tok.encode(text, True, True)
        assert again.decode(again.encode(text).ids) == tok.decode(tok.encode(text).ids)
    json.loads(tok.to_json())  # plain JSON, fits in checkpoint metadata


def test_bad_json_rejected(toks):
    good = json.loads(toks["word"].to_json())
    for bad in ["not json {", "[]", "null", json.dumps({"kind": "word"}),
                json.dumps({**good, "kind": "morpheme"}),
                json.dumps({**good, "tokenizer": {"model": "nonsense"}})]:
        with pytest.raises(ValueError):
            Tokenizer.from_json(bad)
    swapped = HFTokenizer(models.WordLevel(
        vocab={"[UNK]": 0, "[PAD]": 1, **{t: i for i, t in enumerate(SPECIAL_TOKENS[2:], 2)}},
        unk_token="[UNK]"))
    with pytest.raises(ValueError, match=r"\[PAD\] must have id 0"):
        Tokenizer.from_json(json.dumps({**good, "tokenizer": json.loads(swapped.to_str())}))


def test_vocab_tokenizer_order():
    tok = vocab_tokenizer(["10", "2", "x"])
    assert [tok.token_to_id(w) for w in ["10", "2", "x"]] == [7, 8, 9]
    assert tok.encode("x 2 10 [SEP] y").ids == [9, 8, 7, 5, 1]


def test_mission_sentences_no_unknowns():
    tok = make_task("coref").tokenizer
    assert tok.token_to_id("law") is not None and tok.token_to_id("application") is not None
    for text in MISSION + ["...", "The law... it is."]:
        enc = tok.encode(text)
        assert tok.unk_id not in enc.ids, enc.tokens
        for t, (s, e) in zip(enc.tokens, enc.offsets):
            assert text[s:e].lower() == t  # offsets index the original (capitalised) text


def test_compare_tokenizers():
    rows = compare_tokenizers("The quick zebra.", CORPUS, bpe_vocab_size=300)
    by = {r["kind"]: r for r in rows}
    assert list(by) == ["char", "word", "bpe"]
    for r in rows:
        assert r["count"] == len(r["tokens"]) == len(r["ids"]) == len(r["offsets"])
        assert r["vocab_size"] > 7
    assert by["bpe"]["unknowns"] == 0
    assert by["word"]["unknowns"] == 1  # "zebra" was not in the corpus
    assert by["char"]["count"] == len("The quick zebra.")
    assert by["word"]["count"] < by["bpe"]["count"] <= by["char"]["count"]


def test_encode_is_linear(toks):
    text = " ".join(CORPUS) * 40  # ~27k chars; x8 below
    for tok in (toks["char"], toks["bpe"]):
        t0 = time.perf_counter()
        tok.encode(text)
        small = time.perf_counter() - t0
        t0 = time.perf_counter()
        enc = tok.encode(text * 8)
        big = time.perf_counter() - t0
        assert len(enc.ids) > 0 and big < 40 * small + 0.5


# ---------------------------------------------------------------- tokenizers read from files
def _gpt2_like():
    """A byte-level BPE whose only special token sits at the end (GPT-2: <|endoftext|> = 50256)."""
    from tokenizers import decoders, trainers
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    hf.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=300, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    hf.add_special_tokens(["<|endoftext|>"])
    return hf


def test_file_specials_keep_the_files_ids():
    hf = _gpt2_like()
    eot = hf.token_to_id("<|endoftext|>")
    assert eot > 6
    tok = Tokenizer(hf, "bpe", specials={"bos": "<|endoftext|>", "eos": "<|endoftext|>",
                                         "unk": "<|endoftext|>"})
    assert (tok.bos_id, tok.eos_id, tok.unk_id, tok.pad_id, tok.mask_id) == (eot, eot, eot, None, None)
    assert tok.special_ids == (eot,) and not tok.fixed_specials
    text = "The quick<|endoftext|> fox"
    enc = tok.encode(text)
    assert enc.ids == hf.encode(text).ids  # exactly what the file's own tokenizer gives
    assert eot in enc.ids and enc.tokens[enc.ids.index(eot)] == "<|endoftext|>"  # the literal rule
    assert tok.decode(enc.ids) == text
    assert " " in enc.tokens and not any("\u0120" in t for t in enc.tokens)  # Ġ shown as a space
    assert tok.id_to_token(0) == "!" and tok.display(0) == "!"  # id 0 is an ordinary token
    assert tok.encode("fox", add_bos=True).ids[0] == eot
    again = Tokenizer.from_json(tok.to_json())
    assert again.specials == tok.specials and again.encode(text) == enc


def test_file_specials_are_checked():
    hf = _gpt2_like()
    with pytest.raises(ValueError, match="not in the vocabulary"):
        Tokenizer(hf, "bpe", specials={"bos": "<s>"})
    with pytest.raises(ValueError, match="unknown special-token role"):
        Tokenizer(hf, "bpe", specials={"start": "<|endoftext|>"})
    tok = Tokenizer(hf, "bpe", specials={"eos": "<|endoftext|>"})
    with pytest.raises(ValueError, match="no bos token"):
        tok.encode("fox", add_bos=True)


def test_sentencepiece_display():
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "\u2581the": 3, "\u2581fox": 4, "<0x0A>": 5, "s": 6}
    hf = HFTokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    hf.add_special_tokens(["<unk>", "<s>", "</s>"])
    tok = Tokenizer(hf, "sentencepiece", specials={"unk": "<unk>", "bos": "<s>", "eos": "</s>"})
    assert tok.tokens_of([1, 3, 4, 6, 5, 2]) == ["<s>", " the", " fox", "s", "\n", "</s>"]
    assert tok.special_ids == (0, 1, 2)
