"""Generation one token at a time with the KV cache, recording each new token's attention.

    gen = generate_with_attention(model, prompt_ids, 20, temperature=0.8, top_k=5, seed=0)
    gen.ids                     prompt + generated ids
    gen.patterns[t][name]       step t's attention row [head, k_pos] (self-attention: k_pos = 0..p_t,
                                the query's own position p_t included; cross-attention: the source)
    gen.cache_nbytes[t]         bytes of the self-attention KV cache after step t
                                (``tfviz.analysis.cost.kv_cache_bytes`` of its positions); for a
                                recurrent model, its state (the same at every step)

Step 0 feeds the whole prompt (the cache fills with its keys/values; the row kept is the last
prompt position's); every later step feeds only the newest token, whose query attends over the
cache. That is exactly what ``Transformer.generate`` does: the same ids come out (greedy, or
sampled with the same seed), and each recorded row equals the last row of a full ``record`` on
the whole sequence so far.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .model import Transformer, hook_name
from .model.families import family_of, lacks
from .model.decoding import check_generation, decode
from .recording import record

TOP = 5  # alternatives kept per step
# Longest prompt + new tokens (and source) accepted: step 0 records a [head, pos, pos] pattern per
# layer, so memory grows with the square of the length (4,000 tokens already took 1 GB; a pasted
# book would take the server down for the whole class).
MAX_POSITIONS = 1024


@dataclass
class Generation:
    ids: list[int]                       # prompt + generated
    n_prompt: int
    patterns: list[dict[str, np.ndarray]]  # per step: hook name -> [head, k_pos]
    q_positions: list[int]               # per step: position of the query token
    cache_nbytes: list[int]              # per step: self-attention KV-cache bytes after the step
    probs: list[float]                   # per step: p(chosen token) under softmax(logits) (T = 1)
    top: list[list[tuple[int, float]]] = field(default_factory=list)  # per step: TOP (id, p)
    stopped_at_eos: bool = False
    src_ids: list[int] | None = None     # encoder input (encoder-decoder models)

    def rows(self, name: str) -> list[np.ndarray]:
        """Every step's row for one hook name: a list of [head, k_pos] arrays."""
        return [p[name] for p in self.patterns]

    def matrix(self, name: str, head: int | None = None) -> np.ndarray:
        """[step, k_pos] for a name whose rows all have the same width (cross-attention over the
        source): one head's weights, or the mean over heads."""
        return np.stack([r.mean(0) if head is None else r[head] for r in self.rows(name)])


def pattern_names(model: Transformer) -> list[str]:
    """The attention patterns a generating query has: decoder self-attention (and cross-attention
    for an encoder-decoder), per layer. Encoder self-attention runs once, not per token. A
    recurrent model has only its additive attention over the source, if any."""
    cfg = model.config
    if lacks(model, "self_attention"):
        return [n for n in model.hook_points() if n.endswith("cross_attn.hook_pattern")]
    if cfg.arch == "encoder-decoder":
        return [hook_name(l, f"{kind}.hook_pattern", "decoder") for l in range(cfg.n_layers)
                for kind in ("attn", "cross_attn")]
    return [hook_name(l, "attn.hook_pattern") for l in range(cfg.n_layers)]


def _as_ids(x, what: str) -> torch.Tensor:
    t = torch.as_tensor(x, dtype=torch.long)
    if t.dim() == 1:
        t = t[None]
    if t.dim() != 2 or t.shape[0] != 1:
        raise ValueError(f"{what} must be one sequence of token ids, got shape {tuple(t.shape)}")
    if t.shape[1] == 0:
        raise ValueError(f"{what} is empty: give at least one token")
    return t


