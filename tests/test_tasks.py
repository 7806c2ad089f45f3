"""Generated tasks: disjoint deterministic splits, labels checked independently of the generators,
layouts and padding, spec round-trip."""
import json
import random
from collections import Counter

import pytest
import torch

from tfviz.tasks import IGNORE, TASKS, collate, grammar, make_task

from stand_ins import InductionOracle

SMALL = {"lm": {"n_sentences": 3000}, "coref": {"n_train": 1500, "n_val": 200, "n_test": 200},
         "mlm": {"n_train": 1500, "n_val": 200, "n_test": 200}}
SPLITS = ("train", "validation", "test")


def small(name, **kw):
    return make_task(name, **{**SMALL.get(name, {"n_train": 800, "n_val": 150, "n_test": 150}), **kw})


def tiny(name, **kw):
    sizes = {"n_sentences": 1500} if name == "lm" else {"n_train": 300, "n_val": 60, "n_test": 60}
    return make_task(name, **sizes, **kw)


@pytest.fixture(scope="module")
def tasks():
    return {name: small(name) for name in TASKS}


def key(ex):
    """Identity of an example: input, source and labels (two MLM sentences may mask alike)."""
    return tuple(ex.tokens), tuple(ex.targets), tuple(ex.src or ())


def words(tok, ids):
    return [tok.id_to_token(i) for i in ids]


def test_defaults_just_work():
    task = make_task("copy")
    assert task.arch == "encoder-decoder" and len(task.examples("train")) == 5000
    assert set(TASKS) == {"lm", "coref", "induction", "copy", "reverse", "sort", "translate", "mlm",
                          "recall", "agreement"}
    for cls in TASKS.values():
        assert cls.archs and cls.metric and cls.name


def test_bad_specs_rejected():
    with pytest.raises(ValueError, match="unknown task"):
        make_task("telepathy")
    with pytest.raises(ValueError, match="unknown params"):
        make_task("copy", n_trian=5)
    with pytest.raises(ValueError, match="archs"):
        make_task("induction", arch="encoder-decoder")
    with pytest.raises(ValueError, match="split"):
        make_task("copy").examples("dev")
    with pytest.raises(ValueError, match="distinct"):
        make_task("copy", n_symbols=2, min_len=1, max_len=2, n_train=100).examples("train")
    with pytest.raises(ValueError, match="too short"):
        make_task("lm", text="a tiny text").examples("train")


@pytest.mark.parametrize("name", sorted(TASKS))
def test_splits_disjoint_nonempty_and_well_formed(tasks, name):
    task = tasks[name]
    seen = {}
    for split in SPLITS:
        exs = task.examples(split)
        assert exs, split
        for ex in exs:
            assert seen.setdefault(key(ex), split) == split, "same example in two splits"
            assert len(ex.tokens) == len(ex.targets)
            assert all(0 <= t < task.tokenizer.vocab_size for t in ex.tokens + (ex.src or []))
            assert all(t == IGNORE or 0 <= t < task.tokenizer.vocab_size for t in ex.targets)
            assert any(t != IGNORE for t in ex.targets)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_deterministic_and_spec_roundtrip(name):
    a, b, c = tiny(name, seed=1), tiny(name, seed=1), tiny(name, seed=2)
    spec = json.loads(json.dumps(a.spec()))  # JSON-able
    d = make_task(spec)
    for split in SPLITS:
        ea, eb, ed = a.examples(split), b.examples(split), d.examples(split)
        assert ea == eb == ed
    assert [key(e) for e in a.examples("train")] != [key(e) for e in c.examples("train")]
    assert a.tokenizer.to_json() == d.tokenizer.to_json()


