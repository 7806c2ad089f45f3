"""coref: "what does *it* refer to?" — pronoun resolution decided by meaning, not position.

Nouns come in categories; each category has predicates ("buggy") and parts ("its interface")
that fit it alone. A sentence names two nouns of different categories, then a pronoun (it / its)
followed by a predicate or part that fits exactly one of them: that noun is the referent. The
referent is the first or the second noun with probability 1/2 in every template.

Layout (word-level tokenizer, lowercased; offsets still index the original text):
    decoder: tokens = [BOS] w1 .. wn [SEP] <pronoun>     targets: -100 .. -100, <referent noun>
    encoder: tokens = [CLS] w1 .. wn [SEP] [MASK]        targets: -100 .. -100, <referent noun>
The repeated pronoun (decoder) sees the whole sentence, including the predicate that follows the
in-sentence pronoun, so its attention can land on the referent.
meta (indices into ``tokens``): pronoun_index, query_index, candidate_indices [i1, i2] (the last
mention of each noun before the pronoun), candidate_mentions, referent (0 | 1), referent_token,
attribute (the deciding predicate / part) and attribute_index (its position after the pronoun;
None in the mission sentences), category, template.

The test split uses (referent noun, attribute) pairs never used in train/validation: a seeded
Latin-square quarter of each category's pairs, so every noun and attribute is still seen in training.
"""
from __future__ import annotations

from ..tokenize import train_tokenizer
from .base import IGNORE, Example
from .common import GeneratedTask, split_list, unique_samples

CATEGORIES = {
    "rule": (["law", "rule", "policy", "contract", "treaty", "regulation"],
             ["unfair", "strict", "vague", "unconstitutional"],
             ["application", "wording", "enforcement"]),
    "software": (["application", "program", "website", "browser", "database", "spreadsheet"],
                 ["buggy", "laggy", "unresponsive", "unpatched"],
                 ["interface", "installer", "settings"]),
    "animal": (["dog", "cat", "horse", "rabbit", "parrot", "goat"],
               ["hungry", "furry", "sleepy", "thirsty"],
               ["tail", "fur", "paws"]),
    "food": (["soup", "bread", "cake", "pizza", "salad", "curry"],
             ["spicy", "salty", "stale", "crunchy"],
             ["recipe", "crust", "flavour"]),
    "vehicle": (["car", "truck", "bus", "bicycle", "tractor", "boat"],
                ["rusty", "dented", "unroadworthy", "leaky"],
                ["engine", "tyres", "brakes"]),
}  # category -> (nouns, predicates, parts)
GENERIC = ["better", "improved", "checked", "new", "different"]  # fills {Q}: fits anything

# {A} {B}: candidate nouns; {it} / {its}: the pronoun; {P}: a predicate; {X}: a part.
TEMPLATES = [
    "the {A} and the {B} keep changing , making it difficult to reason about the {A} or the {B} "
    "because {it} is too {P} .",
    "we could not use the {A} or the {B} because {it} was too {P} .",
    "nobody talked about the {A} near the {B} , because {it} was so {P} .",
    "after the {A} was put next to the {B} , {it} became {P} .",
    "the {A} is next to the {B} , and {it} is {P} .",
    "the {A} and the {B} will never be perfect , but {its} {X} should be {Q} .",
    "i looked at the {A} and the {B} , and {its} {X} was {Q} .",
]

MISSION = [
    "The law will never be perfect, but its application should be just.",
    "... The law and the application keep changing, making it difficult to reason about the law "
    "or the application because it is too complex.",
]


def detokenize(words: list[str]) -> str:
    return " ".join(words).replace(" ,", ",").replace(" .", ".")


def held_out(rng) -> set[tuple[str, str]]:
    """(noun, attribute) pairs reserved for the test split."""
    out = set()
    for nouns, preds, parts in CATEGORIES.values():
        ns, attrs = list(nouns), list(preds) + list(parts)
        rng.shuffle(ns)
        rng.shuffle(attrs)
        out |= {(n, a) for i, n in enumerate(ns) for j, a in enumerate(attrs) if (i + j) % 4 == 0}
    return out


