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
from dataclasses import dataclass, field

import numpy as np

from ..model.hooks import hook_name, parse_hook_name, stack_layers
from ..recording import record
from ..tasks.base import collate
from ..tasks.coref import CATEGORIES
from ..viz.step_through import step_through_output, step_through_table
from .heads import LABELS, head_scores, induction_probe, score_model

ATTN_HOOKS = ("hook_q", "hook_k", "hook_v", "hook_rot_q", "hook_rot_k", "hook_pos_bias",
              "hook_attn_scores", "hook_pattern", "hook_z")
PRONOUNS = ("it", "its", "they", "their")
READABLE_MAX = 128  # longest input the explorer shows: beyond it labels and cells get unreadable
GRID_CSV_CELLS = 120_000  # larger all-heads grids: the CSV holds the selected head only


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

    def patterns(self, model, *inputs):
        """Every layer's attention pattern of this site on ``inputs`` (the model's forward
        arguments: tokens, or src and tokens): [layer, batch, head, q_pos, k_pos], recorded."""
        names = [self.name(layer, "hook_pattern") for layer in range(model.config.n_layers)]
        return record(model, *inputs, names=names).stack_layers(self.name("{l}", "hook_pattern"))


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


def template_layout(tokenizer) -> tuple[list, list]:
    """(prefix, suffix) the tokenizer's own template puts around a text — [CLS] … [SEP] for
    BERT, <s> … for Llama, nothing for GPT-2 — for a model with no task examples to read the
    layout from (``layout_of``)."""
    return layout_of(tokenizer.encode("a", template=True).ids, tokenizer.special_ids,
                     tokenizer.pad_id)


def length_limit(config, cap: int = READABLE_MAX) -> tuple[int, str]:
    """(longest input, why): the positional scheme's limit (learned positions stop at max_len);
    every input stops at ``cap``."""
    limit = config.max_positions
    if limit is not None and limit < cap:
        return limit, config.scheme.length_limit(config)
    return cap, f"the explorer shows at most {cap} tokens so that labels stay readable"


def unknown_spans(tokenizer, text: str, enc=None) -> list[str]:
    """The pieces of ``text`` the tokenizer read as its unk token, in order (a typed special
    literal is not one: GPT-2's "<|endoftext|>" is its unk token too)."""
    enc = tokenizer.encode(text) if enc is None else enc
    return [text[s:e] for i, (s, e) in zip(enc.ids, enc.offsets)
            if i == tokenizer.unk_id and e > s and text[s:e] != tokenizer.display(i)]


def prepare_text(tokenizer, text: str, prefix: Sequence[int] = (), suffix: Sequence[int] = (),
                 limit: int = READABLE_MAX) -> Prepared:
    """Tokenize ``text`` with the model's tokenizer, wrap it in ``prefix``/``suffix`` and cut it
    to ``limit`` tokens (the suffix is kept). Raises ValueError on empty text."""
    if not text or not text.strip():
        raise ValueError("the text is empty: type a sentence (or use a task example)")
    enc = tokenizer.encode(text)
    unknown = list(dict.fromkeys(unknown_spans(tokenizer, text, enc)))
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


@dataclass
class ModelInput:
    """One input a page shows: token ids (decoder / single stack) and, for an encoder-decoder,
    the source ids; their display tokens; and the task example's meta when it came from one."""

    ids: list[int]
    tokens: list[str]
    src_ids: list[int] | None = None
    src_tokens: list[str] | None = None
    meta: dict = field(default_factory=dict)

    @property
    def key(self) -> tuple:
        """The model's inputs as a hashable tuple: (ids,) or (src ids, ids)."""
        return (tuple(self.ids),) if self.src_ids is None else (tuple(self.src_ids), tuple(self.ids))

    def side(self, name: str) -> list[str]:
        return self.src_tokens if name == "src" else self.tokens

    @property
    def query(self) -> int:
        """The position worth stepping through by default: a coref example's pronoun query,
        else the last token."""
        q = self.meta.get("query_index")
        return int(q) if isinstance(q, int) and q < len(self.ids) else len(self.ids) - 1

    @property
    def alignment(self) -> list[tuple[int, int]] | None:
        """(target query pos, source pos) pairs of a translate example (meta "alignment")."""
        pairs = self.meta.get("alignment")
        return None if not pairs or self.src_ids is None else [(int(q), int(s)) for s, q in pairs]