@pytest.mark.parametrize("name", sorted(TASKS))
def test_collate_padding_and_shapes(tasks, name):
    task = tasks[name]
    exs = task.examples("train")[:16]
    batch = collate(exs, task.tokenizer.pad_id)
    width = max(len(e.tokens) for e in exs)
    assert batch.tokens.shape == batch.targets.shape == (16, width)
    assert batch.tokens.dtype == torch.long
    for row, ex in enumerate(exs):
        n = len(ex.tokens)
        assert batch.tokens[row, :n].tolist() == ex.tokens
        assert (batch.tokens[row, n:] == 0).all() and (batch.targets[row, n:] == IGNORE).all()
    if task.arch == "encoder-decoder":
        assert batch.src.shape == (16, max(len(e.src) for e in exs))
        assert len(batch.inputs) == 2
    else:
        assert batch.src is None and len(batch.inputs) == 1
    b2 = task.batch("train", 8, torch.Generator().manual_seed(0))
    assert b2.tokens.shape[0] == 8 and b2.tokens.ndim == 2


def _src_tgt(task, ex):
    """(source symbols, target symbols) read back from either layout."""
    tok = task.tokenizer
    if ex.src is not None:
        assert ex.tokens[0] == tok.bos_id and ex.targets[-1] == tok.eos_id
        assert ex.tokens[1:] == ex.targets[:-1]  # teacher forcing: input = output shifted
        return words(tok, ex.src), words(tok, ex.targets[:-1])
    sep = ex.tokens.index(tok.sep_id)
    assert ex.tokens[0] == tok.bos_id
    assert all(t == IGNORE for t in ex.targets[:sep])  # no loss on the source
    assert ex.targets[sep:] == ex.tokens[sep + 1:] + [tok.eos_id]
    return words(tok, ex.tokens[1:sep]), words(tok, ex.tokens[sep + 1:])


@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder"])
def test_copy_reverse_sort_labels(arch):
    for name, rule in [("copy", list), ("reverse", lambda s: s[::-1]),
                       ("sort", lambda s: sorted(s, key=int))]:
        task = small(name, arch=arch, max_len=10)
        for ex in task.examples("train")[:300] + task.examples("test")[:100]:
            src, tgt = _src_tgt(task, ex)
            assert 3 <= len(src) <= 10 and tgt == rule(src)
            assert ex.text == " ".join(src)


def test_induction_labels():
    task = small("induction")
    tok = task.tokenizer
    for ex in task.examples("train")[:200]:
        n = ex.meta["half"]
        assert len(ex.tokens) == 2 * n + 1 and ex.tokens[0] == tok.bos_id
        assert ex.tokens[1:n + 1] == ex.tokens[n + 1:]
        assert ex.targets == ex.tokens[1:] + [IGNORE]
        assert len(set(ex.tokens[1:n + 1])) == n  # distinct within a half
    assert tok.vocab_size - 7 == 50
    ex = small("induction", loss_on="repeat").examples("train")[0]
    n = ex.meta["half"]
    kept = [i for i, t in enumerate(ex.targets) if t != IGNORE]
    assert kept == list(range(n + 1, 2 * n)) == ex.meta["repeat"]
    assert ex.meta["new"] == list(range(0, n))
    assert all(ex.targets[i] == ex.tokens[i - n + 1] for i in kept)  # copy from the first half


def test_induction_segments_layout():
    """Random filler with random segments recurring at random offsets: checked against the
    parameters by scanning the tokens, independently of the generator."""
    task = small("induction", layout="segments", n_symbols=128, length=48, min_length=12,
                 segment=8, min_segment=2, repeats=3, min_repeats=2, segments=2)
    tok = task.tokenizer
    lengths, distances, starts = set(), set(), set()
    for ex in task.examples("train")[:300]:
        body = ex.tokens[1:]
        assert ex.tokens[0] == tok.bos_id and 12 <= len(body) <= 48
        assert ex.targets == ex.tokens[1:] + [IGNORE]
        lengths.add(len(body))
        counts = Counter(body)
        repeated = {t for t, c in counts.items() if c > 1}
        assert repeated and max(counts.values()) <= 3  # every token drawn once, then recurs 2-3x
        # each repeated token's occurrences sit at one offset from one another: a segment moved
        first = {t: body.index(t) for t in repeated}
        for t in repeated:
            occ = [i for i, x in enumerate(body) if x == t]
            distances.update(b - a for a, b in zip(occ, occ[1:]))
            starts.add(occ[0])
        # the repeat positions are exactly those whose token recurs and whose next token followed
        # it before (the induction rule right and unambiguous), computed here by brute force
        want = [p for p in range(len(ex.tokens) - 1)
                if ex.tokens[p] in ex.tokens[:p]
                and {ex.tokens[j + 1] for j in range(p) if ex.tokens[j] == ex.tokens[p]}
                == {ex.tokens[p + 1]}]
        assert ex.meta["repeat"] == want and want
        assert ex.meta["new"] == [p for p in range(len(ex.tokens) - 1)
                                  if ex.tokens[p + 1] not in ex.tokens[:p + 1]]
        assert len(first) >= 2  # a segment has at least 2 tokens
    assert len(lengths) > 20 and len(distances) > 20 and len(starts) > 20  # nothing fixed
    with pytest.raises(ValueError, match="layout"):
        small("induction", layout="spiral").examples("train")
    with pytest.raises(ValueError, match="min_segment"):
        small("induction", layout="segments", min_segment=9, segment=8).examples("train")
    with pytest.raises(ValueError, match="n_symbols"):
        small("induction", layout="segments", n_symbols=50, length=64).examples("train")


