"""Masks: causal, padding, sliding window, global + local — the grid the model applies (from
tfviz.model.masks, never drawn by hand), its effect on the selected model's attention, and the
decoder's "no peeking" shown by editing a later token."""
import numpy as np
import streamlit as st
import torch

import tfviz
from tfviz.analysis.masks_demo import (KINDS, MaskChoice, all_masks, blocked_mass, edit_token,
                                       effective_mask, logit_change, pad_layout, windowed_model)
from tfviz.model import layer_template
from tfviz.viz import head_heatmap, logit_change_bars, mask_grid, masks_side_by_side
from ui.figures import show
from ui.models import current_model

MAX_TOKENS = 40


@st.cache_resource(max_entries=16, show_spinner=False)
def _probe(path: str, mtime: int, _ckpt):
    try:
        return _ckpt.shared_task().probe()
    except Exception:  # no task recorded, or it no longer builds: no default text
        return None


@st.cache_data(max_entries=32, show_spinner="Recording attention…")
def _patterns(path: str, mtime: int, inputs: tuple, pads: tuple | None, window, n_global: int,
              stack: str, _lm) -> np.ndarray:
    """[layer, head, q_pos, k_pos] of the chosen stack, under the chosen mask."""
    xs = [torch.tensor([list(x)]) for x in inputs]
    kw = {} if pads is None else {"padding_mask": torch.tensor([list(pads)])}
    template = layer_template("attn.hook_pattern", stack)
    names = [template.format(l=layer) for layer in range(_lm.config.n_layers)]
    if window is None:
        rec = _lm.record(*xs, names=names, **kw)
    else:  # a private copy: no lock needed
        rec = tfviz.record(windowed_model(_lm.model, window, n_global), *xs, names=names, **kw)
    return rec.stack_layers(template)[:, 0].numpy()


st.title("Masks")
st.caption("A mask decides which keys each query may look at (blue = allowed). Every grid below "
           "is built by the same function the model calls in its forward pass.")
lm = current_model()
cfg, tok = lm.config, lm.tokenizer
if tok is None:
    st.error("This checkpoint has no tokenizer, so text cannot be fed to it.")
    st.stop()
mtime = lm.ckpt.path.stat().st_mtime_ns if lm.ckpt.path.exists() else 0
probe = _probe(lm.ref.path, mtime, lm.ckpt)
encdec = cfg.arch == "encoder-decoder"
text = st.text_input("Text" + (" (encoder input)" if encdec else ""), probe.text if probe else "",
                     key="mask_text")
src = tok.encode(text).ids
if len(src) > MAX_TOKENS:
    st.warning(f"Only the first {MAX_TOKENS} tokens are used (the grids stay readable).")
    src = src[:MAX_TOKENS]
stack, dec = "", []
if encdec:
    stack = st.radio("Attention of", ["encoder", "decoder"], horizontal=True, key="mask_stack")
    tgt = st.text_input("Decoder input (after [BOS])", tok.decode(probe.tokens, skip_special=True) if probe else "",
                        key="mask_tgt")
    dec = [tok.bos_id] + tok.encode(tgt).ids[:MAX_TOKENS]
causal = cfg.causal and stack != "encoder"
ids = src if stack == "encoder" else dec if encdec else [tok.bos_id] * causal + src
if len(src) < 1 or len(ids) < 2:
    st.warning("Type a longer text: the page needs at least two tokens.")
    st.stop()


def inputs(x):
    """Model inputs with ``x`` as the viewed stack's tokens."""
    return {"encoder": (x, dec), "decoder": (src, x)}.get(stack, (x,))


c = st.columns(4)
kind = c[0].selectbox("Mask", KINDS, key="mask_kind")
window = c[1].slider("window w", 1, max(2, len(ids)), min(3, len(ids)), key="mask_window")
n_global = c[2].slider("global tokens g", 0, 4, 1, key="mask_global")
n_pad = c[3].slider("pad tokens", 1, 8, 3, key="mask_pads")
pad_id = cfg.pad_id if cfg.pad_id is not None else tok.pad_id
padded, is_pad = pad_layout(ids, n_pad, causal, pad_id)
show(masks_side_by_side(all_masks(len(padded), causal, window, n_global, is_pad),
                        tok.tokens_of(padded), title="All four masks (for the padded input)"),
     key="mask_overview")
