"""word2vec: skip-gram with negative sampling (Mikolov et al. 2013, "Distributed Representations of
Words and Phrases and their Compositionality", https://arxiv.org/abs/1310.4546), in PyTorch.

The proxy task: for a centre word c and a word o within ``window`` of it, make σ(u_o · v_c) high,
and for ``negatives`` words n drawn from the unigram distribution^0.75 make σ(u_n · v_c) low:

    loss(c, o, n_1..n_k) = -log σ(u_o · v_c) - Σ_i log σ(-u_{n_i} · v_c)

v (``vectors``, the input embeddings) are the word vectors; u (``context_vectors``) are thrown
away. Words used in the same contexts end up pointing the same way. Frequent words are
subsampled (kept with probability min(1, sqrt(t/f) + t/f), the word2vec C code's rule).

Also the views shared with a transformer's input embeddings (any vectors + labels): one-hot
cosines (exactly 0 off the diagonal), nearest neighbours, analogy arithmetic (a - b + c, 3CosAdd),
a 2-D PCA projection (torch.linalg.svd), and ``model_embeddings`` for a Checkpoint.
"""
from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from ..viz.data import cosine_similarity, nearest_by_cosine
from .embeddings import embedding_matrix, one_hot

MAX_CHARS = 400_000  # user text beyond this is refused (training time grows with it)
MAX_VOCAB = 5_000

# ------------------------------------------------------------------------- the built-in corpus
# People vary along two independent factors, gender and role, so that the word vectors can learn
# them as directions (king - man + woman -> queen): each sentence puts a role phrase in a
# gendered frame. Animals, food, places, colours and numbers give other neighbourhoods.
PEOPLE = {  # role -> (male, female); a "young" role mixes its parent's phrases with the young ones
    "royal": ("king", "queen"),
    "royal young": ("prince", "princess"),
    "common": ("man", "woman"),
    "young": ("boy", "girl"),
    "family": ("father", "mother"),
    "family young": ("son", "daughter"),
}
ROLE_PHRASES = {
    "royal": ["rules the kingdom", "sits on the throne", "wears a golden crown",
              "lives in the palace", "gives orders to the guards", "visits the castle"],
    "common": ["works in the fields", "buys bread at the market", "walks to work",
               "repairs the old fence", "sells fish in the town", "carries wood home"],
    "young": ["plays with toys", "goes to school", "runs in the playground",
              "reads a picture book", "learns to count", "climbs the tree"],
    "family": ["cooks dinner for the family", "cares for the children", "tidies the house",
               "tells the children a story", "visits the grandparents", "waits at home"],
}
# Gender is marked right beside the noun (within a window of 3), by one of these frames.
GENDER_FRAMES = {
    "male": ["the {n} with his friend {r}", "he is the {n} who {r}", "the {n} {r} and he smiles",
             "his {n} {r}"],
    "female": ["the {n} with her friend {r}", "she is the {n} who {r}", "the {n} {r} and she smiles",
               "her {n} {r}"],
}
ANIMALS = ["dog", "cat", "horse", "cow", "sheep", "goat", "pig", "duck"]
ANIMAL_PHRASES = ["the {a} eats grass in the meadow", "the {a} sleeps in the barn",
                  "the farmer feeds the {a}", "a hungry {a} runs across the field",
                  "the {a} drinks water from the stream", "the little {a} follows its mother"]
FOODS = ["bread", "cheese", "soup", "apple", "cake", "rice", "fish", "egg"]
FOOD_PHRASES = ["we eat {f} for dinner", "the {f} tastes good", "she cooks {f} in the kitchen",
                "he buys {f} at the market", "a plate of {f} is on the table",
                "the children like warm {f}"]
COLOURS = ["red", "blue", "green", "yellow", "white", "black"]
THINGS = ["door", "boat", "coat", "hat", "house", "flower"]
COLOUR_PHRASES = ["the {c} {t} is new", "they paint the {t} {c}", "a {c} {t} is very pretty",
                  "look at the bright {c} {t}"]
NUMBERS = ["two", "three", "four", "five", "six", "seven"]
NUMBER_PHRASES = ["there are {n} apples on the table", "we count {n} birds in the sky",
                  "the boat carries {n} people", "{n} days later the rain stops"]
BUILTIN_SENTENCES = 2_000