def test_induction_evaluate_per_group():
    for task in (small("induction", half=6, n_symbols=12),
                 small("induction", layout="segments", n_symbols=64, length=32, segment=6)):
        out = task.evaluate(InductionOracle(task.tokenizer.vocab_size), max_examples=20)
        assert out["accuracy"] == out["accuracy_repeat"] == 1.0
        assert out["accuracy_new"] < 0.5 and out["loss_new"] > out["loss_repeat"]
    coref = small("coref")  # the base evaluate runs on a decoder task too
    res = coref.evaluate(InductionOracle(coref.tokenizer.vocab_size), max_examples=10)
    assert 0.0 <= res["accuracy"] <= 1.0


# -- coref: a lookup written separately from tfviz/tasks/coref.py ------------------------------
KIND = {}
for kind, nouns in {"law": "law rule policy contract treaty regulation",
                    "software": "application program website browser database spreadsheet",
                    "animal": "dog cat horse rabbit parrot goat",
                    "food": "soup bread cake pizza salad curry",
                    "vehicle": "car truck bus bicycle tractor boat"}.items():
    KIND.update({n: kind for n in nouns.split()})
FITS = {}  # predicate or possessed part -> the kind of thing it can describe
for kind, attrs in {"law": "unfair strict vague unconstitutional wording enforcement application",
                    "software": "buggy laggy unresponsive unpatched interface installer settings",
                    "animal": "hungry furry sleepy thirsty tail fur paws",
                    "food": "spicy salty stale crunchy recipe crust flavour",
                    "vehicle": "rusty dented unroadworthy leaky engine tyres brakes"}.items():
    FITS.update({a: kind for a in attrs.split()})


def resolve(sentence_words, pronoun):
    """Referent (0 | 1) read from the words: the attribute after the pronoun, then the lookup."""
    nouns = []
    for i in range(pronoun):
        if sentence_words[i - 1] == "the" and sentence_words[i] not in nouns:
            nouns.append(sentence_words[i])
    assert len(nouns) == 2 and KIND[nouns[0]] != KIND[nouns[1]]
    if sentence_words[pronoun] == "its":
        attr = sentence_words[pronoun + 1]
    else:
        attr = next(w for w in sentence_words[pronoun + 1:] if w in FITS)
    fits = [KIND[n] == FITS[attr] for n in nouns]
    assert sum(fits) == 1
    return fits.index(True), nouns, attr


@pytest.mark.parametrize("arch", ["decoder", "encoder"])
def test_coref_labels_independent(arch):
    task = small("coref", arch=arch)
    tok = task.tokenizer
    for split in SPLITS:
        for ex in task.examples(split):
            w = words(tok, ex.tokens)
            m = ex.meta
            q = m["query_index"]
            assert q == len(ex.tokens) - 1 and w[q - 1] == "[SEP]"
            assert w[q] == (w[m["pronoun_index"]] if arch == "decoder" else "[MASK]")
            assert w[0] == ("[BOS]" if arch == "decoder" else "[CLS]")
            referent, nouns, _ = resolve(w, m["pronoun_index"])
            assert m["referent"] == referent
            assert [w[i] for i in m["candidate_indices"]] == nouns
            assert all(i < m["pronoun_index"] for i in m["candidate_indices"])
            assert [i for i, t in enumerate(ex.targets) if t != IGNORE] == [q]
            assert ex.targets[q] == tok.token_to_id(nouns[referent]) and m["referent_token"] == nouns[referent]
            assert tok.encode(ex.text).ids == ex.tokens[1:-2]