st.caption("Sliding window: query i sees keys j with "
           + ("0 ≤ i − j ≤ w" if causal else "|i − j| ≤ w")
           + ". Global + local: the first g tokens see and are seen by all"
           + (" (still causally)" if causal else "") + ". Padding: pads are never looked at "
           + ("(a decoder is padded on the left: on the right its causal mask already hides them)."
              if causal else "(padded on the right)."))

padding = kind == "padding"
if padding and stack == "decoder" and cfg.pad_id is None:
    st.warning("This model has no pad id, so its decoder cannot mask padding.")
    st.stop()
seq, pads = (padded, is_pad) if padding else (ids, None)
tokens = tok.tokens_of(seq)
mask = effective_mask(MaskChoice(kind, window, n_global, n_pad), len(seq), causal, pads).numpy()
w = window if kind in ("sliding window", "global + local") else None
g = n_global if kind == "global + local" else 0
key = (lm.ref.path, mtime, tuple(map(tuple, inputs(seq))))
kw = tuple(pads) if padding and stack != "decoder" else None  # the decoder finds pads by pad_id
try:
    masked = _patterns(*key, kw, w, g, stack, lm)
    base = None if kind == "causal / full" or (padding and stack == "decoder") else \
        _patterns(*key, tuple([False] * len(seq)) if padding else None, None, 0, stack, lm)
except ValueError as e:
    st.error(str(e))
    st.stop()
c = st.columns(2)
layer = c[0].selectbox("layer", range(cfg.n_layers), key="mask_layer")
head = c[1].selectbox("head", range(cfg.n_heads), key="mask_head")
left, right = st.columns(2)
with left:
    show(mask_grid(mask, tokens, title=f"{kind} mask"), key="mask_grid")
with right:
    show(head_heatmap(masked[layer, head], tokens,
                      title=f"Layer {layer} head {head} under this mask"), key="mask_pattern")
st.metric("Largest attention weight on a blocked pair (all layers and heads)",
          f"{blocked_mass(masked, mask):g}")
if w is not None:
    st.info("This model was trained without a window: the same weights run with the new mask, "
            "so the pattern shows what the mask removes, not what a model trained with it would "
            "learn.")
if base is not None:
    show(head_heatmap(base[layer, head], tokens, title=f"The same head without the {kind} mask"),
         key="mask_unmasked")

st.subheader("No peeking: edit a later token")
x = dec if encdec else ids
if len(x) < 2:
    st.info("Type a longer decoder input to edit one of its tokens.")
    st.stop()
pos = st.slider("Edit the token at position p", 1, len(x) - 1, len(x) // 2, key="mask_edit_pos")
new = st.selectbox("Replace it with", list(range(tok.vocab_size)),
                   index=(x[pos] + 1) % tok.vocab_size, key="mask_edit_token",
                   format_func=lambda i: f"{tok.display(i)!r} (id {i})")
run = (lambda y: (src, y)) if encdec else (lambda y: (y,))
try:
    before = lm.forward(*[torch.tensor([v]) for v in run(x)])
    after = lm.forward(*[torch.tensor([v]) for v in run(edit_token(x, pos, new))])
except ValueError as e:
    st.error(str(e))
    st.stop()
delta = logit_change(before, after)
labels = tok.tokens_of(x)
labels[pos] = f"{labels[pos]}→{tok.display(new)}"
show(logit_change_bars(delta, labels, pos,
                       title=f"Max |Δ logit| per position after editing position {pos}"),
     key="mask_nopeek")
c = st.columns(2)
c[0].metric(f"before p (positions 0–{pos - 1})", f"{delta[:pos].max():g}")
c[1].metric(f"from p on (positions {pos}–{len(x) - 1})", f"{delta[pos:].max():g}")
if cfg.causal:
    st.caption("Two real forward passes. The output at position t predicts token t + 1 from tokens "
               "0..t only: the causal mask makes every earlier position blind to the edit — "
               "exactly 0, not just small.")
else:
    st.caption("An encoder has no causal mask: every position sees the edit, so every output "
               "moves.")
