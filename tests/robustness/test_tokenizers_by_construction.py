"""Issue 40, item 1: a tokenizer from outside is read by construction, not by bounds.

The four files that beat the bounds of issue 29 (S5-1..S5-4), each written as a student writes it
(the shipped ``lm`` weights with one component of its tokenizer replaced, no tfviz Tokenizer built
from it) and as a Hugging Face folder's tokenizer.json, then taken through the real load paths:
``load_checkpoint`` (every page), ``tfviz.classroom.uploads.save_upload`` (the sidebar's upload:
refused, nothing kept), ``from_pretrained`` and the folder listing (``discover.inspect``). Each is
refused at load with one sentence naming the component — before the tokenizers library builds
anything from the file, which is never run as written (``tokenize.canonical`` writes a new one).

  S5-1  a decoder Sequence of three Replace "e" -> "e" x 999: one token decoded to 10^9 characters
        (26.7 s with the GIL held; the Generate page's server died on a 1 GB allocation)
  S5-2  a TemplateProcessing whose special token stands for 200,000 ids (the Attention page ran
        it on every render; the server died); here 30 times a token of 6,000 ids, which fits a
        checkpoint's metadata bounds
  S5-3  a Split regex with Oniguruma's subexpression call, (a*)\\g<1>\\g<1>\\g<1>\\d (476 typed
        characters froze every session for 70 s)
  S5-4  WordPiece with max_input_chars_per_word 10^9 (cubic in a word's length: 6,000 a's held
        every session for 11.8 s)
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Regex
from tokenizers import Tokenizer as HF
from tokenizers import decoders, models, pre_tokenizers, processors

from tfviz import tokenize
from tfviz.storage import CheckpointError
from tfviz.tokenize import Tokenizer, TokenizerError
from tfviz.train.checkpoint import load_checkpoint, save_checkpoint

REPO = Path(__file__).resolve().parents[2]
LM = REPO / "checkpoints" / "lm.safetensors"

S5_1 = ("decoder", {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "e"}, "content": "e" * 999} for _ in range(3)]})
S5_3 = ("pre_tokenizer", {"type": "Split", "pattern": {"Regex": r"(a*)\g<1>\g<1>\g<1>\d"},
                          "behavior": "Isolated", "invert": False})


def s5_2(token: str, i: int) -> tuple[str, dict]:
    """A template repeating ``token`` 30 times, ``token`` standing for 6,000 ids: 180,000 ids
    added to every text (small enough to pass a checkpoint's metadata bounds)."""
    item = [{"SpecialToken": {"id": token, "type_id": 0}}] * 30 + [{"Sequence": {"id": "A", "type_id": 0}}]
    return "post_processor", {"type": "TemplateProcessing", "single": item, "pair": item,
                              "special_tokens": {token: {"id": token, "ids": [i] * 6_000,
                                                         "tokens": [token] * 6_000}}}


def s5_4(spec: dict) -> dict:
    """``spec`` (a tokenizer.json) with its model a WordPiece over the same vocabulary whose words
    may be 10^9 characters long."""
    out = dict(spec)
    out["model"] = {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                    "max_input_chars_per_word": 10**9, "vocab": spec["model"]["vocab"]}
    return out


ATTACKS = {
    "S5-1": (lambda spec: {**spec, S5_1[0]: S5_1[1]},
             r"decoder Replace's content must be a string of at most 16 characters"),
    "S5-2": (None, r"post-processor TemplateProcessing's special_tokens '\S+' must stand for 1 to 4 "
                   r"tokens, not 6000"),
    "S5-3": (lambda spec: {**spec, S5_3[0]: S5_3[1]},
             r"pre-tokenizer regex '\(a\*\)\\\\g<1>.*is not one tfviz knows"),
    "S5-4": (s5_4, r"model WordPiece's max_input_chars_per_word must be a whole number from 1 to 100, "
                   r"not '1000000000'"),
}


def attacked(name: str, spec: dict, special: str) -> dict:
    change, _ = ATTACKS[name]
    if name == "S5-2":
        part, rule = s5_2(special, spec["model"]["vocab"][special])
        return {**spec, part: rule}
    return change(spec)


def checkpoint(out: Path, name: str) -> Path:
    """The shipped lm's weights and task, its tokenizer JSON changed by attack ``name``."""
    ckpt = load_checkpoint(LM)
    data = json.loads(ckpt.tokenizer.to_json())
    data["tokenizer"] = attacked(name, data["tokenizer"], "the")  # no brackets: under the bound
    if name == "S5-4":
        data["kind"] = "wordpiece"

    class AsWritten:
        def to_json(self):
            return json.dumps(data)

    return save_checkpoint(out, ckpt.model, tokenizer=AsWritten(), task=ckpt.task,
                           train_config=ckpt.train_config, history=ckpt.history)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("attacks")
    return {name: checkpoint(folder / f"{name}.safetensors", name) for name in ATTACKS}


@pytest.mark.parametrize("name", list(ATTACKS))
def test_each_attack_is_refused_by_load_checkpoint_naming_the_component(files, name):
    assert files[name].stat().st_size < 20_000_000
    with pytest.raises(CheckpointError, match=ATTACKS[name][1]) as err:
        load_checkpoint(files[name])
    assert "the tokenizer's" in str(err.value)


@pytest.mark.parametrize("name", list(ATTACKS))
def test_each_attack_is_refused_as_an_upload_and_nothing_is_kept(files, name, tmp_path, monkeypatch):
    from tfviz import paths
    from tfviz.classroom.uploads import save_upload

    monkeypatch.setenv("TFVIZ_CHECKPOINT_DIR", str(tmp_path))
    folder = paths.session_dir("0123456789ab") / "uploaded"
    with pytest.raises(ValueError, match=ATTACKS[name][1]) as err:
        save_upload(folder, f"{name}.safetensors", files[name].read_bytes())
    assert str(tmp_path) not in str(err.value) and ".upload.tmp" not in str(err.value)
    left = sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []
    assert left == []


@pytest.mark.parametrize("name", list(ATTACKS))
def test_each_attack_in_a_model_folder_is_listed_with_its_reason_and_refused(name, tmp_path):
    import hf_folders

    from tfviz.interop import ModelFolderError, from_pretrained
    from tfviz.interop.discover import inspect

    folder = hf_folders.tiny_gpt2(tmp_path / "models" / name)
    spec = json.loads((folder / "tokenizer.json").read_text())
    (folder / "tokenizer.json").write_text(json.dumps(attacked(name, spec, "[UNK]")))
    info = inspect(folder)
    assert not info.ok and "the tokenizer's" in info.reason, info
    with pytest.raises(ModelFolderError, match=ATTACKS[name][1]):
        from_pretrained(folder)


def test_the_known_neighbours_of_the_attacks_load_and_read():
    """What the attacks distort, in its known shape, is read: Llama 2's decoder Replace "▁" -> " ",
    BERT's template ([CLS] standing for one id), Llama 3's regex, BERT's 100-character words."""
    data = json.loads(load_checkpoint(LM).tokenizer.to_json())
    spec = data["tokenizer"]
    bos = spec["model"]["vocab"]["[BOS]"]
    template = [{"SpecialToken": {"id": "[BOS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]
    llama3 = next(p for p, degree in tokenize.KNOWN_SPLITS.items() if "\\p{N}{1,3}" in p and "Lu" not in p)
    good = {
        "decoder": {**spec, "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "Fuse"}]}},
        "template": {**spec, "post_processor": {"type": "TemplateProcessing", "single": template, "pair": template,
                                                "special_tokens": {"[BOS]": {"id": "[BOS]", "ids": [bos],
                                                                             "tokens": ["[BOS]"]}}}},
        "regex": {**spec, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": llama3},
                                            "behavior": "Isolated", "invert": False}},
    }
    for what, tok_spec in good.items():
        tok = Tokenizer.from_json(json.dumps({**data, "tokenizer": tok_spec}))
        enc = tok.encode("the cat sat", template=what == "template")
        assert enc.ids and tok.decode(enc.ids), what
    wordpiece = s5_4(spec)
    wordpiece["model"]["max_input_chars_per_word"] = 100
    tok = Tokenizer.from_json(json.dumps({**data, "kind": "wordpiece", "tokenizer": wordpiece}))
    assert tok.encode("a" * 6000).ids == [tok.unk_id]  # a word over 100 characters is [UNK] at once


def test_a_file_is_rebuilt_not_run_as_written():
    """The backend is built from tfviz's own JSON: fields tfviz never uses (padding to a fixed
    length, truncation) are dropped, not obeyed."""
    data = json.loads(load_checkpoint(LM).tokenizer.to_json())
    data["tokenizer"]["padding"] = {"strategy": {"Fixed": 10_000_000}, "direction": "Right",
                                    "pad_to_multiple_of": None, "pad_id": 0, "pad_type_id": 0,
                                    "pad_token": "[PAD]"}
    tok = Tokenizer.from_json(json.dumps(data))
    assert tok.backend.padding is None and tok.backend.truncation is None
    assert len(tok.encode("the cat").ids) == 2


@pytest.mark.parametrize("change, message", [
    ({"normalizer": {"type": "Replace", "pattern": {"Regex": "a"}, "content": "b"}},
     r"normalizer Replace's pattern must be a literal string"),
    ({"normalizer": {"type": "Nmt2"}}, r"normalizer has a component of type 'Nmt2' that tfviz does not read"),
    ({"decoder": {"type": "CTC", "pad_token": "<pad>", "word_delimiter_token": "|", "cleanup": True}},
     r"decoder has a component of type 'CTC'"),
    ({"pre_tokenizer": {"type": "Whitespace", "extra": 1}}, r"pre-tokenizer Whitespace has the field 'extra'"),
    ({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Whitespace"}] * 9}},
     r"Sequence must list at most 8"),
    ({"decoder": {"type": "Strip", "content": " ", "start": 10**9, "stop": 0}},
     r"decoder Strip's start must be a whole number from 0 to 16"),
    ({"post_processor": {"type": "BertProcessing", "sep": ["x" * 10_000, 1], "cls": ["[CLS]", 2]}},
     r"post-processor BertProcessing's sep must be a string of 1 to at most 64 characters"),
    ({"added_tokens": [{"id": 99, "content": "a" * 5000, "special": True}]},
     r"added_tokens added token's content holds an added token of 5000 characters"),
], ids=["regex-replace", "unknown-normalizer", "ctc", "unknown-field", "long-sequence", "strip", "bert-sep",
        "long-added-token"])
def test_components_tfviz_does_not_know_are_refused_with_a_sentence(change, message):
    data = json.loads(load_checkpoint(LM).tokenizer.to_json())
    data["tokenizer"].update(change)
    with pytest.raises(TokenizerError, match=message):
        Tokenizer.from_json(json.dumps(data))


def test_a_backend_built_in_this_process_is_held_to_the_same_components():
    """Defence in depth: ``Tokenizer(backend)`` checks the backend's model and post-processor too
    (a WordPiece of 10^9-character words, a template standing for 200,000 ids)."""
    vocab = {"[UNK]": 0, "a": 1, "##a": 2}
    hf = HF(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=10**9))
    hf.pre_tokenizer = pre_tokenizers.Whitespace()
    with pytest.raises(TokenizerError, match="max_input_chars_per_word must be a whole number from 1 to 100"):
        Tokenizer(hf, "wordpiece", specials={"unk": "[UNK]"})
    hf = HF(models.WordPiece(vocab, unk_token="[UNK]"))
    hf.post_processor = processors.TemplateProcessing(single="[UNK] $A", special_tokens=[("[UNK]", 0)])
    assert Tokenizer(hf, "wordpiece", specials={"unk": "[UNK]"}).encode("a", template=True).ids == [0, 1]
    hf.post_processor = processors.TemplateProcessing(
        single="[UNK] $A", special_tokens=[{"id": "[UNK]", "ids": [0] * 200_000, "tokens": ["[UNK]"] * 200_000}])
    with pytest.raises(TokenizerError, match="must stand for 1 to 4 tokens"):
        Tokenizer(hf, "wordpiece", specials={"unk": "[UNK]"})
    hf.post_processor = None
    hf.pre_tokenizer = pre_tokenizers.Split(Regex(r"(a*)\g<1>\d"), "isolated")
    with pytest.raises(TokenizerError, match="is not one tfviz knows"):
        Tokenizer(hf, "wordpiece", specials={"unk": "[UNK]"})
    hf.pre_tokenizer = pre_tokenizers.Whitespace()
    hf.decoder = decoders.Replace("e", "eee")
    with pytest.raises(TokenizerError, match="a decoder's Replace never lengthens a text"):
        Tokenizer(hf, "wordpiece", specials={"unk": "[UNK]"})


def test_decode_reads_a_bounded_number_of_ids_per_call():
    tok = load_checkpoint(LM).tokenizer
    most = tok.max_decode_ids
    assert most >= tokenize.MIN_DECODE_IDS
    assert tok.decode([tok.unk_id] * 3) == "[UNK] [UNK] [UNK]"
    with pytest.raises(TokenizerError, match=f"decodes at most {most:,} at once"):
        tok.decode([tok.unk_id] * (most + 1))


def test_unigram_pieces_are_short():
    """A Unigram lattice costs the text's length times its longest piece: pieces of at most
    ``MAX_PIECE_CHARS`` (sentencepiece trains 16 at most)."""
    def spec(longest: int) -> dict:
        vocab = [["<unk>", 0.0]] + [["a" * k, -float(k)] for k in range(1, longest + 1)]
        return {"added_tokens": [], "normalizer": None, "post_processor": None, "decoder": {"type": "Fuse"},
                "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "never",
                                  "split": True}, "model": {"type": "Unigram", "unk_id": 0, "vocab": vocab}}

    most = tokenize.MAX_PIECE_CHARS
    tok = Tokenizer(tokenize.build(spec(most)), "sentencepiece", specials={"unk": "<unk>"})
    assert tok.encode("a" * (2 * most)).ids == [most, most]
    with pytest.raises(TokenizerError, match=f"model Unigram's vocab .*piece of {most + 1} characters"):
        tokenize.build(spec(most + 1))
