"""lm: next-token language modelling on a user's text, or on the built-in grammar corpus.

The whole text is tokenized once (tokenizer ``tokenizer`` = char | word | bpe, trained on the whole
text), the id stream is cut into contiguous chunks of ``chunk`` tokens (fewer for short texts, so
there are ~10 chunks), and each chunk goes, by a seeded shuffle, to one split
(``val_frac`` / ``test_frac`` of the chunks, the rest to train). Examples are windows inside one
chunk, never across chunks:
    tokens  = ids[s : s+block]        targets = ids[s+1 : s+block+1]     (s = 0, stride, 2*stride ..)
Validation/test windows identical to an earlier split's window are dropped, so splits are disjoint.
With ``bos=True`` every window opens with [BOS], as Llama's training sequences do (the attention-
sink model, issue 33): tokens = [BOS] ids[s : s+block-1], targets = ids[s : s+block].
With ``text=""`` the text is ``n_sentences`` sentences of ``grammar.corpus``.
``corpus="stdlib-docs"`` / ``"stdlib-code"``: real text built from this Python's standard library
(``tasks.realtext``), already split by file (its own split, not the chunks' shuffle): the tokenizer
is trained on the training split only; ``corpus_chars`` caps each split (a small slice for tests).

``tokenizer="given"``: the text is read with a model's own tokenizer, handed over at construction
(``LMTask(tokenizer="given", text=..., given_tokenizer=ck.tokenizer)``) instead of one trained on
the text — fine-tuning an imported model (GPT-2's 50,257 tokens) on a user's text. The tokenizer
is not part of the spec: a checkpoint saves it anyway, and ``Checkpoint.shared_task`` hands it
back (``vocab_size`` and ``lowercase`` are the tokenizer's own then, and must stay unset).
"""
from __future__ import annotations

from ..tokenize import KINDS, train_tokenizer
from . import grammar, realtext
from .base import Example
from .common import MAX_EXAMPLES, MAX_TOKENS, GeneratedTask, token_evaluate

GIVEN = "given"  # tokenizer= a model's own tokenizer (given at construction), not one trained here


