"""induction: random tokens in which something recurs (Olsson et al. 2022, "In-context learning
and induction heads"). An induction head reads "the token after the earlier occurrence of the
current token" and copies it, wherever that occurrence is.

Two layouts:

``layout="repeat"`` (the default): a random sequence repeated once,
    tokens  = [BOS] r1 .. rn r1 .. rn          (n = ``half``, r drawn from ``n_symbols`` symbols,
                                                 distinct within a half when ``distinct``)
With ``min_half`` set, each example's n is drawn uniformly from min_half .. half. A fixed n lets a
model predict the repeat by looking back a fixed n-1 positions — a positional shortcut that even a
one-layer model learns — so the induction contrast (Olsson et al.: 2 layers yes, 1 layer no) needs
varying lengths.

``layout="segments"``: random filler in which random segments recur at random offsets,
    tokens  = [BOS] f f s1 s2 s3 f f f s1 s2 s3 f s1 s2 s3 f f ...
Each example has ``min_length`` .. ``length`` tokens after [BOS], 1 .. ``segments`` distinct
segments, each ``min_segment`` .. ``segment`` tokens long and occurring ``min_repeats`` ..
``repeats`` times; occurrences are shuffled and the filler is split at random around them (gaps
of any size, zero included). With ``distinct``, filler and segment tokens are drawn without
replacement, so every repeated token is a real recurrence. Neither the distance between
occurrences nor where they start is fixed: only "find the earlier occurrence of the current token,
copy what followed it" predicts the repeats.

    targets[p] = tokens[p+1]                    next token; -100 at the last position

Which targets can be predicted is read from the tokens alone (``copy_positions``), for both
layouts and for any probe:
    repeat  positions p whose token occurred earlier, and the token after every earlier
            occurrence is tokens[p+1] (the induction rule is right and unambiguous there)
    new     positions p whose next token tokens[p+1] has not occurred in tokens[0..p]
In the repeat layout these are the second half (n+1 .. 2n-1) and the first half (0 .. n-1).
``loss_on="repeat"`` keeps only the repeat targets. ``evaluate`` reports loss/accuracy over each
group; "accuracy" is that of the repeat.

Repeated tokens inside the repeated part (as real text has: "the" recurs within a sentence that
recurs): with ``distinct=False`` tokens are drawn with replacement, and with ``min_alphabet`` set
each sequence draws them from its own random subset of ``min_alphabet`` .. ``n_symbols`` symbols
(a small subset: many repeats; the whole set: few); with ``distinct_share`` that share of the
sequences (segments layout) still draws distinct tokens. Then token t may have been followed by several
tokens before, and the best a copier can do is to split its bet among them in proportion to how
often each followed t (``seen_positions``: every position whose next token followed an earlier
occurrence of the current one, unambiguous or not; ``loss_on="seen"`` trains on them;
``tfviz.analysis.induction.repeat_floor`` is that copier's loss).
"""
from __future__ import annotations

import random
import string
from collections.abc import Sequence

from ..tokenize import vocab_tokenizer
from .base import IGNORE, Example
from .common import GeneratedTask, split_list, token_evaluate, unique_samples

# 52 letters (the first 52: every existing spec's symbols), then a0 .. z9 for long sequences of
# distinct tokens.
SYMBOLS = (list(string.ascii_lowercase + string.ascii_uppercase)
           + [f"{c}{d}" for c in string.ascii_lowercase for d in string.digits])
LAYOUTS = ("repeat", "segments")


def copy_positions(tokens: Sequence[int]) -> tuple[list[int], list[int]]:
    """(repeat, new) positions of one sequence (see the module docstring): position p predicts
    tokens[p+1]; "repeat": the induction rule (copy what followed the earlier occurrences of
    tokens[p]) gives tokens[p+1] without ambiguity; "new": tokens[p+1] has not been seen yet."""
    after: dict[int, set[int]] = {}  # token -> the tokens that followed its occurrences so far
    seen: set[int] = set()
    repeat, new = [], []
    for p in range(len(tokens) - 1):
        t, nxt = tokens[p], tokens[p + 1]
        seen.add(t)
        if after.get(t) == {nxt}:
            repeat.append(p)
        if nxt not in seen:
            new.append(p)
        after.setdefault(t, set()).add(nxt)
    return repeat, new


