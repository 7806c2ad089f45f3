"""mlm: masked language modelling (BERT, Devlin et al. 2019) on the grammar corpus, for encoders.

Each example is one distinct sentence w1..wn laid out as  [CLS] w1 .. wn [SEP].
k = max(1, round(mask_prob * n)) of the word positions are chosen; each chosen position becomes
    [MASK] with probability 0.8, a random non-special token with 0.1, unchanged with 0.1.
targets = the original id at chosen positions, -100 elsewhere.
meta: chosen (positions), modes ("mask" | "random" | "keep", aligned with chosen), original ids.
"""
from __future__ import annotations

from ..tokenize import train_tokenizer
from . import grammar
from .base import IGNORE, Example
from .common import GeneratedTask, split_list, token_evaluate, unique_samples


class MLMTask(GeneratedTask):
    name = "mlm"
    archs = ("encoder",)
    metric = "share of chosen (masked/replaced/kept) tokens whose original is predicted"
    defaults = dict(mask_prob=0.15, n_train=8000, n_val=500, n_test=500)
    limits = dict(mask_prob=(0.0, 1.0))

    def _build(self):
        rng = self.rng("sentences")
        sentences = unique_samples(lambda: grammar.sentence(rng)[0], sum(self.sizes()), "sentences")
        tok = train_tokenizer("word", sentences)
        first = max(tok.special_ids) + 1  # random replacements are never special tokens
        mrng = self.rng("masking")
        examples = []
        for text in sentences:
            original = [tok.cls_id] + tok.encode_ids(text) + [tok.sep_id]
            n = len(original) - 2
            k = max(1, round(float(self.params["mask_prob"]) * n))
            chosen = sorted(mrng.sample(range(1, n + 1), k))
            tokens, targets, modes = list(original), [IGNORE] * len(original), []
            for i in chosen:
                u = mrng.random()
                mode = "mask" if u < 0.8 else "random" if u < 0.9 else "keep"
                if mode == "mask":
                    tokens[i] = tok.mask_id
                elif mode == "random":
                    tokens[i] = mrng.randrange(first, tok.vocab_size)
                targets[i] = original[i]
                modes.append(mode)
            examples.append(Example(tokens, targets, text=text,
                                    meta={"chosen": chosen, "modes": modes, "original": original}))
        return tok, split_list(examples, self.sizes())

    def evaluate(self, model, split="validation", max_examples=512, batch_size=64):
        return token_evaluate(self, model, split, max_examples, batch_size)