def builtin_corpus(n_sentences: int = BUILTIN_SENTENCES, seed: int = 0) -> list[str]:
    """``n_sentences`` sentences from the templates above, deterministic for ``seed``: half about
    people (a role phrase in a gendered frame), the rest about animals, food, colours, numbers."""
    rng = random.Random(f"word2vec:{seed}")
    out = []
    for _ in range(n_sentences):
        kind = rng.random()
        if kind < 0.5:
            role = rng.choice(list(PEOPLE))
            g = rng.randrange(2)
            phrases = ROLE_PHRASES[rng.choice(role.split())]  # "royal young": either
            frame = rng.choice(GENDER_FRAMES[("male", "female")[g]])
            out.append(frame.format(n=PEOPLE[role][g], r=rng.choice(phrases)) + " .")
        elif kind < 0.65:
            out.append(rng.choice(ANIMAL_PHRASES).format(a=rng.choice(ANIMALS)) + " .")
        elif kind < 0.8:
            out.append(rng.choice(FOOD_PHRASES).format(f=rng.choice(FOODS)) + " .")
        elif kind < 0.9:
            out.append(rng.choice(COLOUR_PHRASES).format(c=rng.choice(COLOURS),
                                                         t=rng.choice(THINGS)) + " .")
        else:
            out.append(rng.choice(NUMBER_PHRASES).format(n=rng.choice(NUMBERS)) + " .")
    return out


GROUPS = {**{m: "person (male)" for m, _ in PEOPLE.values()},
          **{f: "person (female)" for _, f in PEOPLE.values()},
          **{w: "animal" for w in ANIMALS}, **{w: "food" for w in FOODS},
          **{w: "colour" for w in COLOURS}, **{w: "number" for w in NUMBERS}}
"""The built-in corpus's words by group (for colouring a projection)."""

_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?", re.UNICODE)


def words_of(text: str) -> list[list[str]]:
    """Text -> sentences of lowercase words (split at . ! ? and new lines; digits and punctuation
    dropped)."""
    return [ws for line in re.split(r"[.!?\n]+", text) if (ws := _WORD.findall(line.lower()))]


# ------------------------------------------------------------------------- training
@dataclass(frozen=True)
class Word2VecConfig:
    """Skip-gram with negative sampling; checked at construction."""

    dim: int = 24            # size of each word vector
    window: int = 2          # context words on each side of the centre word
    negatives: int = 5       # noise words per (centre, context) pair
    epochs: int = 10
    batch_size: int = 1024
    lr: float = 0.03         # Adam
    min_count: int = 1       # rarer words are dropped
    subsample: float = 1e-3  # t of the frequent-word subsampling; 0 = keep every word
    seed: int = 0
    num_threads: int | None = 1  # torch CPU threads while training (restored after); None = as is.
    # One thread: the same seed gives the same vectors (multi-threaded gradient sums change the
    # rounding) and, on a busy 2-core machine, it is also the fastest for matrices this small.

    def __post_init__(self):
        for name, low, high in [("dim", 2, 512), ("window", 1, 20), ("negatives", 1, 50),
                                ("epochs", 1, 200), ("batch_size", 1, 65_536),
                                ("min_count", 1, 1000), ("seed", 0, 2**31 - 1)]:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
                raise ValueError(f"{name}={v!r} must be a whole number in [{low}, {high}]")
        if self.num_threads is not None and (isinstance(self.num_threads, bool) or not isinstance(
                self.num_threads, int) or not 1 <= self.num_threads <= 1024):
            raise ValueError(f"num_threads={self.num_threads!r} must be None or a whole number "
                             "in [1, 1024]")
        if not (isinstance(self.lr, (int, float)) and 0 < self.lr <= 1):
            raise ValueError(f"lr={self.lr!r} must be in (0, 1]")
        if not (isinstance(self.subsample, (int, float)) and 0 <= self.subsample < 1):
            raise ValueError(f"subsample={self.subsample!r} must be in [0, 1)")


def sgns_loss(v_centre: torch.Tensor, u_context: torch.Tensor,
              u_negative: torch.Tensor) -> torch.Tensor:
    """Mean over the batch of -log σ(u_o · v_c) - Σ_k log σ(-u_k · v_c).
    v_centre, u_context [batch, dim]; u_negative [batch, negatives, dim]."""
    pos = (v_centre * u_context).sum(-1)                             # [batch]
    neg = torch.einsum("bkd,bd->bk", u_negative, v_centre)           # [batch, negatives]
    return -(F.logsigmoid(pos) + F.logsigmoid(-neg).sum(-1)).mean()


def skipgram_pairs(sentences: Sequence[Sequence[int]], window: int) -> np.ndarray:
    """Every (centre, context) id pair within ``window`` inside one sentence -> [pairs, 2]."""
    out = []
    for s in sentences:
        s = np.asarray(s, dtype=np.int64)
        for d in range(1, window + 1):
            if len(s) > d:
                out.append(np.stack([s[:-d], s[d:]], 1))
                out.append(np.stack([s[d:], s[:-d]], 1))
    return np.concatenate(out) if out else np.zeros((0, 2), dtype=np.int64)


