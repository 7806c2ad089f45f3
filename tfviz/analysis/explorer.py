"""The Attention explorer's arrays: text -> token ids, a recording -> what each view needs.

UI-free (the page in ``app_pages/attention.py`` is the only caller that knows Streamlit). Recordings
are handled as plain ``{name: np.ndarray}`` dicts with the recorded shapes (README's table), so
they can be cached and downloaded as they are.

    sites(cfg)                        the kinds of attention a model has (self / enc / dec / cross)
    prepare_text(tok, text, ...)      text -> ids + display tokens, [UNK] words, truncation
    layer_stack(arrays, site)         [layer, head, q_pos, k_pos] patterns of one site
    step_inputs(arrays, site, l, h, i) the recorded q, k_j, v_j, bias, mask of one query, and the
                                      recorded pattern row / z it must reproduce
    head_table(model, task, site)     per-head scores and labels (``tfviz.analysis.heads``)
    probe_candidates(tokens, ...)     the pronoun probe's query and candidate nouns
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..model.hooks import hook_name, parse_hook_name, stack_layers
from ..recording import record
from ..tasks.base import collate
from ..tasks.coref import CATEGORIES
from .heads import head_scores, score_model

ATTN_HOOKS = ("hook_q", "hook_k", "hook_v", "hook_rot_q", "hook_rot_k", "hook_pos_bias",
              "hook_attn_scores", "hook_pattern", "hook_z")
PRONOUNS = ("it", "its")
READABLE_MAX = 128  # longest input the explorer shows: beyond it labels and cells get unreadable


# ---------------------------------------------------------------------------- sites
@dataclass(frozen=True)
class Site:
    """One kind of attention in a model: its label, where it is recorded (stack and attention
    module), which token sequences its queries and keys come from ("tokens" = the decoder / single
    stack input, "src" = the encoder input of an encoder-decoder), and whether it is causal."""

    label: str
    stack: str  # "" (single stack) | "encoder" | "decoder"
    attention: str  # "attn" | "cross_attn"
    q_side: str
    k_side: str
    causal: bool

    def name(self, layer: int | str, hook: str) -> str:
        """The recorded name of ``hook`` ("hook_pattern", ...) in ``layer`` ("{l}": a template)."""
        return hook_name(layer, f"{self.attention}.{hook}", self.stack)

    @property
    def is_self(self) -> bool:
        return self.q_side == self.k_side


def sites(config) -> list[Site]:
    """The attention kinds of a model: one for decoder/encoder models, three for encoder-decoder."""
    if config.arch == "encoder-decoder":
        return [Site("encoder self-attention", "encoder", "attn", "src", "src", False),
                Site("decoder self-attention", "decoder", "attn", "tokens", "tokens", True),
                Site("cross-attention", "decoder", "cross_attn", "tokens", "src", False)]
    kind = "causal" if config.causal else "bidirectional"
    return [Site(f"self-attention ({kind})", "", "attn", "tokens", "tokens", config.causal)]


def is_attention_name(name: str) -> bool:
    """The recorded names the explorer needs: per-head attention internals of every layer."""
    where = parse_hook_name(name)
    return where.attention is not None and where.hook.rsplit(".", 1)[-1] in ATTN_HOOKS


def to_numpy(recording: Mapping) -> dict[str, np.ndarray]:
    """name -> float32 array (shapes unchanged, batch included)."""
    return {k: v.detach().float().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)
            for k, v in recording.items()}


# ---------------------------------------------------------------------------- input
@dataclass
class Prepared:
    ids: list[int]
    tokens: list[str]
    unknown: list[str]          # words of the text the tokenizer does not know ([UNK])
    truncated_from: int | None  # the length before cutting to ``limit``, when cut


def layout_of(example_ids: Sequence[int] | None, special_ids: Sequence[int],
              pad_id: int | None = 0) -> tuple[list, list]:
    """(prefix, suffix): the special tokens a task puts around its text (e.g. [BOS] … for a
    decoder, [CLS] … [SEP] for an encoder), read off one of its examples; padding (``pad_id``,
    the tokenizer's) excluded."""
    if not example_ids:
        return [], []
    special = set(special_ids) - {pad_id}
    ids = list(example_ids)
    while ids and pad_id is not None and ids[-1] == pad_id:  # right padding
        ids.pop()
    i = 0
    while i < len(ids) and ids[i] in special:
        i += 1
    j = len(ids)
    while j > i and ids[j - 1] in special:
        j -= 1
    return ids[:i], ids[j:]


def length_limit(config, cap: int = READABLE_MAX) -> tuple[int, str]:
    """(longest input, why): the positional scheme's limit (learned positions stop at max_len);
    every input stops at ``cap``."""
    limit = config.max_positions
    if limit is not None and limit < cap:
        return limit, config.scheme.length_limit(config)
    return cap, f"the explorer shows at most {cap} tokens so that labels stay readable"


def prepare_text(tokenizer, text: str, prefix: Sequence[int] = (), suffix: Sequence[int] = (),
                 limit: int = READABLE_MAX) -> Prepared:
    """Tokenize ``text`` with the model's tokenizer, wrap it in ``prefix``/``suffix`` and cut it
    to ``limit`` tokens (the suffix is kept). Raises ValueError on empty text."""
    if not text or not text.strip():
        raise ValueError("the text is empty: type a sentence (or use a task example)")
    enc = tokenizer.encode(text)
    unknown = list(dict.fromkeys(text[s:e] for i, (s, e) in zip(enc.ids, enc.offsets)
                                 if i == tokenizer.unk_id and e > s))
    ids = list(prefix) + list(enc.ids) + list(suffix)
    truncated_from = None
    if len(ids) > limit:
        truncated_from = len(ids)
        keep = max(limit - len(suffix), 1)
        ids = (ids[:keep] + list(suffix))[:limit]
    return Prepared(ids, tokenizer.tokens_of(ids), unknown, truncated_from)


def probe_text(tokenizer, ids: Sequence[int]) -> str | None:
    """Text that tokenizes back to exactly ``ids`` (e.g. an induction probe), or None."""
    text = tokenizer.decode(ids)
    return text if tokenizer.encode_ids(text) == list(ids) else None


# ---------------------------------------------------------------------------- slicing
def layer_stack(arrays: Mapping[str, np.ndarray], site: Site, hook: str = "hook_pattern",
                batch: int = 0) -> np.ndarray:
    """[layer, head, q_pos, k_pos] of one site (``hook_pattern`` or ``hook_attn_scores``)."""
    try:
        return stack_layers(arrays, site.name("{l}", hook))[:, batch]
    except KeyError:
        raise ValueError(f"nothing recorded for {site.label} ({site.name(0, hook)})") from None


@dataclass
class StepInputs:
    """Everything the step-through of one query needs, straight from the recording."""

    q: np.ndarray            # [d_head] (RoPE-rotated when the model rotates)
    K: np.ndarray            # [k_pos, d_head] (rotated too)
    V: np.ndarray            # [k_pos, d_head]
    bias_row: np.ndarray | None  # [k_pos] ALiBi / T5 bias, None when the scheme adds none
    mask_row: np.ndarray     # [k_pos] bool, True = may attend (the scores that are not -inf)
    kv_head: int             # the key/value head this query head reads (GQA / MQA)
    rotated: bool
    pattern_row: np.ndarray  # [k_pos] the recorded softmax of this query
    z_row: np.ndarray        # [d_head] the recorded hook_z of this query and head


def step_inputs(arrays: Mapping[str, np.ndarray], site: Site, layer: int, head: int,
                query: int, batch: int = 0) -> StepInputs:
    """The recorded numbers of (layer, head, query). GQA/MQA: query head h reads kv head
    h // (n_heads // n_kv_heads), as the model does."""
    a = lambda hook: arrays[site.name(layer, hook)]  # noqa: E731
    rotated = site.name(layer, "hook_rot_q") in arrays
    q_all = a("hook_rot_q" if rotated else "hook_q")[batch]   # [pos, head, d_head]
    k_all = a("hook_rot_k" if rotated else "hook_k")[batch]   # [pos, kv_head, d_head]
    n_heads, n_kv = q_all.shape[1], k_all.shape[1]
    if not (0 <= head < n_heads and 0 <= query < q_all.shape[0]):
        raise ValueError(f"head {head} / query {query} out of range ({n_heads} heads, "
                         f"{q_all.shape[0]} positions)")
    kv = head // (n_heads // n_kv)
    bias = None
    if site.name(layer, "hook_pos_bias") in arrays:
        b = a("hook_pos_bias")
        b = b[batch] if b.ndim == 4 else b  # [head, q_pos, k_pos]
        bias = b[head, query].astype(np.float64)
    scores = a("hook_attn_scores")[batch, head, query]
    return StepInputs(q=q_all[query, head].astype(np.float64),
                      K=k_all[:, kv].astype(np.float64),
                      V=a("hook_v")[batch][:, kv].astype(np.float64),
                      bias_row=bias, mask_row=np.isfinite(scores), kv_head=kv, rotated=rotated,
                      pattern_row=a("hook_pattern")[batch, head, query].astype(np.float64),
                      z_row=a("hook_z")[batch, query, head].astype(np.float64))


def step_check(softmax, z, inputs: StepInputs) -> tuple[float, float]:
    """(max |softmax − recorded pattern row|, max |z − recorded hook_z|)."""
    return (float(np.max(np.abs(np.asarray(softmax, dtype=np.float64) - inputs.pattern_row))),
            float(np.max(np.abs(np.asarray(z, dtype=np.float64) - inputs.z_row))))


def pick_from_points(points: Sequence[Mapping]) -> tuple[int, int] | None:
    """(layer, head) from a heads-grid click: the tile-centre marker's customdata."""
    for p in points or []:
        cd = p.get("customdata")
        if isinstance(cd, (list, tuple)) and len(cd) == 2:
            return int(cd[0]), int(cd[1])
    return None


# ---------------------------------------------------------------------------- head scores
TABLE_COLUMNS = ("layer", "head", "label", "prev_token", "first_token", "induction", "local",
                 "entropy", "antecedent", "antecedent_max", "labels")


def head_table(model, task, site: Site, *, n_examples: int = 64):
    """One row per (layer, head) of ``site``: previous-token, first-token, induction, local,
    entropy (and antecedent for coreference tasks) scores with the automatic label.

    Decoder / encoder models: ``tfviz.analysis.score_model`` (induction probe + task examples).
    Encoder-decoder: the self-attention patterns of ``n_examples`` validation examples through
    ``head_scores`` (cross-attention has no self-attention scores: ValueError)."""
    cfg = model.config
    if cfg.arch != "encoder-decoder":
        df = score_model(model, task, n_examples=n_examples)
    else:
        if not site.is_self:
            raise ValueError("head roles are scored on self-attention (q_pos and k_pos are the "
                             "same tokens); pick encoder or decoder self-attention")
        if task is None:
            raise ValueError("this model has no task to draw example inputs from")
        b = collate(task.examples("validation")[:n_examples], task.tokenizer.pad_id)
        names = [site.name(layer, "hook_pattern") for layer in range(cfg.n_layers)]
        rec = record(model, b.src, b.tokens, names=names)
        tokens = b.src if site.q_side == "src" else b.tokens
        df = head_scores(rec.stack_layers(site.name("{l}", "hook_pattern")), tokens,
                         causal=site.causal, window=cfg.window, global_tokens=cfg.global_tokens,
                         pad_id=cfg.pad_id)
        df.attrs["inputs"] = {"all": f"{len(b.tokens)} {task.name} validation examples"}
    cols = [c for c in TABLE_COLUMNS if c in df and not df[c].isna().all()]
    out = df[cols].copy()
    out.attrs = dict(df.attrs)
    return out


# ---------------------------------------------------------------------------- pronoun probe
def pronoun_positions(tokens: Sequence[str]) -> list[int]:
    return [i for i, t in enumerate(tokens) if str(t).strip().lower() in PRONOUNS]


def probe_candidates(tokens: Sequence[str], meta: Mapping | None = None,
                     nouns: Sequence[str] | None = None) -> dict[str, list[int]]:
    """Candidate antecedents -> every position that mentions them.

    With a coref example's ``meta``: its two nouns and their mentions. Otherwise the words of
    ``nouns`` (default: every noun of ``tfviz.tasks.coref``) found in the tokens, else the words
    that follow "the"."""
    if meta and meta.get("candidate_mentions"):
        return {str(tokens[m[0]]).strip(): [int(i) for i in m] for m in meta["candidate_mentions"]}
    if nouns is None:
        nouns = [n for ns, _, _ in CATEGORIES.values() for n in ns]
    words = [str(t).strip().lower() for t in tokens]
    found = [w for w in dict.fromkeys(words) if w in set(nouns)]
    if not found:
        found = list(dict.fromkeys(w for i, w in enumerate(words)
                                   if i and words[i - 1] == "the" and w.isalpha()))
    return {w: [i for i, x in enumerate(words) if x == w] for w in found}


def probe_summary(df, candidates: Sequence[str], top: int = 4, min_weight: float = 0.1,
                  ratio: float = 1.5) -> dict[str, list[tuple]]:
    """candidate -> [(layer, head, weight)] of the heads that clearly pick it, strongest first
    (at most ``top``): weight on it ≥ ``min_weight`` and ≥ ``ratio`` × the weight on every other
    candidate — "which head resolves 'it' to 'law'". A near-tie picks nobody."""
    names = list(candidates)
    out = {}
    for name in names:
        others = df[[n for n in names if n != name]].max(axis=1) if len(names) > 1 else 0.0
        rows = df[(df[name] >= min_weight) & (df[name] >= ratio * others)]
        rows = rows.sort_values(name, ascending=False).head(top)
        out[name] = [(int(r["layer"]), int(r["head"]), float(r[name])) for _, r in rows.iterrows()]
    return out
