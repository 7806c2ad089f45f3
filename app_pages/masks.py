"""Masks: causal, padding, sliding window, global + local — the grid the model applies (from
tfviz.model.masks, never drawn by hand), its effect on the selected model's attention, and the
decoder's "no peeking" shown by editing a later token."""
import streamlit as st
import torch

from tfviz.analysis.masks_demo import (KINDS, MaskChoice, all_masks, blocked_mass, describe,
                                       edit_token, effective_mask, logit_change, pad_layout,
                                       pad_token, replacement_choices)
from tfviz.viz import head_heatmap, logit_change_bars, mask_grid, masks_side_by_side
from ui import cache, sinks
from ui.figures import show, side_by_side
from ui.inputs import model_input
from ui.picker import current_model
from ui.widgets import choice, forget_on_model_change, layer_head, or_stop, position_slider

MAX_TOKENS = 40

st.title("Masks")
st.caption("A mask decides which keys each query may look at (blue = allowed). Every grid below "
           "is built by the same function the model calls in its forward pass.")
lm = current_model(needs="self_attention")
cfg, tok = lm.config, lm.tokenizer
if tok is None:
    st.error("This checkpoint has no tokenizer, so text cannot be fed to it.")
    st.stop()
forget_on_model_change(lm, "mask", ("mask_stack", "mask_layer", "mask_head", "mask_edit_pos",
                                    "mask_edit_token"))
inp = model_input(lm, "mask", examples=False, cap=MAX_TOKENS,
                  cap_why=f"the grids show at most {MAX_TOKENS} tokens so that they stay readable")
if inp is None:
    st.stop()
encdec = cfg.arch == "encoder-decoder"
stack = st.radio("Attention of", ["encoder", "decoder"], horizontal=True, key="mask_stack") \
    if encdec else ""
causal = cfg.causal and stack != "encoder"
ids = inp.src_ids if stack == "encoder" else inp.ids
x = inp.ids  # the tokens "no peeking" edits: the decoder's, or the single stack's


def inputs(seq):
    """Model inputs with ``seq`` as the viewed stack's tokens."""
    return {"encoder": (seq, inp.ids), "decoder": (inp.src_ids, seq)}.get(stack, (seq,))


c = st.columns(4)
kind = c[0].selectbox("Mask", KINDS, key="mask_kind")
window = position_slider(c[1], "window w", 1, max(1, len(ids)), 3, "mask_window")
n_global = c[2].slider("global tokens g", 0, 4, 1, key="mask_global")
n_pad = c[3].slider("pad tokens", 1, 8, 3, key="mask_pads")
padded, is_pad = pad_layout(ids, n_pad, causal, pad_token(cfg, tok))
three = {k: v.numpy() for k, v in all_masks(len(ids), causal, window, n_global).items() if k != "padding"}
show(cache.figure(masks_side_by_side, three, tok.tokens_of(ids), title="Three masks on the input"),
     key="mask_overview")  # only padding is drawn on the padded input: a left-padded global +
show(cache.figure(masks_side_by_side,  # local grid would make the first [PAD] its global token
                  {"padding": all_masks(len(padded), causal, window, n_global, is_pad)["padding"].numpy()},
                  tok.tokens_of(padded), title=f"Padding: the input + {n_pad} pads"), key="mask_overview_pad")
st.caption(describe(causal))

padding = kind == "padding"
if padding and stack == "decoder" and cfg.pad_id is None:
    st.warning("This model has no pad id, so its decoder cannot mask padding.")
    st.stop()
seq, pads = (padded, is_pad) if padding else (ids, None)
tokens = tok.tokens_of(seq)
mask_choice = MaskChoice(kind, window, n_global, n_pad)
mask = effective_mask(mask_choice, len(seq), causal, pads).numpy()
w, g = mask_choice.applied_window, mask_choice.applied_global
kw = tuple(pads) if padding and stack != "decoder" else None  # the decoder finds pads by pad_id
masked = or_stop(lambda: cache.mask_patterns(lm, inputs(seq), kw, w, g, stack))
base = None if kind == "causal / full" or (padding and stack == "decoder") else or_stop(
    lambda: cache.mask_patterns(lm, inputs(seq), (False,) * len(seq) if padding else None, None, 0, stack))
layer, head = layer_head(cfg, "mask")
side_by_side((cache.figure(mask_grid, mask, tokens, title=f"{kind} mask"), "mask_grid"),
             (cache.figure(head_heatmap, masked[layer, head], tokens,
                           title=f"Layer {layer} head {head} under this mask"), "mask_pattern"))
st.metric("Largest attention weight on a blocked pair (all layers and heads)",
          f"{blocked_mass(masked, mask):g}")
if w is not None:
    st.info("This model was trained without a window: the same weights run with the new mask, "
            "so the pattern shows what the mask removes, not what a model trained with it would "
            "learn.")
if base is not None:
    show(cache.figure(head_heatmap, base[layer, head], tokens,
                      title=f"The same head without the {kind} mask"), key="mask_unmasked")

sinks.section(lm)  # StreamingLLM: the window over long text, with and without the first tokens

st.subheader("No peeking: edit a later token")
if len(x) < 2:
    st.info("Type a longer text: editing a later token needs at least two tokens.")
    st.stop()
pos = position_slider(st, "Edit the token at position p", 1, len(x) - 1, len(x) // 2, "mask_edit_pos")
vocab = min(tok.vocab_size, cfg.vocab_size)
options = replacement_choices(vocab, x)
new = choice(st, "Replace it with", options, "mask_edit_token", options[(options.index(x[pos]) + 1) % len(options)],
             format_func=lambda i: f"{tok.display(i)!r} (id {i})",
             help=None if len(options) == vocab else f"ids 0–999 and this text's own tokens, of the "
                                                     f"{vocab:,} in the vocabulary")
run = (lambda y: (inp.src_ids, y)) if encdec else (lambda y: (y,))
before = torch.from_numpy(cache.logits(lm, run(x)))  # shared: computed once per (model, text, edit)
after = torch.from_numpy(cache.logits(lm, run(edit_token(x, pos, new))))
delta = logit_change(before, after)
labels = tok.tokens_of(x)
labels[pos] = f"{labels[pos]}→{tok.display(new)}"
show(cache.figure(logit_change_bars, delta, labels, pos,
                  title=f"Max |Δ logit| per position after editing position {pos}"),
     key="mask_nopeek")
c = st.columns(2)
c[0].metric(f"before p (positions 0–{pos - 1})", f"{delta[:pos].max():g}")
c[1].metric(f"from p on (positions {pos}–{len(x) - 1})", f"{delta[pos:].max():g}")
st.caption("Two real forward passes. The output at position t predicts token t + 1 from tokens "
           "0..t only: the causal mask makes every earlier position blind to the edit — exactly 0, "
           "not just small." if cfg.causal else "An encoder has no causal mask: every position "
           "sees the edit, so every output moves.")