def test_coref_balanced_and_varied(tasks):
    exs = tasks["coref"].examples("train")
    by_template = Counter(), Counter()
    for ex in exs:
        by_template[ex.meta["referent"]][ex.meta["template"]] += 1
    assert len(by_template[0]) >= 5 and len(by_template[0] + by_template[1]) >= 6
    for t in by_template[0] + by_template[1]:
        share = by_template[0][t] / (by_template[0][t] + by_template[1][t])
        assert 0.35 < share < 0.65, (t, share)
    assert {ex.tokens[ex.meta["pronoun_index"]] for ex in exs} == {
        tasks["coref"].tokenizer.token_to_id("it"), tasks["coref"].tokenizer.token_to_id("its")}


def test_coref_test_split_unseen_combinations(tasks):
    task = tasks["coref"]
    tok = task.tokenizer

    def pairs(split):
        out = set()
        for ex in task.examples(split):
            w = words(tok, ex.tokens)
            referent, nouns, attr = resolve(w, ex.meta["pronoun_index"])
            out.add((nouns[referent], attr))
        return out

    train, val, test = pairs("train"), pairs("validation"), pairs("test")
    assert not test & train and not test & val
    assert {n for n, _ in test} <= {n for n, _ in train}  # each word seen, only not together
    assert {a for _, a in test} <= {a for _, a in train}


def test_coref_mission_sentences(tasks):
    task = tasks["coref"]
    tok = task.tokenizer
    s1, s2 = task.mission_sentences()
    for ex in (s1, s2):
        assert tok.unk_id not in ex.tokens
        w = words(tok, ex.tokens)
        assert [w[i] for i in ex.meta["candidate_indices"]] == ["law", "application"]
        assert w[ex.meta["query_index"]] == w[ex.meta["pronoun_index"]]
    w1 = words(tok, s1.tokens)
    assert w1[s1.meta["pronoun_index"]] == "its" and s1.meta["referent"] == 0
    assert s1.targets[s1.meta["query_index"]] == tok.token_to_id("law")
    w2 = words(tok, s2.tokens)
    assert w2[s2.meta["pronoun_index"]:s2.meta["pronoun_index"] + 4] == ["it", "is", "too", "complex"]
    assert s2.meta["referent"] is None and all(t == IGNORE for t in s2.targets)
    assert w2[1] == "..."


# -- agreement: number written out here, independently of the task's lists ---------------------
SINGULAR_OF = {  # plural -> singular, every noun of the task (a missing or extra one fails below)
    "laws": "law", "rules": "rule", "policies": "policy", "contracts": "contract", "treaties": "treaty",
    "regulations": "regulation", "programs": "program", "websites": "website", "browsers": "browser",
    "databases": "database", "spreadsheets": "spreadsheet", "games": "game", "dogs": "dog",
    "cats": "cat", "horses": "horse", "rabbits": "rabbit", "parrots": "parrot", "goats": "goat",
    "soups": "soup", "breads": "bread", "cakes": "cake", "pizzas": "pizza", "salads": "salad",
    "curries": "curry", "cars": "car", "trucks": "truck", "buses": "bus", "bicycles": "bicycle",
    "tractors": "tractor", "boats": "boat"}
PLURAL_PRONOUNS, SINGULAR_PRONOUNS = {"they", "their"}, {"it", "its"}


def agreement_resolve(w: list[str], pronoun: int) -> tuple[int, list[str], list[str]]:
    """(referent 0 | 1, the two nouns as written, their singular forms) from the words alone."""
    nouns = [w[i] for i in range(1, pronoun) if w[i - 1] == "the"][:2]
    plural = [n in SINGULAR_OF for n in nouns]
    assert plural.count(True) == 1, nouns  # one singular, one plural
    they = w[pronoun] in PLURAL_PRONOUNS
    assert they or w[pronoun] in SINGULAR_PRONOUNS
    return plural.index(they), nouns, [SINGULAR_OF.get(n, n) for n in nouns]