class LMTask(GeneratedTask):
    name = "lm"
    archs = ("decoder",)
    metric = "share of next tokens predicted correctly"
    defaults = dict(text="", tokenizer="word", vocab_size=None, lowercase=False, block=32,
                    stride=None, chunk=512, val_frac=0.1, test_frac=0.1, n_sentences=20000,
                    n_train=None, n_val=None, n_test=None, bos=False, corpus="", corpus_chars=None)
    limits = dict(vocab_size=(2, 100_000), block=(1, 4096), stride=(1, 4096), chunk=(2, 10**6),
                  val_frac=(0.0, 0.5), test_frac=(0.0, 0.5), n_sentences=(1, 100_000),
                  corpus_chars=(1_000, 100_000_000))
    choices = dict(tokenizer=(*KINDS, GIVEN), corpus=("", *realtext.CORPORA))
    takes_tokenizer = True  # make_task(..., given_tokenizer=) for tokenizer="given"

    def __init__(self, seed: int = 0, given_tokenizer=None, **params):
        super().__init__(seed, **params)
        if given_tokenizer is not None and self.params["tokenizer"] != GIVEN:
            raise ValueError(f"task 'lm': a given tokenizer needs tokenizer={GIVEN!r}, not "
                             f"{self.params['tokenizer']!r}")
        self.given_tokenizer = given_tokenizer

    def check_params(self, p):
        self.check_tokens(p["block"] + 1)
        if p["corpus"] and p["text"]:
            raise ValueError("task 'lm': give a text or a corpus, not both")
        if p["tokenizer"] == GIVEN and (p["vocab_size"] is not None or p["lowercase"]):
            raise ValueError("task 'lm': with tokenizer='given' the vocabulary is the given "
                             "tokenizer's: leave vocab_size and lowercase unset")

    def corpus_text(self) -> str:
        p = self.params
        if p["corpus"]:
            return self.real_corpus().texts["train"]
        return p["text"] or " ".join(grammar.corpus(int(p["n_sentences"]), self.seed))

    def real_corpus(self) -> realtext.Corpus:
        chars = self.params["corpus_chars"]
        return realtext.build(self.params["corpus"], max_chars=None if chars is None else int(chars))

    def _build(self):
        p = self.params
        text = self.corpus_text()
        kind, block = p["tokenizer"], int(p["block"])
        stride = int(p["stride"] or block)
        if kind == GIVEN:
            tok = self.given_tokenizer
            if tok is None:
                raise ValueError("task 'lm' with tokenizer='given' reads its text with a model's own "
                                 "tokenizer, and none was given (Checkpoint.shared_task passes the "
                                 "checkpoint's)")
        else:
            vocab = p["vocab_size"] if p["vocab_size"] is not None or kind != "bpe" else 512
            tok = train_tokenizer(kind, [text], vocab, bool(p["lowercase"]))
        bos = tok.bos_id if p["bos"] else None
        if p["bos"] and bos is None:
            raise ValueError("task 'lm': bos=True needs a tokenizer with a [BOS] token")
        if p["corpus"]:  # split by file already: each split's own text, cut into chunks
            texts = self.real_corpus().texts
            by_split = {split: tok.encode_ids(texts[split]) for split in ("train", "validation", "test")}
            size = max(block + 1, int(p["chunk"]))
            chunks, assign = [], {}
            for split, split_ids in by_split.items():
                if len(split_ids) // stride > 10 * MAX_EXAMPLES:
                    raise ValueError(f"the corpus's {split} split has {len(split_ids):,} tokens: at most "
                                     f"{10 * MAX_EXAMPLES * stride:,} with stride={stride}: use a larger "
                                     "stride or corpus_chars")
                first = len(chunks)
                chunks += [split_ids[i:i + size] for i in range(0, len(split_ids), size)]
                assign[split] = list(range(first, len(chunks)))
        else:
            ids = tok.encode_ids(text)
            if len(ids) < 3 * (block + 1):
                raise ValueError(f"text too short: {len(ids)} tokens, need at least {3 * (block + 1)} "
                                 f"for three splits of one window of block={block}")
            if len(ids) // stride > 10 * MAX_EXAMPLES:  # windows to look at, before any cap
                raise ValueError(f"the text has {len(ids):,} tokens: {len(ids) // stride:,} windows with "
                                 f"stride={stride}; at most {10 * MAX_EXAMPLES:,}: use a larger stride")
            size = max(block + 1, min(int(p["chunk"]), len(ids) // 10))
            chunks = [ids[i:i + size] for i in range(0, len(ids), size)]
            if len(chunks) > 1 and len(chunks[-1]) <= block:  # too short for a window: merge
                chunks[-2:] = [chunks[-2] + chunks[-1]]
            order = list(range(len(chunks)))
            self.rng("chunks").shuffle(order)
            n_val = max(1, round(p["val_frac"] * len(chunks)))
            n_test = max(1, round(p["test_frac"] * len(chunks)))
            assign = {"validation": order[:n_val], "test": order[n_val:n_val + n_test],
                      "train": order[n_val + n_test:]}
        splits, seen = {}, set()
        caps = {"train": p["n_train"], "validation": p["n_val"], "test": p["n_test"]}
        for split in ("train", "validation", "test"):
            out = []
            for c in sorted(assign[split]):
                chunk = chunks[c]
                for s in range(0, len(chunk) - block, stride):
                    window = tuple(chunk[s:s + block + 1])
                    if window in seen:
                        continue
                    seen.add(window)
                    tokens, targets = list(window[:-1]), list(window[1:])
                    if bos is not None:  # [BOS] w0 .. w_{b-2} -> w0 .. w_{b-1}
                        tokens, targets = [bos] + tokens[:-1], tokens
                    out.append(Example(tokens, targets, text=tok.decode(tokens),
                                       meta={"chunk": c, "start": c * size + s}))
                    if caps[split] is None and len(out) > min(MAX_EXAMPLES, MAX_TOKENS // block):
                        raise ValueError(f"the text gives more than {len(out) - 1:,} {split} windows "
                                         f"of block={block} (stride={stride}): set "
                                         f"n_{split.replace('validation', 'val')} or a larger stride")
            if caps[split] is not None:
                out = out[:int(caps[split])]
            if not out:
                raise ValueError(f"text too short or too repetitive: no {split} window "
                                 f"of block={block} that differs from the other splits")
            splits[split] = out
        return tok, splits

    def evaluate(self, model, split="validation", max_examples=512, batch_size=64):
        return token_evaluate(self, model, split, max_examples, batch_size)
