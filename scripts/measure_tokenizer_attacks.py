"""Issue 40, item 1, measured: how long each of the four tokenizer attacks (S5-1..S5-4) now holds
the process (refused at load), and the worst the accepted components cost on the pages' largest
text (20,000 characters).

    .venv/bin/python scripts/measure_tokenizer_attacks.py

The attack files are built as ``tests/robustness/test_tokenizers_by_construction.py`` builds them
(the shipped ``lm`` weights with one tokenizer component replaced). Say the machine's load
(printed) with any number you quote: these are wall times on a shared machine.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "robustness")]


def main() -> None:
    import test_tokenizers_by_construction as attacks
    from tokenizers import Regex
    from tokenizers import Tokenizer as HF
    from tokenizers import models, normalizers, pre_tokenizers

    from tfviz.tokenize import KNOWN_SPLITS, MAX_PIECE_CHARS, MAX_WORD_CHARS, Tokenizer
    from tfviz.train.checkpoint import load_checkpoint

    print(f"load average {os.getloadavg()[0]:.1f}")
    folder = Path(tempfile.mkdtemp())
    for name in attacks.ATTACKS:
        path = attacks.checkpoint(folder / f"{name}.safetensors", name)
        t = time.perf_counter()
        try:
            load_checkpoint(path)
            said = "LOADED"
        except ValueError as e:
            said = str(e).split(": ", 2)[-1][:100]
        print(f"{name}: {1000 * (time.perf_counter() - t):.1f} ms ({path.stat().st_size / 1e3:.0f} kB): {said}")

    def timed(label, tok, text):
        t = time.perf_counter()
        n = len(tok.encode(text).ids)
        print(f"{label}: {time.perf_counter() - t:.3f} s, {n:,} ids")

    hf = HF(models.WordPiece({"[UNK]": 0, "a": 1, "##a": 2}, unk_token="[UNK]",
                             max_input_chars_per_word=MAX_WORD_CHARS))
    hf.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    timed(f"WordPiece, single-letter vocabulary, 20,000 characters of {MAX_WORD_CHARS}-letter words",
          Tokenizer(hf, "wordpiece", specials={"unk": "[UNK]"}),
          ("a" * MAX_WORD_CHARS + " ") * (20_000 // (MAX_WORD_CHARS + 1)))
    vocab = [("<unk>", 0.0)] + [("a" * k, -float(k)) for k in range(1, MAX_PIECE_CHARS + 1)]
    timed(f"Unigram, pieces of 1..{MAX_PIECE_CHARS} a's, 20,000 a's",
          Tokenizer(HF(models.Unigram(vocab, 0, False)), "sentencepiece", specials={"unk": "<unk>"}), "a" * 20_000)
    for pattern, degree in KNOWN_SPLITS.items():
        hf = HF(models.BPE({"a": 0, "<e>": 1, " ": 2, "\n": 3}, []))
        hf.pre_tokenizer = pre_tokenizers.Split(Regex(pattern), "isolated")
        tok = Tokenizer(hf, "bpe", specials={"eos": "<e>"})
        worst = max((time.perf_counter(), tok.encode_ids(text), time.perf_counter())[2:][0] - t0
                    for text in (" " * 20_000, "\u00a0" * 19_999 + "a", "!" * 20_000, ("a" * 50 + " ") * 392)
                    for t0 in [time.perf_counter()])
        print(f"known regex of degree {degree} ({pattern[:30]}…), worst of 4 texts of 20,000: {worst:.3f} s")
    import threading

    hf = HF(models.WordPiece({"[UNK]": 0, "a": 1, "##a": 2}, unk_token="[UNK]",
                             max_input_chars_per_word=MAX_WORD_CHARS))
    hf.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok, text = Tokenizer(hf, "wordpiece", specials={"unk": "[UNK]"}), ("a" * 100 + " ") * 198
    for label, encode in (("the library's encode", lambda: hf.encode(text)), ("Tokenizer.encode", lambda: tok.encode(text))):
        gaps, stop = [], threading.Event()

        def other_session():  # another session's thread: the longest it waited for the GIL
            last, worst = time.perf_counter(), 0.0
            while not stop.is_set():
                now = time.perf_counter()
                worst, last = max(worst, now - last), now
                time.sleep(0.001)
            gaps.append(worst)

        t = threading.Thread(target=other_session)
        t.start()
        time.sleep(0.05)
        t0 = time.perf_counter()
        encode()
        took = time.perf_counter() - t0
        stop.set()
        t.join()
        print(f"{label} of the worst WordPiece text: {took:.2f} s; another thread's longest wait {gaps[0]:.3f} s")
    hf = HF(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    hf.normalizer, hf.pre_tokenizer = normalizers.NFKC(), pre_tokenizers.Whitespace()
    tok = Tokenizer(hf, "word", specials={"unk": "[UNK]"})
    timed(f"NFKC (18x), U+FDFA x {min(20_000, tok.max_chars):,}", tok, "\ufdfa" * min(20_000, tok.max_chars))


if __name__ == "__main__":
    main()
