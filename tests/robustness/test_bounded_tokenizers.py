"""Issue 29, items 1 and 11: a tokenizer whose rules grow a text without bound, or backtrack.

The reproductions, with real tokenizers: the shipped ``lm`` weights with the normalizer Replace
"a" -> "a" x 10,000 (a 463 kB upload; 20,000 typed 'a's made 200 million characters and the
server process aborted on a 3.2 GB allocation) and with the pre-tokenizer Split((a|aa)+$)
(31 'a's and '!': ``pyo3_runtime.PanicException``, a BaseException that killed the tab's script
thread). Now each is refused at load with the reason (issue 40: a tokenizer is read by
construction, ``tfviz.tokenize.canonical``: a Replace of more than a few characters, a regex that
is not a known one, are components tfviz does not read); what is accepted is read under a bound
(``Tokenizer.max_chars``, ``piece_chars``), and whatever the library raises, a panic included,
is the message "this tokenizer cannot read this text".
The abort is shown not to happen by reading the text in this process under the bound, and the
unbounded case by a separate process that would have aborted (it ends normally, refused at load).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from apptest_helpers import messages, open_page, problems, rerun
from tokenizers import Regex, pre_tokenizers

from tfviz import tokenize
from tfviz.analysis import explorer
from tfviz.storage import CheckpointError
from tfviz.tokenize import CANNOT_READ, TokenizerError
from tfviz.train.checkpoint import load_checkpoint, save_checkpoint

REPO = Path(__file__).resolve().parents[2]
LM = REPO / "checkpoints" / "lm.safetensors"
GROW = {"type": "Replace", "pattern": {"String": "a"}, "content": "a" * 10_000}
BACKTRACK = {"type": "Split", "pattern": {"Regex": "(a|aa)+$"}, "behavior": "Isolated", "invert": False}
POLYNOMIAL = {"type": "Split", "pattern": {"Regex": r"a*a*a*a*\d"}, "behavior": "Isolated", "invert": False}
TYPED = "a" * 20_000
REFUSED_GROW = r"normalizer Replace's content must be a string of at most 4 characters"
NFKC = {"type": "NFKC"}  # a known normalizer that grows a text 18 times (U+FDFA)


def with_rule(out: Path, part: str, rule: dict) -> Path:
    """The shipped lm's weights and task with its tokenizer's ``part`` replaced by ``rule``, the
    JSON written as a student writes it (no tfviz Tokenizer is built from it here)."""
    ckpt = load_checkpoint(LM)
    data = json.loads(ckpt.tokenizer.to_json())
    data["tokenizer"][part] = rule

    class AsWritten:
        def to_json(self):
            return json.dumps(data)

    return save_checkpoint(out, ckpt.model, tokenizer=AsWritten(), task=ckpt.task,
                           train_config=ckpt.train_config, history=ckpt.history)


@pytest.fixture(scope="module")
def grows(tmp_path_factory) -> Path:
    return with_rule(tmp_path_factory.mktemp("grows") / "grows.safetensors", "normalizer", GROW)


def test_a_normalizer_that_grows_a_text_10000_times_is_refused_at_load(grows):
    assert grows.stat().st_size < 500_000  # the reporter's 460 kB file
    with pytest.raises(CheckpointError, match=REFUSED_GROW):
        load_checkpoint(grows)


@pytest.mark.parametrize("rule, message", [
    (BACKTRACK, r"pre-tokenizer regex '\(a\|aa\)\+\$' is not one tfviz knows"),
    (POLYNOMIAL, r"pre-tokenizer regex 'a\*a\*a\*a\*\\\\d' is not one tfviz knows"),
], ids=["exponential", "polynomial"])
def test_a_regex_that_backtracks_is_refused_at_load(tmp_path, rule, message):
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(with_rule(tmp_path / "bad.safetensors", "pre_tokenizer", rule))


def test_the_upload_is_refused_with_the_reason(grows, tmp_path, monkeypatch):
    from tfviz import paths
    from ui import uploads

    monkeypatch.setenv("TFVIZ_CHECKPOINT_DIR", str(tmp_path))
    folder = paths.session_dir("0123456789ab")
    monkeypatch.setattr(uploads, "session_dir", lambda: folder)
    with pytest.raises(ValueError, match=REFUSED_GROW) as err:
        uploads.save_upload("grows.safetensors", grows.read_bytes())
    assert str(tmp_path) not in str(err.value)
    assert not list((folder / "uploaded").glob("*.safetensors")) if folder.exists() else True


def test_a_server_that_allows_the_growth_reads_the_typed_text_under_the_bound(grows, tmp_path, monkeypatch):
    """TFVIZ_TOKENIZER_MAX_GROWTH raised to 10,000: the 10,000-fold Replace is still refused (issue
    40: not a component tfviz reads, whatever the server's bound). A known normalizer that grows
    (NFKC, 18 times) loads, and the 20,000 typed 'a's are read as the pages read them
    (``ui.inputs.readable``'s cut, then the explorer's encoding), here, in this process: 100
    characters (TFVIZ_TOKENIZER_MAX_CHARS 1,800 / 18)."""
    monkeypatch.setenv("TFVIZ_TOKENIZER_MAX_GROWTH", "10000")
    with pytest.raises(CheckpointError, match=REFUSED_GROW):
        load_checkpoint(grows)
    monkeypatch.setenv("TFVIZ_TOKENIZER_MAX_CHARS", "1800")
    tok = load_checkpoint(with_rule(tmp_path / "nfkc.safetensors", "normalizer", NFKC)).tokenizer
    assert (tok.rules.growth, tok.max_chars) == (18, 100)  # 1,800 characters / 18
    p = explorer.prepare_text(tok, TYPED[:tok.max_chars], [], [], 256)
    assert p.ids == [tok.unk_id]  # one word of a million 'a's, not in the vocabulary
    assert all(len(piece) <= tok.piece_chars for piece in tok.pieces(TYPED))  # longer: in pieces


def test_the_unbounded_case_would_have_aborted_and_is_refused_before_encoding(grows):
    """In another process (an abort there cannot take the tests with it): the page's path —
    load the checkpoint, read the typed text — ends normally, refused at load, before anything
    is encoded; its peak memory stays that of an idle process (was: SIGABRT at 3.8 GB)."""
    script = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
from tfviz.storage import CheckpointError
from tfviz.train.checkpoint import load_checkpoint
from tfviz.analysis import explorer
try:
    tok = load_checkpoint({str(grows)!r}).tokenizer
except CheckpointError as e:
    print("refused:", e)
else:
    explorer.prepare_text(tok, "a" * 20000, [], [], 256)
    print("encoded")
print("peak", next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    assert "refused:" in out.stdout and "Replace's content must be a string of at most 4" in out.stdout, out.stdout
    assert "encoded" not in out.stdout
    peak_kb = int(out.stdout.split("peak")[1])
    assert peak_kb < 2 * 2**20, out.stdout  # < 2 GB (torch imported: about 0.3); the abort needed 3.2 more


def test_a_panic_of_the_tokenizers_library_is_a_message_and_the_tokenizer_still_reads():
    """A regex the load-time check would not see: put on a built tokenizer's backend. The
    library's PanicException (a BaseException) becomes a TokenizerError (a ValueError)."""
    tok = load_checkpoint(LM).tokenizer
    tok.backend.pre_tokenizer = pre_tokenizers.Split(Regex("(a|aa)+$"), "isolated")
    with pytest.raises(TokenizerError, match=CANNOT_READ) as err:
        tok.encode("a" * 31 + "!")
    assert "PanicException" in str(err.value)
    with pytest.raises(TokenizerError, match=CANNOT_READ):
        tok.encode_ids("a" * 31 + "!")
    assert tok.encode("a a a").ids  # the same tokenizer reads the next text


def test_the_attention_page_says_the_tokenizer_cannot_read_the_text_and_answers_again(
        tmp_path, monkeypatch, classroom):
    """The backtracking checkpoint, loaded by the app with the check switched off (as a regex
    it could not see would be): typing 31 'a's and '!' shows the message, not an exception,
    and the same tab reads the next text."""
    path = with_rule(classroom["dir"] / "backtracks.safetensors", "pre_tokenizer", BACKTRACK)
    monkeypatch.setattr(tokenize, "regex_bound", lambda pattern: (None, 0))
    at = open_page("attention", path, att_source="Type text")
    at.session_state["att_text"] = "a" * 31 + "!"
    at.run()
    assert not problems(at), problems(at)
    assert CANNOT_READ in messages(at), messages(at)
    rerun(at, att_text="a a a")
    assert CANNOT_READ not in messages(at) and at.get("plotly_chart"), messages(at)


def test_typed_text_is_cut_by_characters_before_it_is_tokenized(classroom, monkeypatch):
    """20,000 typed 'a's on the Attention explorer with an 18-fold tokenizer (NFKC) on a server
    that reads 1,800 normalised characters at once: the page reads the first 100 characters (the
    text area stops there; a value that reaches the page otherwise is cut by
    ``ui.inputs.readable``, with a warning). (Was the 10,000-fold Replace, no longer read at all.)"""
    monkeypatch.setenv("TFVIZ_TOKENIZER_MAX_CHARS", "1800")
    path = with_rule(Path(classroom["dir"]) / "grows.safetensors", "normalizer", NFKC)
    at = open_page("attention", path, att_source="Type text")
    at.session_state["att_text"] = TYPED
    at.run()
    assert not problems(at), problems(at)
    assert f"read as [UNK]): '{'a' * 100}'" in messages(at), messages(at)  # one word of 100 'a's
    from ui.inputs import readable

    with pytest.MonkeyPatch.context() as m:
        shown = []
        m.setattr("ui.inputs.st.warning", shown.append)
        assert readable(load_checkpoint(path).tokenizer, TYPED) == TYPED[:100]
    assert shown == ["The text has 20,000 characters; the first 100 are read."]


def test_a_model_folder_with_the_growing_normalizer_is_listed_with_its_reason(tmp_path, monkeypatch):
    """A GPT-2 folder under models/ whose tokenizer.json has the normalizer: the listing says why
    it cannot open (it cost the Tokens page 7.35 s per visit), and ``from_pretrained`` refuses it."""
    import hf_folders

    from tfviz.interop import ModelFolderError, from_pretrained
    from tfviz.interop.discover import inspect

    folder = hf_folders.tiny_gpt2(tmp_path / "models" / "grows")
    spec = json.loads((folder / "tokenizer.json").read_text())
    spec["normalizer"] = GROW
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    info = inspect(folder)
    assert not info.ok and "Replace's content must be a string of at most 4 characters" in info.reason, info
    with pytest.raises(ModelFolderError, match=REFUSED_GROW):
        from_pretrained(folder)


REAL = {  # the pre-tokenizer patterns of real tokenizers: each passes, with its degree
    "gpt2": (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+", 1),
    "llama3": (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+", 2),
    "gpt4o": (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
              r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+", 2),
    "bloom": (r" ?[^(\s|[.,!?…。，、।۔،])]+", 1),
}


@pytest.mark.parametrize("name", list(REAL))
def test_real_patterns_pass_and_are_read_in_pieces_that_change_nothing(name):
    from tokenizers import Tokenizer as HF
    from tokenizers import decoders, models, trainers

    pattern, degree = REAL[name]
    assert tokenize.regex_bound(pattern) == (None, degree)
    hf = HF(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), "isolated"),
                                                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    hf.decoder = decoders.ByteLevel()
    corpus = ["the cat sat on the mat", "it's 12345 ok!\n\nnew  line", "héllo 🦓 world"] * 4
    hf.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=330, show_progress=False, special_tokens=["<e>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = tokenize.Tokenizer(hf, "bpe", specials={"eos": "<e>"})
    assert tok.piece_chars == {1: 4096, 2: 64}[degree]
    text = " ".join(corpus) * 30  # 2,000+ characters: many pieces for degree 2
    whole = hf.encode(text, add_special_tokens=False)
    enc = tok.encode(text)
    assert enc.ids == whole.ids and enc.offsets == [tuple(o) for o in whole.offsets]


@pytest.mark.parametrize("normalizer, growth", [
    (None, 5), ({"type": "NFKC"}, 90), ({"type": "BertNormalizer"}, 20),
    ({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                          {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}, 10),
])
def test_real_normalizers_pass_with_their_growth(normalizer, growth):
    """GPT-2 (ByteLevel: 5), NFKC (18, U+FDFA), BERT's (4), Llama 2's Prepend + Replace."""
    rules = tokenize.rules_of(normalizer, {"type": "ByteLevel", "add_prefix_space": False})
    assert rules.growth == growth


def test_a_precompiled_charsmap_grows_by_its_longest_replacement():
    """A sentencepiece charsmap (Precompiled): a 4-byte trie size, the trie, then NUL-terminated
    replacements; its growth is the longest one (here 10,000 'a's: refused)."""
    import base64
    import struct

    def charsmap(*replacements: str) -> dict:
        trie = b"\x00" * 8
        blob = struct.pack("<I", len(trie)) + trie + b"".join(r.encode() + b"\0" for r in replacements)
        return {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(blob).decode()}

    assert tokenize.rules_of(charsmap("a", "abc", "de"), None).growth == 3
    with pytest.raises(TokenizerError, match="Precompiled normalizer can make a text 10,000 times longer"):
        tokenize.rules_of(charsmap("a" * 10_000), None)
    truncated = dict(charsmap("a"), precompiled_charsmap=base64.b64encode(struct.pack("<I", 99)).decode())
    with pytest.raises(TokenizerError, match="truncated"):
        tokenize.rules_of(truncated, None)
