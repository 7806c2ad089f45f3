"""tasks.realtext: the stdlib corpora (split by file, deterministic, deduplicated) and lm's corpus=.

On a small slice (a fake stdlib folder, or the real one capped by ``max_chars``): seconds."""
from __future__ import annotations

import pytest

from tfviz.tasks import make_task, realtext


def _fake_stdlib(root, n_files=60):
    """A folder shaped like a stdlib: modules with docstrings, a package, a test suite and
    site-packages that must be left out, and one docstring copied into a second module."""
    for i in range(n_files):
        (root / f"mod{i:02d}.py").write_text(
            f'"""Module {i}: reads and writes the records of kind {i} for the people who keep them.\n\n'
            + f"Each record of kind {i} holds a name, a date and a note, and this sentence is here {i} " * 4
            + '"""\n\n'
            f"def f{i}(x):\n    \"\"\"Return x times {i}, the way a careful person would compute it.\"\"\"\n"
            f"    return x * {i}\n")
    first = (root / "mod01.py").read_text()
    (root / "copy.py").write_text(first[:first.index('"""', 3) + 3] + "\n")  # mod01's docstring, copied
    for skipped in ("test", "site-packages"):
        (root / skipped).mkdir()
        (root / skipped / "secret.py").write_text('"""SKIPPED TEXT that must never reach the corpus, anywhere."""\n')
    (root / "test_thing.py").write_text('"""SKIPPED TEXT that must never reach the corpus, anywhere."""\n')
    return root


def test_split_by_file_deterministic_and_deduplicated(tmp_path):
    root = _fake_stdlib(tmp_path)
    docs = realtext.build("stdlib-docs", root)
    again = realtext._build.__wrapped__("stdlib-docs", str(root), None)  # built anew, not the cache
    assert docs.texts == again.texts and docs.files == again.files
    everything = "".join(docs.texts.values())
    assert "SKIPPED TEXT" not in everything  # test suites and site-packages left out
    assert everything.count("records of kind 1 for") == 1  # a copied docstring kept once
    # each file's text lies in exactly the split its path hashes to
    for i in range(60):
        where = realtext.split_of(f"mod{i:02d}.py")
        line = f"Module {i}: reads"
        assert [s for s in realtext.SPLITS if line in docs.texts[s]] == [where]
    assert sum(docs.files.values()) == 61 and all(docs.texts[s] for s in realtext.SPLITS)
    code = realtext._build("stdlib-code", str(root), None)
    assert "def f7(x):" in code.texts[realtext.split_of("mod07.py")]
    assert "stdlib-docs" in docs.describe() and "split by file" in docs.describe()


def test_split_of_is_a_stable_hash():
    assert realtext.split_of("json/decoder.py") == realtext.split_of("json/decoder.py")
    counts = {s: 0 for s in realtext.SPLITS}
    for i in range(2000):
        counts[realtext.split_of(f"pkg/m{i}.py")] += 1
    assert 0.86 < counts["train"] / 2000 < 0.94 and counts["validation"] > 50 and counts["test"] > 50


@pytest.mark.parametrize("make", ["missing", "tiny"])
def test_a_missing_or_tiny_stdlib_is_one_sentence(tmp_path, make):
    root = tmp_path / "lib"
    if make == "tiny":
        root.mkdir()
        (root / "a.py").write_text('"""One short module docstring, long enough to be kept by the corpus."""\n')
    with pytest.raises(ValueError, match=r"standard library at .* is missing or too small") as e:
        realtext.build("stdlib-docs", root)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="not one of"):
        realtext.build("wikipedia", root)


def test_the_real_stdlib_slice():
    """This Python's own stdlib, capped: real English docstrings in every split, and the same
    text twice."""
    c = realtext.build("stdlib-docs", max_chars=20_000)
    assert all(len(c.texts[s]) >= 20_000 for s in realtext.SPLITS)
    assert c.python.count(".") == 2 and c.root
    assert realtext.build("stdlib-docs", max_chars=20_000) is c  # built once per process


def test_lm_on_a_corpus_trains_its_tokenizer_on_the_training_split_only():
    task = make_task("lm", corpus="stdlib-docs", corpus_chars=20_000, tokenizer="bpe", vocab_size=400, block=32)
    corpus = task.real_corpus()
    sizes = [len(task.examples(s)) for s in ("train", "validation", "test")]
    assert all(sizes)
    tok = task.tokenizer
    # windows come from their own split's text: decoded, each is a substring of that split
    for split in ("validation", "test"):
        ex = task.examples(split)[0]
        assert tok.decode(ex.tokens).strip()[:20] in corpus.texts[split]
        assert ex.targets[:-1] == ex.tokens[1:]
    with pytest.raises(ValueError, match="a text or a corpus, not both"):
        make_task("lm", corpus="stdlib-docs", text="hello world " * 100).examples("train")
    with pytest.raises(ValueError):
        make_task("lm", corpus="the-internet")