def seen_positions(tokens: Sequence[int]) -> list[int]:
    """Positions p whose next token tokens[p+1] followed an earlier occurrence of tokens[p]: the
    copy rule names it, alone (a "repeat" of ``copy_positions``) or among other continuations."""
    after: dict[int, set[int]] = {}
    out = []
    for p in range(len(tokens) - 1):
        t, nxt = tokens[p], tokens[p + 1]
        if nxt in after.get(t, ()):
            out.append(p)
        after.setdefault(t, set()).add(nxt)
    return out


def segments_sequence(rng: random.Random, symbols: Sequence[int], length: int,
                      segments: Sequence[tuple[int, int]], distinct: bool = True
                      ) -> tuple[list[int], list[tuple[int, int, int]]]:
    """``length`` tokens of random filler with each (segment length, occurrences) of ``segments``
    recurring at random offsets -> (tokens, occurrences [(segment index, start, length)], starts
    0-based in the returned tokens, in order of start). Filler and segment tokens are drawn from
    ``symbols`` without replacement when ``distinct``."""
    used = sum(s * k for s, k in segments)
    n_filler = length - used
    if n_filler < 0 or any(s < 1 or k < 1 for s, k in segments):
        raise ValueError(f"segments {list(segments)} do not fit in {length} tokens")
    n_fresh = n_filler + sum(s for s, _ in segments)
    if distinct and n_fresh > len(symbols):
        raise ValueError(f"{n_fresh} distinct tokens needed, only {len(symbols)} symbols")
    fresh = (rng.sample(list(symbols), n_fresh) if distinct
             else [rng.choice(symbols) for _ in range(n_fresh)])
    bodies, at = [], n_filler
    for s, _ in segments:
        bodies.append(fresh[at:at + s])
        at += s
    blocks = [i for i, (_, k) in enumerate(segments) for _ in range(k)]
    rng.shuffle(blocks)
    # stars and bars: block b goes after slots[b] - b filler tokens (gaps of any size, 0 included)
    slots = sorted(rng.sample(range(n_filler + len(blocks)), len(blocks)))
    tokens: list[int] = []
    occurrences = []
    filler = iter(fresh[:n_filler])
    placed = 0
    for b, slot in enumerate(slots):
        while placed < slot - b:
            tokens.append(next(filler))
            placed += 1
        occurrences.append((blocks[b], len(tokens), segments[blocks[b]][0]))
        tokens.extend(bodies[blocks[b]])
    tokens.extend(filler)
    return tokens, occurrences