def test_agreement_labels_independent():
    task = small("agreement")
    tok = task.tokenizer
    singular = set(SINGULAR_OF.values())
    for split in SPLITS:
        for ex in task.examples(split):
            w, m = words(tok, ex.tokens), ex.meta
            q = m["query_index"]
            assert q == len(ex.tokens) - 1 and w[q - 1] == "[SEP]" and w[0] == "[BOS]"
            assert w[q] == w[m["pronoun_index"]]
            referent, nouns, answers = agreement_resolve(w, m["pronoun_index"])
            assert m["referent"] == referent and [w[i] for i in m["candidate_indices"]] == nouns
            assert set(answers) <= singular and answers[0] != answers[1]  # two different nouns
            assert m["answers"] == answers and m["referent_token"] == answers[referent]
            assert [i for i, t in enumerate(ex.targets) if t != IGNORE] == [q]  # loss on the answer
            assert ex.targets[q] == tok.token_to_id(answers[referent])
            # no word but the pronouns carries number: the same sentence with the pronouns of the
            # other number is a sentence of the task with the other referent
            other = [t for i, t in enumerate(w) if i not in (m["pronoun_index"], q)]
            flipped = task.flipped(ex)
            fw = words(tok, flipped.tokens)
            assert [t for i, t in enumerate(fw) if i not in (m["pronoun_index"], q)] == other
            assert agreement_resolve(fw, m["pronoun_index"])[0] == 1 - referent == flipped.meta["referent"]
            assert flipped.targets[q] == tok.token_to_id(answers[1 - referent])
    assert tok.unk_id not in {t for e in task.examples("train") for t in e.tokens}


def test_agreement_balanced_varied_and_held_out():
    task = small("agreement")
    tok = task.tokenizer
    train = task.examples("train")
    # the referent first or second, singular or plural, each about half the time
    for key in ("referent", "number"):
        share = Counter(e.meta[key] for e in train)
        assert all(0.4 < c / len(train) < 0.6 for c in share.values()) and len(share) == 2
    first_is_singular = Counter(words(tok, e.tokens)[e.meta["candidate_indices"][0]] not in SINGULAR_OF
                                for e in train)
    assert 0.4 < first_is_singular[True] / len(train) < 0.6
    # distances from the final pronoun to the referent vary widely
    assert len({e.meta["query_index"] - e.meta["candidate_indices"][e.meta["referent"]] for e in train}) > 15

    def frames(split):
        return {tuple(e.meta["frame"]) for e in task.examples(split)}

    def pairs(split):
        return {tuple(e.meta["pair"]) for e in task.examples(split)}
    seen_f, seen_p = frames("train") | frames("validation"), pairs("train") | pairs("validation")
    assert not frames("test") & seen_f and not pairs("test") & seen_p  # never trained on
    test_words = {w for e in task.examples("test") for w in words(tok, e.tokens)}
    train_words = {w for e in train for w in words(tok, e.tokens)}
    assert test_words <= train_words  # each word seen, only not in these frames and pairs
    fresh = task.fresh_examples(50, seed=3)
    known = {tuple(e.tokens) for sp in SPLITS for e in task.examples(sp)}
    assert not {tuple(e.tokens) for e in fresh} & known and len({tuple(e.tokens) for e in fresh}) == 50
    assert [e.tokens for e in task.fresh_examples(50, seed=3)] == [e.tokens for e in fresh]