@dataclass
class Word2Vec:
    """A trained model: ``words`` [V] (most frequent first), ``counts`` [V], ``vectors`` [V, dim]
    (the input vectors v, float64), ``context_vectors`` [V, dim] (u), ``losses`` (mean per epoch)."""

    words: list[str]
    counts: np.ndarray
    vectors: np.ndarray
    context_vectors: np.ndarray
    losses: list[float]
    config: Word2VecConfig
    index: dict[str, int] = field(init=False)

    def __post_init__(self):
        self.index = {w: i for i, w in enumerate(self.words)}

    def neighbours(self, word: str, k: int = 5) -> list[tuple[str, float]]:
        return neighbours(self.vectors, self.words, word, k)

    def analogy(self, a: str, b: str, c: str, k: int = 5) -> list[tuple[str, float]]:
        return analogy(self.vectors, self.words, a, b, c, k)


def train_word2vec(text: str | Sequence[str] | None = None, config: Word2VecConfig | None = None,
                   progress: Callable[[int, int, float], None] | None = None) -> Word2Vec:
    """Train skip-gram with negative sampling on ``text`` (a string, a list of sentences, or None
    for ``builtin_corpus()``); deterministic for ``config.seed`` (CPU). ``progress(epoch, epochs,
    loss)`` after each epoch."""
    cfg = config or Word2VecConfig()
    if text is None:
        text = builtin_corpus()
    if not isinstance(text, str):
        text = "\n".join(text)
    if len(text) > MAX_CHARS:
        raise ValueError(f"the text has {len(text):,} characters; word2vec here takes at most "
                         f"{MAX_CHARS:,}")
    sentences = words_of(text)
    counts = Counter(w for s in sentences for w in s)
    vocab = [w for w, c in sorted(counts.items(), key=lambda wc: (-wc[1], wc[0]))
             if c >= cfg.min_count][:MAX_VOCAB]
    if len(vocab) < 2:
        raise ValueError("word2vec needs a text with at least two different words "
                         f"(occurring at least min_count={cfg.min_count} times)")
    index = {w: i for i, w in enumerate(vocab)}
    freq = np.array([counts[w] for w in vocab], dtype=np.float64)
    ids = [[index[w] for w in s if w in index] for s in sentences]
    g = torch.Generator().manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    keep = None  # the probability of keeping each word (frequent-word subsampling)
    if cfg.subsample:
        f = freq / freq.sum()
        keep = np.minimum(1.0, np.sqrt(cfg.subsample / f) + cfg.subsample / f)
    noise = torch.tensor(freq ** 0.75)
    noise /= noise.sum()

    old_threads = torch.get_num_threads()
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    try:
        v, u, losses = _train(ids, keep, noise, cfg, g, rng, progress)
    finally:
        torch.set_num_threads(old_threads)
    return Word2Vec(vocab, freq, v.detach().double().numpy().copy(),
                    u.detach().double().numpy().copy(), losses, cfg)


def _train(ids, keep, noise, cfg: Word2VecConfig, g: torch.Generator, rng, progress):
    """The SGNS loop -> (v, u, losses per epoch)."""
    V = len(noise)
    v = torch.empty(V, cfg.dim).uniform_(-0.5 / cfg.dim, 0.5 / cfg.dim, generator=g)  # word2vec's
    u = torch.zeros(V, cfg.dim)                                                        # init
    adam = _Adam([v, u], cfg.lr)
    losses = []
    for epoch in range(cfg.epochs):
        kept = ids if keep is None else [[i for i in s if rng.random() < keep[i]] for s in ids]
        pairs = torch.from_numpy(skipgram_pairs(kept, cfg.window))
        if not len(pairs):
            raise ValueError("no (word, context) pairs: the sentences are too short")
        pairs = pairs[torch.randperm(len(pairs), generator=g)]
        total, n = 0.0, 0
        for start in range(0, len(pairs), cfg.batch_size):
            batch = pairs[start:start + cfg.batch_size]
            neg = torch.multinomial(noise, len(batch) * cfg.negatives, replacement=True,
                                    generator=g).view(len(batch), cfg.negatives)
            loss = sgns_loss(v[batch[:, 0]], u[batch[:, 1]], u[neg])
            adam.step(loss)
            total += loss.item() * len(batch)
            n += len(batch)
        losses.append(total / n)
        if progress is not None:
            progress(epoch + 1, cfg.epochs, losses[-1])
    return v, u, losses