@torch.no_grad()
def generate_with_attention(model: Transformer, prompt_ids, n: int, temperature: float = 0.0,
                            top_k: int | None = None, seed: int = 0, src=None,
                            eos_id: int | None = None) -> Generation:
    """Extend ``prompt_ids`` by up to ``n`` tokens, one step at a time with a KV cache, recording
    every step's attention patterns (see the module docstring). temperature 0 = greedy; otherwise
    sample from softmax(logits / temperature), limited to the ``top_k`` most likely tokens, with a
    ``torch.Generator`` seeded by ``seed``. Stops early after ``eos_id``. Raises ``ValueError``
    with a readable reason (encoder model, missing src, learned positions too short, ...): the
    same checks, sampler and loop as ``Transformer.generate`` (``tfviz.model.decoding``)."""
    family_of(model)  # a Transformer or a recurrent model (ValueError for anything else)
    prompt = _as_ids(prompt_ids, "the prompt")
    src_t = None if src is None else _as_ids(src, "the source text")
    check_generation(model.config, prompt.shape[1], n, temperature, top_k, src_t is not None)
    if prompt.shape[1] + n > MAX_POSITIONS:
        raise ValueError(f"prompt ({prompt.shape[1]} tokens) + {n} new tokens = {prompt.shape[1] + n} "
                         f"positions; at most {MAX_POSITIONS} here: shorten the prompt")
    if src_t is not None and src_t.shape[1] > MAX_POSITIONS:
        raise ValueError(f"the source text has {src_t.shape[1]} tokens; at most {MAX_POSITIONS} here")
    device = next(model.parameters()).device
    prompt = prompt.to(device)
    names = pattern_names(model)
    out = Generation(prompt[0].tolist(), prompt.shape[1], [], [], [], [], [],
                     src_ids=None if src_t is None else src_t[0].tolist())
    recorded = []

    def forward(*inputs, cache, **kw):  # kw: padding_mask, for a prompt that opens with pads
        recorded.append(record(model, *inputs, cache=cache, names=names, **kw))
        return recorded[-1].output

    steps = decode(model, prompt, n, src=None if src_t is None else src_t.to(device),
                   temperature=temperature, top_k=top_k, eos_id=eos_id, forward=forward,
                   generator=torch.Generator(device=device).manual_seed(int(seed)))
    for step in steps:
        rec, nxt = recorded[-1], int(step.next_ids[0])
        p = torch.softmax(step.logits[0].cpu(), -1)
        top = p.topk(min(TOP, p.numel()))
        out.patterns.append({name: rec[name][0, :, -1].float().numpy() for name in names})
        out.q_positions.append(len(out.ids) - 1)
        out.cache_nbytes.append(step.cache.nbytes)
        out.probs.append(float(p[nxt]))
        out.top.append([(int(i), float(v)) for v, i in zip(top.values, top.indices)])
        out.ids.append(nxt)
        out.stopped_at_eos = step.done
    return out


def text_of(tokenizer, ids) -> str:
    """The ids as text a user can edit and encode back: word tokens joined by spaces, char and
    BPE tokens glued (special tokens kept, written as [BOS], [SEP], ...); an imported wordpiece or
    sentencepiece vocabulary as its own decoder writes it."""
    if tokenizer.kind in ("wordpiece", "sentencepiece"):
        return tokenizer.decode(ids)
    tokens = tokenizer.tokens_of(ids)
    return (" " if tokenizer.kind == "word" else "").join(tokens)


NO_TASK_PROMPT = "The cat sat on the mat because"


def default_inputs(task, tokenizer) -> tuple[str, str | None]:
    """A sensible (prompt text, source text or None) from the task's first validation example:
    the tokens before the first answer (e.g. '[BOS] 3 1 2 [SEP]', a coref sentence + '[SEP] it'),
    or about half of a language-model / induction sequence. Without a task (a model imported from
    a Hugging Face folder): the start of a plain sentence."""
    if task is None:
        return NO_TASK_PROMPT, None
    ex = task.examples("validation")[0]
    if ex.src is not None:
        return tokenizer.display(tokenizer.bos_id), text_of(tokenizer, ex.src)
    first = next((i for i, t in enumerate(ex.targets) if t != -100), 0) + 1
    if first < len(ex.tokens) // 2:
        first = len(ex.tokens) // 2 + 2
    return text_of(tokenizer, ex.tokens[:first]), None


def generation_note(task, n_examples: int = 64) -> str | None:
    """Why a model trained on ``task`` is a poor generator, or None when it was trained to write.

    Read from the task's own examples: a model learns to predict only where the targets are. A
    task with about one target per example (coref: the referent after the final pronoun) is a
    classification in disguise — every other position was never trained, so continuing a text
    gives words without sense."""
    if task is None:
        return None
    examples = task.examples("validation")[:n_examples]
    if not examples:
        return None
    per_example = sum(sum(t != -100 for t in e.targets) for e in examples) / len(examples)
    if per_example > 1.5:
        return None
    return (f"This model was trained on the **{task.name}** task, which asks for one answer token "
            f"per example ({getattr(task, 'metric', 'its answer')}): a classification, not "
            "writing. Only that one position was ever trained, so what it writes after a prompt "
            "is not language. For text, pick a language model (the shipped **lm**).")


def encode_text(tokenizer, text: str, what: str, bos: bool = False) -> list[int]:
    """Text -> ids; ``bos`` puts [BOS] first when the text does not start with it. ValueError for
    empty text."""
    if not text or not text.strip():
        raise ValueError(f"the {what} is empty: type at least one token")
    ids = tokenizer.encode(text).ids
    if bos and tokenizer.bos_id is not None and (not ids or ids[0] != tokenizer.bos_id):
        ids = [tokenizer.bos_id] + ids
    if not ids:
        raise ValueError(f"the {what} has no tokens")
    return ids
