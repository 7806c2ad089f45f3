"""agreement: "which noun does *it* / *they* mean?" — decided only by the pronoun's link to its noun.

The coref task's two nouns are of different kinds, so the predicate alone says which is meant
("it is too laggy": the program, not the law) and a model may choose without looking from the
pronoun to the noun at all. Here both candidates are of the same kind (two rules, two animals,
...) and every predicate fits both; one noun is singular, the other plural, and the pronoun's
number (it / its vs they / their) is the only clue. No word but the pronoun says which noun is
meant, and only attention from the pronoun to a noun can bring that noun's identity to the
answer.

Sentences are built from three parts — a clause naming the two nouns, a filler of 0-7 words
(the distance varies), a clause with the pronoun — and a frame is one (clause, filler, clause)
triple. The singular noun is first or second with probability 1/2, and so is the referent.

Layout (word-level tokenizer, lowercased), as the coref task's decoder layout:
    tokens = [BOS] w1 .. wn [SEP] <pronoun>      targets: -100 .. -100, <referent, singular form>
The answer is the referent's dictionary (singular) form — "rule" for "the rules" — so the answer
itself carries no number: a model that only knows "their" is plural cannot prefer one candidate
(with the surface form as the answer, the pronoun's own embedding favours the noun of its number
and the choice between the two needs no attention at all: measured, every head off still chose
right in 100% of sentences).
meta (indices into ``tokens``): pronoun_index, query_index, candidate_indices [i1, i2] (the two
nouns in sentence order), candidate_mentions, answers (each candidate's singular form) and
answer_ids (their token ids: what the model should say for each), referent (0 | 1),
referent_token (the answer), number
("singular" | "plural": the pronoun's), category, frame (clause, filler, clause indices),
pair (singular lemma, plural lemma), attribute / attribute_index (None: no word but the pronoun
decides).

Held out: the test split uses only frames and noun pairs never used in train / validation (a
seeded Latin-square share of each; every clause, filler, noun and number is still seen in
training), so the test measures the rule on new word sequences, distances and pairs.
``fresh_examples`` draws sentences in none of the splits (any frame, any pair) for re-measuring
a claim on inputs no card saw.
"""
from __future__ import annotations

from ..tokenize import train_tokenizer
from .base import IGNORE, Example
from .common import GeneratedTask, split_list, token_evaluate, unique_samples

# category -> (nouns as (singular, plural), predicates, parts): every predicate and part fits
# every noun of its category, in either number
CATEGORIES = {
    "rule": ([("law", "laws"), ("rule", "rules"), ("policy", "policies"), ("contract", "contracts"),
              ("treaty", "treaties"), ("regulation", "regulations")],
             ["unfair", "strict", "vague", "outdated"], ["application", "wording", "enforcement"]),
    "software": ([("program", "programs"), ("website", "websites"), ("browser", "browsers"),
                  ("database", "databases"), ("spreadsheet", "spreadsheets"), ("game", "games")],
                 ["buggy", "laggy", "unresponsive", "unpatched"], ["interface", "installer", "settings"]),
    "animal": ([("dog", "dogs"), ("cat", "cats"), ("horse", "horses"), ("rabbit", "rabbits"),
                ("parrot", "parrots"), ("goat", "goats")],
               ["hungry", "furry", "sleepy", "thirsty"], ["tail", "fur", "owner"]),
    "food": ([("soup", "soups"), ("bread", "breads"), ("cake", "cakes"), ("pizza", "pizzas"),
              ("salad", "salads"), ("curry", "curries")],
             ["spicy", "salty", "stale", "crunchy"], ["recipe", "crust", "flavour"]),
    "vehicle": ([("car", "cars"), ("truck", "trucks"), ("bus", "buses"), ("bicycle", "bicycles"),
                 ("tractor", "tractors"), ("boat", "boats")],
                ["rusty", "dented", "leaky", "noisy"], ["engine", "tyres", "brakes"]),
}
GENERIC = ["just", "fair", "better", "improved", "checked", "different"]  # {Q}: fits anything

