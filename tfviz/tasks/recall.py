"""recall: remember one symbol across d filler tokens — a long-range dependency whose distance is a
parameter, for comparing how far RNNs, LSTMs and transformers carry information.

    tokens  = [BOS] f .. f  K  f1 .. fd  [SEP]        targets: -100 everywhere but [SEP] -> K

K is one of ``n_keys`` key symbols (capital letters A, B, ...), the fillers are drawn from
``n_fillers`` other symbols (a, b, ...); the distance d (fillers between K and [SEP]) is drawn
uniformly from ``min_distance`` .. ``max_distance``, and ``min_prefix`` .. ``max_prefix`` fillers
come before K (0 by default: K right after [BOS]), so that distance and length can be told apart.
Only K predicts the answer: chance is 1 / n_keys.

A recurrent model must carry K through d steps of its state; self-attention can read it from the
[SEP] position in one step, whatever d is. ``tfviz.analysis.longrange`` measures accuracy vs d on
fresh sequences (``at_distance``: the same task with one distance and another seed) and the
gradient reaching each position.

meta: key (the symbol), key_index and query_index (positions in ``tokens``), distance.
Splits are distinct sequences (disjoint).
"""
from __future__ import annotations

import string

from ..tokenize import vocab_tokenizer
from .base import IGNORE, Example
from .common import GeneratedTask, split_list, unique_samples

KEYS = string.ascii_uppercase
FILLERS = string.ascii_lowercase


class RecallTask(GeneratedTask):
    name = "recall"
    archs = ("decoder",)
    metric = "share of sequences whose key symbol is predicted at [SEP]"
    defaults = dict(n_keys=8, n_fillers=16, min_distance=1, max_distance=32, min_prefix=0,
                    max_prefix=0, n_train=10000, n_val=500, n_test=500)
    limits = dict(n_keys=(2, len(KEYS)), n_fillers=(1, len(FILLERS)), min_distance=(0, 4096),
                  max_distance=(0, 4096), min_prefix=(0, 4096), max_prefix=(0, 4096))

    def check_params(self, p) -> None:
        if p["min_distance"] > p["max_distance"] or p["min_prefix"] > p["max_prefix"]:
            raise ValueError(f"task {self.name!r}: need min_distance <= max_distance and "
                             "min_prefix <= max_prefix")
        self.check_tokens(p["max_prefix"] + p["max_distance"] + 3)

    def _build(self):
        p = self.params
        n_keys, n_fill = int(p["n_keys"]), int(p["n_fillers"])
        lo, hi = int(p["min_distance"]), int(p["max_distance"])
        pre_lo, pre_hi = int(p["min_prefix"]), int(p["max_prefix"])
        keys, fillers = list(KEYS[:n_keys]), list(FILLERS[:n_fill])
        tok = vocab_tokenizer(keys + fillers)
        key_ids = [tok.token_to_id(k) for k in keys]
        fill_ids = [tok.token_to_id(f) for f in fillers]
        rng = self.rng("sequences")

        def sample():
            prefix = tuple(rng.choice(fill_ids) for _ in range(rng.randint(pre_lo, pre_hi)))
            gap = tuple(rng.choice(fill_ids) for _ in range(rng.randint(lo, hi)))
            return prefix, rng.choice(key_ids), gap

        seqs = unique_samples(sample, sum(self.sizes()), "recall sequences")
        examples = [self._example(tok, *s) for s in seqs]
        return tok, split_list(examples, self.sizes())

    def _example(self, tok, prefix: tuple, key: int, gap: tuple) -> Example:
        tokens = [tok.bos_id, *prefix, key, *gap, tok.sep_id]
        targets = [IGNORE] * (len(tokens) - 1) + [key]
        key_index = 1 + len(prefix)
        return Example(tokens, targets, text=" ".join(tok.tokens_of(tokens)),
                       meta={"key": tok.id_to_token(key), "key_index": key_index,
                             "query_index": len(tokens) - 1, "distance": len(gap)})

    def at_distance(self, distance: int, seed: int, n: int = 256) -> "RecallTask":
        """The same task (symbols, prefix) with every example at ``distance`` fillers, drawn with
        another ``seed``: fresh sequences for measuring accuracy at one distance (its test split
        holds ``n`` examples, or every possible sequence but the two its one-example train and
        validation splits take where there are fewer)."""
        p = self.params
        f = int(p["n_fillers"])
        possible = int(p["n_keys"]) * f ** distance * sum(
            f ** k for k in range(int(p["min_prefix"]), int(p["max_prefix"]) + 1))
        if possible < 3:
            raise ValueError(f"only {possible} recall sequences have distance {distance}: too few to measure")
        return RecallTask(seed, **{**p, "min_distance": distance, "max_distance": distance,
                                   "n_train": 1, "n_val": 1, "n_test": min(n, possible - 2)})