def example_choices(task, n: int = 200) -> list[tuple[str, object]]:
    """(label, Example) pairs to pick from: a coref task's mission sentences first, then the
    first ``n`` validation examples."""
    if task is None:
        return []
    out = [(f"mission sentence {i + 1}: {e.text}", e)
           for i, e in enumerate(task.mission_sentences())] if hasattr(task, "mission_sentences") else []
    return out + [(f"validation #{i}: {e.text}", e)
                  for i, e in enumerate(task.examples("validation")[:n])]


def default_texts(task, tokenizer, config) -> tuple[str, str]:
    """(text, source text) a model reads by default: an induction probe (a random sequence
    repeated) for induction models, else the task's first example (coref: mission sentence 1)."""
    if task is not None and task.name == "induction" and tokenizer is not None:
        half = max(1, min(16, (config.max_len - 1) // 2))
        ids = induction_probe(min(config.vocab_size, tokenizer.vocab_size), half, batch=1)[0, 1:]
        text = probe_text(tokenizer, ids.tolist())
        if text:
            return text, ""
    examples = example_choices(task, 1)
    if examples and tokenizer is not None:
        e = examples[0][1]
        if e.src is not None:
            return e.meta.get("target") or tokenizer.decode(e.tokens, skip_special=True), e.text
        return e.text, ""
    return "the cat sat on the mat .", "the cat sat on the mat ."


# ---------------------------------------------------------------------------- slicing
def layer_stack(arrays: Mapping[str, np.ndarray], site: Site, hook: str = "hook_pattern",
                batch: int = 0) -> np.ndarray:
    """[layer, head, q_pos, k_pos] of one site (``hook_pattern`` or ``hook_attn_scores``)."""
    try:
        return stack_layers(arrays, site.name("{l}", hook))[:, batch]
    except KeyError:
        raise ValueError(f"nothing recorded for {site.label} ({site.name(0, hook)})") from None



def grid_csv(stack: np.ndarray, selected: np.ndarray) -> tuple[np.ndarray, str]:
    """What the all-heads grid's CSV holds: every head of ``stack`` [layer, head, q, k], or beyond
    ``GRID_CSV_CELLS`` cells only the ``selected`` head [q, k]; and a sentence saying so ("" when
    everything fits)."""
    if stack.size <= GRID_CSV_CELLS:
        return stack, ""
    return selected, " The CSV holds the selected head; every head is in the NPZ download at the bottom."


def kv_head(head: int, n_heads: int, n_kv_heads: int) -> int:
    """The key/value head query head ``head`` reads: GQA / MQA share each kv head between
    n_heads / n_kv_heads consecutive query heads, as the model does."""
    return head // (n_heads // n_kv_heads)


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
    kv = kv_head(head, n_heads, n_kv)
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


STEP_FORMULA = (r"z_i=\sum_j \mathrm{softmax}_j\Big(\mathrm{mask}_j\big(\tfrac{q_i\cdot k_j}"
                r"{\sqrt{d_k}}+b_{ij}\big)\Big)\,v_j \qquad d_k=D_K")  # LaTeX; D_K: the value
STEP_TOLERANCE = 1e-4


def step_formula(inputs: StepInputs) -> str:
    """``STEP_FORMULA`` with this head's d_k written in."""
    return STEP_FORMULA.replace("D_K", str(len(inputs.q)))


def step_check(softmax, z, inputs: StepInputs) -> tuple[float, float]:
    """(max |softmax − recorded pattern row|, max |z − recorded hook_z|)."""
    return (float(np.max(np.abs(np.asarray(softmax, dtype=np.float64) - inputs.pattern_row))),
            float(np.max(np.abs(np.asarray(z, dtype=np.float64) - inputs.z_row))))


def step_verdict(softmax, z, inputs: StepInputs) -> tuple[bool, str]:
    """(whether the step-through reproduces the recording, the sentence saying so)."""
    d_soft, d_z = step_check(softmax, z, inputs)
    ok = max(d_soft, d_z) < STEP_TOLERANCE
    return ok, (f"{'✓' if ok else '✗'} softmax = recorded hook_pattern row (max |Δ| = {d_soft:.1e}); "
                f"z = Σ softmax·v = recorded hook_z (max |Δ| = {d_z:.1e})")


def step_table(inputs: StepInputs, k_tokens: Sequence[str], query: int):
    """The formula stepped through for one query (``viz.step_through_table``: one row per key)
    and whether it reproduces the recording -> (table, ok, the sentence saying so)."""
    table = step_through_table(inputs.q, inputs.K, k_tokens, query, bias_row=inputs.bias_row,
                               mask_row=inputs.mask_row)
    return (table, *step_verdict(table["softmax"], step_through_output(table, inputs.V), inputs))


def step_sentence(table, inputs: StepInputs, k_tokens: Sequence[str]) -> str:
    """One line following the key with the largest weight through the formula (markdown)."""
    j = int(np.argmax(table["softmax"]))
    r, d = table.iloc[j], len(inputs.q)
    bias = "" if inputs.bias_row is None else f" → + bias {inputs.bias_row[j]:.3f} = {r['+bias']:.3f}"
    return (f"Largest weight: key `{k_tokens[j]}` (pos {j}): q·k = {r['q·k']:.3f} → ÷√{d} = "
            f"{r['q·k/√d']:.3f}{bias} → softmax **{r['softmax']:.3f}** · "
            f"{int((~inputs.mask_row).sum())} of {len(k_tokens)} keys masked (−∞)")


def step_notes(inputs: StepInputs, config, head: int) -> str:
    """What the step-through's vectors are (rotated, biased, shared kv head), "" when plain."""
    notes = ["q and k are the RoPE-rotated vectors (hook_rot_q, hook_rot_k)" if inputs.rotated else "",
             f"bias = row of hook_pos_bias ({config.pos})" if inputs.bias_row is not None else "",
             f"query head {head} reads kv head {inputs.kv_head} (n_heads {config.n_heads}, "
             f"n_kv_heads {config.n_kv_heads})" if config.n_kv_heads != config.n_heads else ""]
    return " · ".join(n for n in notes if n)


def pick_from_points(points: Sequence[Mapping]) -> tuple[int, int] | None:
    """(layer, head) from a heads-grid click: the tile-centre marker's customdata."""
    for p in points or []:
        cd = p.get("customdata")
        if isinstance(cd, (list, tuple)) and len(cd) == 2:
            return int(cd[0]), int(cd[1])
    return None


# ---------------------------------------------------------------------------- head scores
TABLE_COLUMNS = ("layer", "head", "label", "prev_token", "first_token", "induction", "local",
                 "entropy", "antecedent", "antecedent_max", "attribute")  # one label column


def head_table(model, task, site: Site, *, n_examples: int = 64, tokenizer=None,
               text_ids: Sequence[int] | None = None):
    """One row per (layer, head) of ``site``: previous-token, first-token, induction, local,
    entropy (and antecedent for coreference tasks) scores with the automatic label.

    Decoder / encoder models: ``tfviz.analysis.score_model`` (induction probe + task examples;
    a model without a task — imported — is scored on ``text_ids``, the user's text, with the
    probe built from ``tokenizer``'s bos and special ids).
    Encoder-decoder: the self-attention patterns of ``n_examples`` validation examples through
    ``head_scores`` (cross-attention has no self-attention scores: ValueError)."""
    cfg = model.config
    if cfg.arch != "encoder-decoder":
        if task is None and not text_ids:
            raise ValueError("head roles are scored on the task's examples, and this model has no "
                             "task: type a text above (at least two tokens) to score its heads on it")
        df = score_model(model, task, n_examples=n_examples, tokenizer=tokenizer,
                         texts=None if task is not None else [list(text_ids)])
    else:
        if not site.is_self:
            raise ValueError("head roles are scored on self-attention (q_pos and k_pos are the "
                             "same tokens); pick encoder or decoder self-attention")
        if task is None:
            raise ValueError("this model has no task to draw example inputs from")
        b = collate(task.examples("validation")[:n_examples], task.tokenizer.pad_id)
        tokens = b.src if site.q_side == "src" else b.tokens
        df = head_scores(site.patterns(model, b.src, b.tokens), tokens,
                         causal=site.causal, window=cfg.window, global_tokens=cfg.global_tokens,
                         pad_id=cfg.pad_id)
        df.attrs["inputs"] = {"all": f"{len(b.tokens)} {task.name} validation examples"}
    cols = [c for c in TABLE_COLUMNS if c in df and not df[c].isna().all()]
    out = df[cols].copy()
    out.attrs = dict(df.attrs)
    return out


def scored_on(table) -> str:
    """The inputs ``head_table`` scored its heads on, as one line."""
    return "; ".join(sorted(set(table.attrs.get("inputs", {}).values())))


def role_line(table, layer: int, head: int) -> str:
    """"**Layer 1, head 2: induction** — what that label means" for one row of ``head_table``."""
    label = role_of(table, layer, head)
    return "" if label is None else f"**Layer {layer}, head {head}: {label}** — {LABELS.get(label, '')}"


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


def probe_queries(tokens: Sequence[str], meta: Mapping | None = None) -> list[int]:
    """Positions of "it"/"its" in ``tokens`` and a coref example's query, sorted."""
    q = int((meta or {}).get("query_index", -1))
    return sorted(set(pronoun_positions(tokens)) | ({q} if q >= 0 else set()))


def probe_default(queries: Sequence[int], meta: Mapping | None = None) -> int:
    """The pronoun the probe opens on: the example's own query (a coref example, a mission
    sentence) when it is one of ``queries``, else the last pronoun."""
    q = (meta or {}).get("query_index")
    return int(q) if isinstance(q, int) and q in queries else queries[-1]


def probe_unavailable(task_name: str | None, task) -> str | None:
    """Why the pronoun probe cannot run on a model of this task, or None when it can."""
    if task_name not in ("coref", "agreement") or not hasattr(task, "mission_sentences"):
        return ("The pronoun probe is for coreference models (task “coref” or “agreement”): pick "
                "one in the sidebar, e.g. one trained on the Train page with either task.")
    return None


def probe_sentences(task, current: ModelInput, current_label: str) -> dict[str, tuple]:
    """label -> (ids, tokens, meta, text) of the probe's sentences: a coref task's mission
    sentences, then ``current`` (the page's own input; text "")."""
    out = {f"Mission sentence {i + 1}": (list(e.tokens), task.tokenizer.tokens_of(e.tokens), e.meta,
                                         e.text)
           for i, e in enumerate(task.mission_sentences())}
    out[current_label] = (current.ids, current.tokens, current.meta, "")
    return out


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


def role_of(table, layer: int, head: int) -> str | None:
    """The label ``head_table`` gives (layer, head), or None."""
    row = table[(table["layer"] == layer) & (table["head"] == head)]
    return str(row["label"].iloc[0]) if len(row) else None


def with_roles(probe, table):
    """The pronoun probe's rows with each head's role from ``head_table`` (column "role", after
    "head"): the probe and the head-roles table speak of the same heads in the same words."""
    out = probe.copy()
    out.insert(2, "role", [role_of(table, l, h) for l, h in zip(out["layer"], out["head"])])
    return out


def probe_lines(df, candidates: Sequence[str], pronoun: str) -> list[str]:
    """One markdown line per candidate naming the heads that clearly send ``pronoun`` to it
    (``probe_summary``) with their weight and, when ``df`` has a "role" column, their role:
    "Heads sending `its` → **'law'**: L1·H1 (0.99, antecedent)"."""
    out = []
    for name, heads in probe_summary(df, list(candidates)).items():
        role = {} if "role" not in df else \
            {(int(r["layer"]), int(r["head"])): f", {r['role']}" for _, r in df.iterrows()}
        who = ", ".join(f"L{l}·H{h} ({w:.2f}{role.get((l, h), '')})" for l, h, w in heads) or \
            "no head (none puts ≥ 0.1 and 1.5× the other candidates' weight on it)"
        out.append(f"Heads sending `{pronoun}` → **'{name}'**: {who}")
    return out