# No verb agrees with a noun or the pronoun ("will", "could", "seemed", "became": the same for
# it and they), so the pronoun is the only word that carries number.
NOUN_CLAUSES = [
    "the {A} and the {B} will never be perfect",
    "we could not use the {A} or the {B}",
    "nobody talked about the {A} near the {B}",
    "we put the {A} next to the {B}",
    "the {A} and the {B} kept changing",
    "everyone compared the {A} with the {B}",
]
FILLERS = ["", "last week ,", "as far as anyone could tell ,",
           "after a long and careful discussion at the meeting ,"]
PRONOUN_CLAUSES = [
    "but {its} {X} should be {Q}",
    "because {it} seemed too {P}",
    "and {it} became {P}",
    "so {its} {X} will be {Q}",
    "although {it} looked {P}",
]
PRONOUNS = {"singular": {"it": "it", "its": "its"}, "plural": {"it": "they", "its": "their"}}
FLIP = {"it": "they", "they": "it", "its": "their", "their": "its"}
LEMMA = {w: pair[0] for ns, _, _ in CATEGORIES.values() for pair in ns for w in pair}

MISSION = [
    "The law and the rules will never be perfect, but its application should be just.",
    "The law and the rules will never be perfect, but their application should be just.",
]


def detokenize(words: list[str]) -> str:
    return " ".join(words).replace(" ,", ",").replace(" .", ".")


def frame_words(frame: tuple[int, int, int]) -> list[str]:
    """The slots of one frame: its noun clause, ", ", filler, pronoun clause, "."."""
    n, f, p = frame
    return (NOUN_CLAUSES[n].split() + [","] + FILLERS[f].split() + PRONOUN_CLAUSES[p].split()
            + ["."])


def frames() -> list[tuple[int, int, int]]:
    return [(n, f, p) for n in range(len(NOUN_CLAUSES)) for f in range(len(FILLERS))
            for p in range(len(PRONOUN_CLAUSES))]


def pairs() -> list[tuple[str, int, int]]:
    """(category, singular noun index, plural noun index) of two different nouns of one kind."""
    return [(c, i, j) for c, (ns, _, _) in CATEGORIES.items() for i in range(len(ns))
            for j in range(len(ns)) if i != j]


def held_out(rng) -> tuple[set, set]:
    """(frames, noun pairs) reserved for the test split: a Latin-square quarter of the frames
    and a fifth of each category's pairs, seeded."""
    perm = [list(range(k)) for k in (len(NOUN_CLAUSES), len(FILLERS), len(PRONOUN_CLAUSES))]
    for p in perm:
        rng.shuffle(p)
    held_frames = {(n, f, p) for n, f, p in frames()
                   if (perm[0][n] + perm[1][f] + perm[2][p]) % 4 == 0}
    held_pairs = set()
    for c, (ns, _, _) in CATEGORIES.items():
        order = list(range(len(ns)))
        rng.shuffle(order)
        held_pairs |= {(c, i, j) for i in range(len(ns)) for j in range(len(ns))
                       if i != j and (order[i] + 2 * order[j]) % 5 == 0}
    return held_frames, held_pairs