class InductionTask(GeneratedTask):
    name = "induction"
    archs = ("decoder",)
    metric = ("share of repeated tokens (those the earlier occurrence of the current token "
              "announces) predicted correctly")
    defaults = dict(n_symbols=50, half=16, min_half=None, distinct=True, loss_on="all",
                    layout="repeat", length=64, min_length=16, segment=16, min_segment=2,
                    repeats=3, min_repeats=2, segments=2, min_alphabet=None, distinct_share=0.0,
                    n_train=5000, n_val=500, n_test=500)
    limits = dict(n_symbols=(2, len(SYMBOLS)), half=(2, 2048), min_half=(2, 2048), length=(2, 4096),
                  min_length=(2, 4096), segment=(2, 4096), min_segment=(2, 4096), repeats=(2, 4096),
                  min_repeats=(2, 4096), segments=(1, 4096), min_alphabet=(2, len(SYMBOLS)),
                  distinct_share=(0.0, 1.0))
    choices = dict(loss_on=("all", "repeat", "seen"), layout=LAYOUTS)

    def check_params(self, p):
        self._check()
        self.check_tokens(1 + (2 * p["half"] if p["layout"] == "repeat" else p["length"]))

    def _check(self) -> None:
        p = self.params
        n_sym = int(p["n_symbols"])
        if not 2 <= n_sym <= len(SYMBOLS):
            raise ValueError(f"n_symbols must be in 2..{len(SYMBOLS)}")
        if p["loss_on"] not in ("all", "repeat", "seen"):
            raise ValueError("loss_on must be 'all', 'repeat' or 'seen'")
        if p["min_alphabet"] is not None:
            if p["distinct"]:
                raise ValueError("min_alphabet draws tokens with replacement: set distinct=False")
            if not 2 <= int(p["min_alphabet"]) <= n_sym:
                raise ValueError(f"need 2 <= min_alphabet <= n_symbols ({n_sym})")
        if p["distinct_share"] and p["distinct"]:
            raise ValueError("distinct_share mixes in sequences of distinct tokens: set distinct=False")
        if p["layout"] not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {p['layout']!r}")
        if p["layout"] == "repeat":
            half = int(p["half"])
            if half < 2 or (p["distinct"] and half > n_sym):
                raise ValueError("need 2 <= half (and half <= n_symbols when distinct)")
            lo = half if p["min_half"] is None else int(p["min_half"])
            if not 2 <= lo <= half:
                raise ValueError(f"need 2 <= min_half <= half, got min_half={p['min_half']}")
            return
        for lo, hi, least in (("min_length", "length", 2), ("min_segment", "segment", 2),
                              ("min_repeats", "repeats", 2)):
            if not least <= int(p[lo]) <= int(p[hi]):
                raise ValueError(f"need {least} <= {lo} <= {hi}, got {p[lo]} and {p[hi]}")
        if int(p["segments"]) < 1:
            raise ValueError("segments (the most distinct recurring segments) must be >= 1")
        if int(p["min_segment"]) * int(p["min_repeats"]) > int(p["min_length"]):
            raise ValueError("the shortest segment, repeated min_repeats times, must fit in "
                             "min_length tokens")
        if p["distinct"] and int(p["length"]) > n_sym:
            raise ValueError("with distinct tokens, length must be <= n_symbols")

    def _segments(self, rng: random.Random) -> tuple[int, list[tuple[int, int]]]:
        """One example's length and (segment length, occurrences) list; a segment that does not
        fit in what is left is dropped (at least one always fits: see ``_check``)."""
        p = self.params
        length = rng.randint(int(p["min_length"]), int(p["length"]))
        room, chosen = length, []
        for _ in range(rng.randint(1, int(p["segments"]))):
            s = rng.randint(int(p["min_segment"]), int(p["segment"]))
            k = rng.randint(int(p["min_repeats"]), int(p["repeats"]))
            if s * k <= room:
                chosen.append((s, k))
                room -= s * k
        if not chosen:
            chosen = [(int(p["min_segment"]), int(p["min_repeats"]))]
        return length, chosen

    def _build(self):
        self._check()
        p = self.params
        n_sym, half = int(p["n_symbols"]), int(p["half"])
        syms = SYMBOLS[:n_sym]
        tok = vocab_tokenizer(syms)
        ids = [tok.token_to_id(s) for s in syms]
        rng = self.rng("sequences")
        lo = half if p["min_half"] is None else int(p["min_half"])

        def alphabet():  # the symbols one sequence draws from (all of them unless min_alphabet)
            if p["min_alphabet"] is None:
                return range(n_sym)
            return rng.sample(range(n_sym), rng.randint(int(p["min_alphabet"]), n_sym))

        def sample_repeat():
            n = half if lo == half else rng.randint(lo, half)
            if p["distinct"]:
                body = tuple(rng.sample(range(n_sym), n))
            elif p["min_alphabet"] is None:
                body = tuple(rng.randrange(n_sym) for _ in range(n))
            else:
                symbols = alphabet()
                body = tuple(rng.choice(symbols) for _ in range(n))
            return body * 2

        def sample_segments():
            length, segs = self._segments(rng)
            distinct = bool(p["distinct"]) or bool(p["distinct_share"]) and rng.random() < p["distinct_share"]
            seq, _ = segments_sequence(rng, range(n_sym) if distinct else alphabet(), length, segs, distinct)
            return tuple(seq)

        sample = sample_repeat if p["layout"] == "repeat" else sample_segments
        examples = []
        for seq in unique_samples(sample, sum(self.sizes()), "sequences"):
            tokens = [tok.bos_id] + [ids[s] for s in seq]
            repeat, new = copy_positions(tokens)
            targets = tokens[1:] + [IGNORE]
            seen = seen_positions(tokens)
            if p["loss_on"] != "all":
                keep = set(repeat if p["loss_on"] == "repeat" else seen)
                targets = [t if i in keep else IGNORE for i, t in enumerate(targets)]
            meta = {"repeat": repeat, "new": new, "seen": seen}
            if p["layout"] == "repeat":
                n = len(seq) // 2
                meta |= {"half": n, "first_start": 1, "second_start": n + 1}
            examples.append(Example(tokens, targets, text=" ".join(syms[s] for s in seq),
                                    meta=meta))
        return tok, split_list(examples, self.sizes())

    def evaluate(self, model, split="validation", max_examples=512, batch_size=64):
        out = token_evaluate(self, model, split, max_examples, batch_size,
                             {"new": lambda ex: ex.meta["new"],
                              "repeat": lambda ex: ex.meta["repeat"],
                              "seen": lambda ex: ex.meta.get("seen", ex.meta["repeat"])})
        out["accuracy"] = out["accuracy_repeat"]
        return out