def test_agreement_loss_on_all_and_mission_sentences():
    task = small("agreement", loss_on="all")
    tok = task.tokenizer
    ex = task.examples("train")[0]
    q = ex.meta["query_index"]
    n = len(ex.tokens) - 3  # the sentence's words
    assert ex.targets[:n] == ex.tokens[1:n + 1] and ex.targets[n:q] == [IGNORE] * (q - n)
    assert ex.targets[q] == tok.token_to_id(ex.meta["referent_token"])
    s1, s2 = task.mission_sentences()
    for ex, pronoun, answer in ((s1, "its", "law"), (s2, "their", "rule")):
        w = words(tok, ex.tokens)
        assert tok.unk_id not in ex.tokens
        assert w[1:18] == ["the", "law", "and", "the", "rules", "will", "never", "be", "perfect", ",",
                           "but", pronoun, "application", "should", "be", "just", "."]
        assert agreement_resolve(w, ex.meta["pronoun_index"])[2][ex.meta["referent"]] == answer
        assert ex.targets[ex.meta["query_index"]] == tok.token_to_id(answer)
    with pytest.raises(ValueError, match="loss_on"):
        make_task("agreement", loss_on="some")


def test_induction_repeats_inside_the_repeated_part():
    """distinct=False with min_alphabet: tokens drawn with replacement from each sequence's own
    alphabet (repeats inside r); loss_on="seen" keeps every position whose next token followed an
    earlier occurrence of the current one (brute force here), unambiguous or not."""
    task = small("induction", layout="segments", n_symbols=64, length=32, segment=8, distinct=False,
                 min_alphabet=4, loss_on="seen")
    ambiguous = 0
    for ex in task.examples("train")[:200]:
        t = ex.tokens
        want = [p for p in range(len(t) - 1)
                if t[p + 1] in {t[j + 1] for j in range(p) if t[j] == t[p]}]
        assert ex.meta["seen"] == want
        assert [i for i, x in enumerate(ex.targets) if x != IGNORE] == want
        assert set(ex.meta["repeat"]) <= set(want)
        ambiguous += len(set(want) - set(ex.meta["repeat"]))
    assert ambiguous > 100  # many tokens were followed by more than one token before
    sizes = {len(set(e.tokens[1:])) for e in task.examples("train")}
    assert min(sizes) <= 6 and max(sizes) >= 20  # each sequence's own alphabet, 4 .. 64 symbols
    same = small("induction", layout="segments", n_symbols=64, length=32, segment=8)
    assert all(set(e.meta["repeat"]) <= set(e.meta["seen"]) for e in same.examples("train")[:100])
    with pytest.raises(ValueError, match="distinct"):
        make_task("induction", min_alphabet=8)
    with pytest.raises(ValueError, match="min_alphabet"):
        make_task("induction", distinct=False, min_alphabet=99, n_symbols=50)


# -- translate: a lexicon written separately --------------------------------------------------
NOUN_FR = {"cat": "chat", "dog": "chien", "house": "maison", "car": "voiture", "horse": "cheval",
           "table": "table", "book": "livre", "flower": "fleur", "boy": "garçon", "girl": "fille"}
ADJ_FR = {"black": {"noir", "noire"}, "white": {"blanc", "blanche"}, "green": {"vert", "verte"},
          "red": {"rouge"}, "blue": {"bleu", "bleue"}, "grey": {"gris", "grise"},
          "yellow": {"jaune"}, "pink": {"rose"}}


def _adj_noun_pairs(en):
    return [(en[i], en[i + 1]) for i in range(len(en) - 1) if en[i] in ADJ_FR and en[i + 1] in NOUN_FR]


@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder"])
def test_translate_adjective_follows_noun(arch):
    task = small("translate", arch=arch)
    for ex in task.examples("train")[:300] + task.examples("test")[:100]:
        en, fr = _src_tgt(task, ex)
        assert len(en) == len(fr) and en[-1] == fr[-1] == "."
        for k in range(len(en) - 1):  # word k <-> word k, except "adj noun" -> "noun adj"
            if en[k] in ADJ_FR and en[k + 1] in NOUN_FR:
                assert fr[k] == NOUN_FR[en[k + 1]] and fr[k + 1] in ADJ_FR[en[k]]
            elif en[k] in NOUN_FR and (k == 0 or en[k - 1] not in ADJ_FR):
                assert fr[k] == NOUN_FR[en[k]]
        src_seq = ex.src if ex.src is not None else ex.tokens
        for (i, j), (sp, qp) in zip(ex.meta["word_alignment"], ex.meta["alignment"]):
            assert words(task.tokenizer, [src_seq[sp]]) == [en[i]]
            assert words(task.tokenizer, [ex.targets[qp]]) == [fr[j]]
            if en[i] in NOUN_FR:
                assert fr[j] == NOUN_FR[en[i]]
        align = ex.meta["word_alignment"]
        crossing = any(i1 < i2 and j1 > j2 for i1, j1 in align for i2, j2 in align)
        assert crossing == bool(_adj_noun_pairs(en))  # non-monotonic exactly when an adjective