class CorefTask(GeneratedTask):
    name = "coref"
    archs = ("decoder", "encoder")
    metric = "share of sentences whose referent noun is predicted at the query position"
    defaults = dict(arch="decoder", n_train=6000, n_val=500, n_test=500)

    def _sampler(self, rng, pairs: list[tuple[str, str, str]]):
        """A function drawing (template index, words, pronoun word index, referent, category,
        attribute) with the referent noun and attribute taken from ``pairs``."""
        def sample():
            cat, noun, attr = rng.choice(pairs)
            is_part = attr in CATEGORIES[cat][2]
            template = rng.choice([t for t in TEMPLATES if ("{X}" in t) == is_part])
            others = [n for c, (ns, _, _) in CATEGORIES.items() if c != cat for n in ns if n != attr]
            distractor = rng.choice(others)
            referent = rng.randrange(2)
            a, b = (noun, distractor) if referent == 0 else (distractor, noun)
            fill = {"{A}": a, "{B}": b, "{P}": attr, "{X}": attr, "{it}": "it", "{its}": "its",
                    "{Q}": rng.choice(GENERIC)}
            slots = template.split()
            words = [fill.get(s, s) for s in slots]
            return (TEMPLATES.index(template), tuple(words),
                    next(i for i, s in enumerate(slots) if s in ("{it}", "{its}")),
                    referent, cat, attr)
        return sample

    def _build(self):
        held = held_out(self.rng("held-out"))
        pairs = [(c, n, a) for c, (ns, ps, xs) in CATEGORIES.items() for n in ns for a in ps + xs]
        seen_pairs = [p for p in pairs if p[1:] not in held]
        test_pairs = [p for p in pairs if p[1:] in held]
        n_train, n_val, n_test = self.sizes()
        trainval = unique_samples(self._sampler(self.rng("trainval"), seen_pairs),
                                  n_train + n_val, "coref sentences")
        test = unique_samples(self._sampler(self.rng("test"), test_pairs), n_test, "coref sentences")
        vocab = sorted({w for ns, ps, xs in CATEGORIES.values() for w in ns + ps + xs}
                       | {w for t in TEMPLATES for w in t.split() if "{" not in w}
                       | set(GENERIC) | {"it", "its"})
        texts = [detokenize(s[1]) for s in trainval + test] + MISSION + [" ".join(vocab)]
        tok = train_tokenizer("word", texts, lowercase=True)
        examples = [self._example(tok, *s) for s in trainval + test]
        splits = split_list(examples, (n_train, n_val, n_test))
        return tok, splits

    def _layout(self, tok, ids: list[int], pronoun: int) -> tuple[list[int], int]:
        """Wrap sentence ids; return tokens and the query index (the last position)."""
        if self.arch == "decoder":
            tokens = [tok.bos_id] + ids + [tok.sep_id, ids[pronoun]]
        else:
            tokens = [tok.cls_id] + ids + [tok.sep_id, tok.mask_id]
        return tokens, len(tokens) - 1

    def _example(self, tok, template, words, pronoun, referent, category, attribute) -> Example:
        text = detokenize(list(words))
        ids = tok.encode_ids(text)
        assert len(ids) == len(words), (text, tok.tokens_of(ids))
        first = [w for i, w in enumerate(words[:pronoun]) if i and words[i - 1] == "the"]
        order = tuple(dict.fromkeys(first))  # the two nouns, by first mention
        # the deciding word: the predicate or part after the pronoun ("too laggy", "its crust")
        at = 1 + next(i for i in range(pronoun + 1, len(words)) if words[i] == attribute)
        return self._make(tok, text, ids, list(words), pronoun, referent, order,
                          {"attribute": attribute, "attribute_index": at, "category": category,
                           "template": template})

    def _make(self, tok, text, ids, words, pronoun, referent, order, extra) -> Example:
        """Lay out one sentence; ``words`` are its tokens, ``order`` its two candidate nouns."""
        mentions = [[1 + i for i, w in enumerate(words) if w == noun] for noun in order]
        # the last mention before the pronoun, else (mission sentence 1) the first one after it
        cands = [max([m for m in ms if m < 1 + pronoun], default=ms[0]) for ms in mentions]
        tokens, query = self._layout(tok, ids, pronoun)
        targets = [IGNORE] * len(tokens)
        meta = {"pronoun_index": 1 + pronoun, "query_index": query, "candidate_indices": cands,
                "candidate_mentions": mentions, "referent": referent,
                "referent_token": None if referent is None else order[referent], **extra}
        if referent is not None:
            targets[query] = tok.token_to_id(order[referent])
        return Example(tokens, targets, text=text, meta=meta)

    def fresh_examples(self, n: int, seed: int = 0) -> list[Example]:
        """``n`` new sentences in this task's vocabulary and templates, none of them in any split
        (any noun-attribute pair; seeded: the same ``seed`` gives the same sentences). For
        re-measuring a claim on inputs the model and the card never saw."""
        tok = self.tokenizer
        known = {tuple(e.tokens) for split in ("train", "validation", "test") for e in self.examples(split)}
        pairs = [(c, nn, a) for c, (ns, ps, xs) in CATEGORIES.items() for nn in ns for a in ps + xs]
        sample = self._sampler(self.rng(f"fresh:{seed}"), pairs)
        out, seen, tries = [], set(), 0
        while len(out) < n:
            tries += 1
            if tries > 100 * n + 1000:
                raise ValueError(f"could not draw {n} new coref sentences")
            s = sample()
            if s[1] in seen:
                continue
            seen.add(s[1])
            ex = self._example(tok, *s)
            if tuple(ex.tokens) not in known:
                out.append(ex)
        return out

    def counterfactual(self, example: Example) -> tuple[list[int], str] | None:
        """``example``'s tokens with the deciding word (predicate or part) replaced by one that
        fits the *other* noun, so the referent flips while every other token stays -> (tokens,
        the new word), or None when the example has no deciding word. For activation patching."""
        meta = example.meta
        at, ref = meta.get("attribute_index"), meta.get("referent")
        if at is None or ref is None:
            return None
        other = example.tokens[meta["candidate_indices"][1 - ref]]
        word = self.tokenizer.tokens_of([other])[0]
        cat = next(c for c, (ns, _, _) in CATEGORIES.items() if word in ns)
        is_part = meta["attribute"] in CATEGORIES[meta["category"]][2]
        choices = CATEGORIES[cat][2 if is_part else 1]
        new = choices[sum(example.tokens) % len(choices)]  # deterministic, varies by sentence
        tokens = list(example.tokens)
        tokens[at] = self.tokenizer.token_to_id(new)
        return tokens, new

    def mission_sentences(self) -> list[Example]:
        """The two motivating sentences in this task's format. Sentence 1: "its" -> law
        (referent 0). Sentence 2: the final "it" is ambiguous (referent None, no target)."""
        tok = self.tokenizer
        out = []
        for text, referent in zip(MISSION, (0, None)):
            enc = tok.encode(text)
            words = enc.tokens  # lowercased surface forms
            pronoun = max(i for i, w in enumerate(words) if w in ("it", "its"))
            out.append(self._make(tok, text, enc.ids, words, pronoun, referent,
                                  ("law", "application"),
                                  {"attribute": None, "attribute_index": None, "category": None,
                                   "template": None}))
        return out