class _Adam:
    """Adam (Kingma & Ba 2014) on a few dense tensors, written out: ``torch.optim`` would import
    torch._dynamo on first use (~10 s on a busy 2-core machine) for two small matrices."""

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8):
        self.params = [p.requires_grad_() for p in params]
        self.lr, self.betas, self.eps, self.t = lr, betas, eps, 0
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]

    def step(self, loss: torch.Tensor) -> None:
        grads = torch.autograd.grad(loss, self.params)
        self.t += 1
        b1, b2 = self.betas
        with torch.no_grad():
            for p, g, m, v in zip(self.params, grads, self.m, self.v):
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                denom = (v / (1 - b2 ** self.t)).sqrt_().add_(self.eps)
                p.addcdiv_(m, denom, value=-self.lr / (1 - b1 ** self.t))


# ------------------------------------------------------------------------- views on any vectors
def _row(labels: Sequence[str], word: str) -> int:
    try:
        return list(labels).index(word)
    except ValueError:
        raise ValueError(f"{word!r} is not in the vocabulary") from None


def neighbours(vectors, labels: Sequence[str], word: str, k: int = 5) -> list[tuple[str, float]]:
    """The ``k`` labels whose vectors have the highest cosine similarity to ``word``'s, best
    first, with that cosine (``tfviz.viz.data.nearest_by_cosine``; ties: lower row first)."""
    index, cos = nearest_by_cosine(vectors, [_row(labels, word)], k)
    return [(labels[j], float(c)) for j, c in zip(index[0], cos[0])]


def analogy(vectors, labels: Sequence[str], a: str, b: str, c: str,
            k: int = 5) -> list[tuple[str, float]]:
    """"``a`` is to ``b`` as ``c`` is to ?": the ``k`` labels closest (cosine) to
    unit(a) - unit(b) + unit(c) — "king - man + woman" is ``analogy(..., "king", "man", "woman")``
    — the three words themselves excluded (Mikolov's 3CosAdd)."""
    v = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    unit = np.divide(v, norms, out=np.zeros_like(v), where=norms > 0)
    rows = [_row(labels, w) for w in (a, b, c)]
    target = unit[rows[0]] - unit[rows[1]] + unit[rows[2]]
    target /= np.linalg.norm(target) or 1.0
    cos = unit @ target
    cos[rows] = -np.inf
    order = np.lexsort((np.arange(len(cos)), -cos))[:k]
    return [(labels[j], float(cos[j])) for j in order]


def one_hot_cosines(n: int) -> np.ndarray:
    """Cosine similarities of ``n`` one-hot vectors: the identity (every pair orthogonal)."""
    return cosine_similarity(one_hot(range(n), n))


def project_2d(vectors) -> tuple[np.ndarray, np.ndarray]:
    """PCA to two dimensions -> (coordinates [n, 2], share of the variance each axis explains
    [2]); signs fixed so each axis's largest-magnitude coordinate is positive."""
    x = torch.as_tensor(np.asarray(vectors, dtype=np.float64))
    x = x - x.mean(0)
    _, s, vh = torch.linalg.svd(x, full_matrices=False)
    coords = (x @ vh[:2].T).numpy()
    flip = np.sign(coords[np.abs(coords).argmax(0), [0, 1][:coords.shape[1]]])
    coords = coords * np.where(flip == 0, 1.0, flip)
    var = (s ** 2).numpy()
    return coords, var[:2] / var.sum() if var.sum() > 0 else np.zeros(2)


def model_embeddings(checkpoint, skip_special: bool = True,
                     limit: int = 2_000) -> tuple[np.ndarray, list[str]]:
    """A trained transformer's input embeddings (``embed.weight``) with the tokenizer's token
    strings: (vectors [n, d_model] float64, labels [n]) for the first ``limit`` token ids,
    special tokens left out unless ``skip_special=False``."""
    tok = checkpoint.tokenizer
    if tok is None:
        raise ValueError("this checkpoint has no tokenizer: its embedding rows have no names")
    n = min(tok.vocab_size, checkpoint.config.vocab_size, limit)
    special = set(tok.special_ids) if skip_special else set()
    rows = [i for i in range(n) if i not in special]
    return embedding_matrix(checkpoint.model, rows=rows), [tok.display(i) for i in rows]


__all__ = ["BUILTIN_SENTENCES", "GROUPS", "MAX_CHARS", "MAX_VOCAB", "Word2Vec", "Word2VecConfig",
           "analogy", "builtin_corpus", "model_embeddings", "neighbours", "one_hot_cosines",
           "project_2d", "sgns_loss", "skipgram_pairs", "train_word2vec", "words_of"]
