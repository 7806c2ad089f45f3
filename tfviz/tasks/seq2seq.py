"""copy, reverse, sort: sequence-to-sequence over number symbols "0" .. "n_symbols-1".

A source is n random symbols (min_len <= n <= max_len); the target is
    copy:    s1 .. sn
    reverse: sn .. s1
    sort:    the symbols in ascending numeric order (duplicates kept)
Layouts (``arch``) are those of ``common.seq2seq_example``:
    encoder-decoder: src = s, tokens = [BOS] t, targets = t [EOS]
    decoder:         tokens = [BOS] s [SEP] t, targets on t [EOS] only.
Examples are distinct sources, so the three splits are disjoint.
"""
from __future__ import annotations

from ..tokenize import vocab_tokenizer
from .common import GeneratedTask, seq2seq_example, split_list, unique_samples


class _SymbolSeq2Seq(GeneratedTask):
    archs = ("encoder-decoder", "decoder")
    metric = "share of examples whose whole output (every symbol and the final [EOS]) is right"
    defaults = dict(arch="encoder-decoder", n_symbols=10, min_len=3, max_len=8,
                    n_train=5000, n_val=500, n_test=500)
    limits = dict(n_symbols=(2, 1000), min_len=(1, 512), max_len=(1, 512))

    def check_params(self, p):
        if p["min_len"] > p["max_len"]:
            raise ValueError("need 1 <= min_len <= max_len and n_symbols >= 2")
        self.check_tokens(2 * p["max_len"] + 2)

    @staticmethod
    def transform(seq: list[int]) -> list[int]:
        raise NotImplementedError

    def _build(self):
        p = self.params
        n_sym, lo, hi = int(p["n_symbols"]), int(p["min_len"]), int(p["max_len"])
        if not (1 <= lo <= hi) or n_sym < 2:
            raise ValueError("need 1 <= min_len <= max_len and n_symbols >= 2")
        tok = vocab_tokenizer([str(i) for i in range(n_sym)])
        ids = [tok.token_to_id(str(i)) for i in range(n_sym)]
        rng = self.rng("sequences")

        def sample():
            return tuple(rng.randrange(n_sym) for _ in range(rng.randint(lo, hi)))

        seqs = unique_samples(sample, sum(self.sizes()), "sources")
        examples = []
        for seq in seqs:
            out = self.transform(list(seq))
            src_text, tgt_text = " ".join(map(str, seq)), " ".join(map(str, out))
            examples.append(seq2seq_example(
                tok, [ids[s] for s in seq], [ids[s] for s in out], self.arch, text=src_text,
                meta={"source": src_text, "target": tgt_text}))
        return tok, split_list(examples, self.sizes())


class CopyTask(_SymbolSeq2Seq):
    """Output the source unchanged (attention: diagonal)."""
    name = "copy"
    transform = staticmethod(lambda seq: list(seq))


class ReverseTask(_SymbolSeq2Seq):
    """Output the source reversed (attention: anti-diagonal)."""
    name = "reverse"
    transform = staticmethod(lambda seq: list(reversed(seq)))


class SortTask(_SymbolSeq2Seq):
    """Output the source sorted ascending (attention: to the next-larger symbol)."""
    name = "sort"
    transform = staticmethod(lambda seq: sorted(seq))