class AgreementTask(GeneratedTask):
    name = "agreement"
    archs = ("decoder",)
    metric = "share of sentences whose referent noun is predicted at the query position"
    defaults = dict(loss_on="answer", n_train=6000, n_val=500, n_test=500)
    choices = dict(loss_on=("answer", "all"))

    def _sampler(self, rng, frame_pool, pair_pool):
        """A function drawing one sentence's (frame, category, pair, singular first?, number,
        predicate or part, Q) — hashable, so ``unique_samples`` can keep them distinct."""
        def sample():
            frame = rng.choice(frame_pool)
            cat, i, j = rng.choice(pair_pool)
            _, preds, parts = CATEGORIES[cat]
            clause = PRONOUN_CLAUSES[frame[2]]
            word = rng.choice(parts if "{X}" in clause else preds)
            first, number, q = rng.random() < 0.5, rng.choice(("singular", "plural")), rng.choice(GENERIC)
            # every field shows in the sentence (no Q slot: None), so distinct draws are distinct sentences
            return frame, cat, i, j, first, number, word, q if "{Q}" in clause else None
        return sample

    def _words(self, frame, cat, i, j, singular_first, number, word, q) -> tuple[list[str], int, int]:
        """-> (words, pronoun word index, referent 0 | 1 in sentence order)."""
        nouns = CATEGORIES[cat][0]
        sing, plur = nouns[i][0], nouns[j][1]
        a, b = (sing, plur) if singular_first else (plur, sing)
        fill = {"{A}": a, "{B}": b, "{X}": word, "{P}": word, "{Q}": q,
                "{it}": PRONOUNS[number]["it"], "{its}": PRONOUNS[number]["its"]}
        slots = frame_words(frame)
        words = [fill.get(s, s) for s in slots]
        pronoun = next(k for k, s in enumerate(slots) if s in ("{it}", "{its}"))
        referent = 0 if (number == "singular") == singular_first else 1
        return words, pronoun, referent

    def _build(self):
        held_frames, held_pairs = held_out(self.rng("held-out"))
        seen = ([f for f in frames() if f not in held_frames], [p for p in pairs() if p not in held_pairs])
        test = (sorted(held_frames), sorted(held_pairs))
        n_train, n_val, n_test = self.sizes()
        trainval = unique_samples(self._sampler(self.rng("trainval"), *seen), n_train + n_val,
                                  "agreement sentences")
        tests = unique_samples(self._sampler(self.rng("test"), *test), n_test, "agreement sentences")
        tok = train_tokenizer("word", [" ".join(vocabulary())] + MISSION, lowercase=True)
        examples = [self._example(tok, s) for s in trainval + tests]
        return tok, split_list(examples, (n_train, n_val, n_test))

    def _example(self, tok, s) -> Example:
        frame, cat, i, j, _, number, word, _ = s
        words, pronoun, referent = self._words(*s)
        nouns = CATEGORIES[cat][0]
        return self._make(tok, detokenize(words), words, pronoun, referent,
                          {"number": number, "category": cat, "frame": list(frame),
                           "pair": [nouns[i][0], nouns[j][1]], "attribute": None,
                           "attribute_index": None, "word": word})

    def _make(self, tok, text, words, pronoun, referent, extra) -> Example:
        ids = tok.encode_ids(text)
        assert len(ids) == len(words), (text, tok.tokens_of(ids))
        nouns = [k for k, w in enumerate(words[:pronoun]) if k and words[k - 1] == "the"]
        cands = [1 + k for k in nouns[:2]]
        tokens = [tok.bos_id] + ids + [tok.sep_id, ids[pronoun]]
        query = len(tokens) - 1
        targets = [IGNORE] * len(tokens)
        if self.params["loss_on"] == "all":  # every next word of the sentence too (a language model's loss)
            targets[:len(ids)] = ids
        answers = [LEMMA[words[k]] for k in nouns[:2]]
        answer_ids = [tok.token_to_id(a) for a in answers]
        targets[query] = answer_ids[referent]
        meta = {"pronoun_index": 1 + pronoun, "query_index": query, "candidate_indices": cands,
                "candidate_mentions": [[c] for c in cands], "answers": answers,
                "answer_ids": answer_ids, "referent": referent,
                "referent_token": answers[referent], **extra}
        return Example(tokens, targets, text=text, meta=meta)

    def evaluate(self, model, split="validation", max_examples=512, batch_size=64):
        """Loss and accuracy at the answer (the referent at the query position); with
        ``loss_on="all"`` also over every token ("loss_all")."""
        out = token_evaluate(self, model, split, max_examples, batch_size,
                             {"answer": lambda ex: [ex.meta["query_index"]]})
        return {"loss": out["loss_answer"], "accuracy": out["accuracy_answer"],
                **({"loss_all": out["loss"]} if self.params["loss_on"] == "all" else {})}

    def fresh_examples(self, n: int, seed: int = 0) -> list[Example]:
        """``n`` new sentences (any frame, any pair) in none of the splits, seeded: the same
        ``seed`` gives the same sentences. For re-measuring a claim on inputs never seen."""
        tok = self.tokenizer
        known = {tuple(e.tokens) for split in ("train", "validation", "test") for e in self.examples(split)}
        sample = self._sampler(self.rng(f"fresh:{seed}"), frames(), pairs())
        out, seen, tries = [], set(), 0
        while len(out) < n:
            tries += 1
            if tries > 100 * n + 1000:
                raise ValueError(f"could not draw {n} new agreement sentences")
            s = sample()
            if s in seen:
                continue
            seen.add(s)
            ex = self._example(tok, s)
            if tuple(ex.tokens) not in known:
                out.append(ex)
        return out

    def counterfactual(self, example: Example) -> tuple[list[int], str] | None:
        """``example`` with the other noun meant: both pronouns (in the sentence and the repeated
        one at the end) of the other number, every other token the same -> (tokens, the new
        pronoun); None for an example without a pronoun index. For activation patching."""
        meta = example.meta
        if meta.get("pronoun_index") is None or meta.get("referent") is None:
            return None
        tok = self.tokenizer
        old = tok.tokens_of([example.tokens[meta["pronoun_index"]]])[0]
        if old not in FLIP:
            return None
        new = tok.token_to_id(FLIP[old])
        tokens = list(example.tokens)
        for k in (meta["pronoun_index"], meta["query_index"]):
            tokens[k] = new
        return tokens, FLIP[old]

    def flipped(self, example: Example) -> Example:
        """``counterfactual`` as an Example: the other noun meant (its referent and target)."""
        tokens, word = self.counterfactual(example)
        meta = dict(example.meta, referent=1 - example.meta["referent"],
                    number="plural" if example.meta.get("number") == "singular" else "singular")
        meta["referent_token"] = meta["answers"][meta["referent"]]
        targets = [IGNORE] * len(tokens)
        targets[meta["query_index"]] = meta["answer_ids"][meta["referent"]]
        words = example.text.split(" ")
        text = " ".join(FLIP.get(w, w) if w in FLIP else w for w in words)
        return Example(tokens, targets, text=text, meta=meta)

    def mission_sentences(self) -> list[Example]:
        """The lecture's sentence with a second noun of the same kind: "The law and the rules
        will never be perfect, but its application should be just." (its -> law, referent 0)
        and the same with "their" (-> rule, the rules: referent 1)."""
        tok = self.tokenizer
        out = []
        for text, referent, number in zip(MISSION, (0, 1), ("singular", "plural")):
            words = tok.encode(text).tokens
            pronoun = next(k for k, w in enumerate(words) if w in FLIP)
            out.append(self._make(tok, text, words, pronoun, referent,
                                  {"number": number, "category": "rule", "frame": [0, 0, 0],
                                   "pair": ["law", "rules"], "attribute": None,
                                   "attribute_index": None, "word": "application"}))
        return out


def vocabulary() -> list[str]:
    """Every word a sentence of this task can hold."""
    words = {w for ns, ps, xs in CATEGORIES.values() for pair in ns for w in pair} | {
        w for ps_xs in CATEGORIES.values() for w in ps_xs[1] + ps_xs[2]}
    words |= {w for t in NOUN_CLAUSES + FILLERS + PRONOUN_CLAUSES for w in t.split() if "{" not in w}
    words |= set(GENERIC) | set(FLIP) | {",", "."}
    return sorted(words)