def test_translate_test_split_unseen_pairs(tasks):
    task = tasks["translate"]
    pairs = {s: [set(_adj_noun_pairs(_src_tgt(task, ex)[0])) for ex in task.examples(s)] for s in SPLITS}
    seen = set().union(*pairs["train"], *pairs["validation"])
    assert all(p - seen for p in pairs["test"])  # every test sentence has an unseen pair
    assert {a for p in pairs["test"] for a, _ in p} <= {a for a, _ in seen}
    assert {n for p in pairs["test"] for _, n in p} <= {n for _, n in seen}


def test_mlm_masking_proportions():
    task = small("mlm")
    tok = task.tokenizer
    counts = Counter()
    for split in SPLITS:
        for ex in task.examples(split):
            original = [tok.cls_id] + tok.encode(ex.text).ids + [tok.sep_id]
            assert len(ex.tokens) == len(original)
            chosen = [i for i, t in enumerate(ex.targets) if t != IGNORE]
            assert len(chosen) == max(1, round(0.15 * (len(original) - 2)))
            assert 0 not in chosen and len(original) - 1 not in chosen
            for i, (tok_id, orig) in enumerate(zip(ex.tokens, original)):
                if i not in chosen:
                    assert tok_id == orig  # untouched
                    continue
                assert ex.targets[i] == orig
                counts["mask" if tok_id == tok.mask_id else "same" if tok_id == orig else "random"] += 1
                if tok_id != tok.mask_id:
                    assert tok_id >= 7
    n = sum(counts.values())
    assert n > 1500
    assert abs(counts["mask"] / n - 0.8) < 0.03
    assert abs(counts["random"] / n - 0.1) < 0.03  # a random draw may equal the original
    assert abs(counts["same"] / n - 0.1) < 0.03


def test_lm_windows_from_generated_corpus(tasks):
    task = tasks["lm"]
    tok = task.tokenizer
    text = task.corpus_text()
    assert " dogs " in text and tok.unk_id not in tok.encode(text[:text.index(".", 2000)]).ids
    chunks = {s: {ex.meta["chunk"] for ex in task.examples(s)} for s in SPLITS}
    assert not chunks["train"] & chunks["validation"] and not chunks["train"] & chunks["test"]
    assert not chunks["validation"] & chunks["test"]
    for ex in task.examples("train")[:100] + task.examples("test")[:50]:
        assert len(ex.tokens) == 32
        assert ex.targets[:-1] == ex.tokens[1:]
        assert tok.decode(ex.tokens + ex.targets[-1:]) in text


def test_lm_agreement_in_corpus():
    """The generated corpus obeys subject-verb agreement."""
    rng = random.Random(0)
    plural_nouns = {"dogs", "cats", "birds", "children", "teachers", "farmers", "horses",
                    "students", "doctors", "foxes"}
    for _ in range(300):
        text, info = grammar.sentence(rng)
        w = text.split()
        assert (w[info["subject"]] in plural_nouns) == info["plural"]
        assert w[info["verb"]].endswith("s") != info["plural"]


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_lm_user_text(kind):
    text = "".join(f"Line {i}: the quick brown fox number {i * 7 % 13} jumps.\n" for i in range(300))
    task = make_task("lm", text=text, tokenizer=kind, block=24, vocab_size=300 if kind == "bpe" else None)
    tok = task.tokenizer
    assert tok.kind == kind
    for split in SPLITS:
        for ex in task.examples(split)[:50]:
            assert tok.decode(ex.tokens + ex.targets[-1:]) in text
    again = make_task(task.spec())
    assert again.examples("test") == task.examples("test")
