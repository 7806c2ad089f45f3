"""Generate: a prompt extended one token at a time with the KV cache; where each new token's query
looked (recorded at every step), the sampling knobs (temperature, top-k), and the cache growing."""
import hashlib

import numpy as np
import pandas as pd
import streamlit as st

from tfviz import viz
from tfviz.analysis import explorer
from tfviz.analysis.cost import kv_cache_bytes
from tfviz.model import hook_name
from ui import cache
from ui.figures import show
from ui.inputs import max_chars, readable
from ui.picker import current_model
from ui.widgets import layer_head, or_stop

st.title("Generate")
st.caption("Step 0 reads the whole prompt; each later step feeds only the newest token, whose "
           "query attends over the cached keys/values of every earlier position.")
loaded = current_model(prefer="lm", needs="self_attention")  # a model trained to write, until the student picks another
cfg, tok, path = loaded.config, loaded.tokenizer, loaded.ref.path
if cfg.arch == "encoder":
    st.warning(f"**{loaded.ref.label}** is an encoder, so it cannot generate: it reads the whole "
               "input at once in both directions (no causal mask) and was trained to fill in "
               "masked tokens, not to predict the next one. Pick a decoder or encoder-decoder model.")
    st.stop()
if note := cache.generation_note(loaded):
    st.info(note, icon=":material/info:")

ss = st.session_state
# Texts per model, kept outside widget state (dropped while you are on another page) and handed
# back as value=; the widgets' keys name the model, so another model starts from its own example.
texts = ss.setdefault("_gen_texts", {})
if path not in texts:
    texts[path] = dict(zip(("prompt", "src"), cache.prompt_texts(loaded)))
# A widget's key reaches the browser (element id, CSS class): the model by a digest of its path,
# never the path (an upload's names the session and the server's folders; issue 40, S5-8).
mkey = hashlib.sha256(path.encode()).hexdigest()[:12]
with st.container(border=True):
    src = st.text_area("Source text (encoder input)", texts[path]["src"] or "", height=80,
                       key=f"gen_src:{mkey}", max_chars=max_chars(tok)) if cfg.arch == "encoder-decoder" else None
    prompt = st.text_input("Prompt", texts[path]["prompt"], key=f"gen_prompt:{mkey}",
                           help="[BOS] is added first if missing", max_chars=max_chars(tok))
    c = st.columns(5)
    n = c[0].slider("New tokens", 1, 64, 16, key="gen_n")
    temperature = c[1].slider("Temperature", 0.0, 2.0, 0.0, 0.05, key="gen_temp",
                              help="0 = always the most likely token (greedy)")
    top_k = c[2].number_input("Top-k (0 = off)", 0, cfg.vocab_size, 0, key="gen_top_k")
    seed = c[3].number_input("Seed", 0, 2**31 - 1, key="gen_seed")  # "New sample" sets it
    eos = c[4].checkbox("Stop at [EOS]", True, key="gen_eos")
    c[4].button("New sample", key="gen_resample", disabled=temperature == 0, icon=":material/casino:",
                on_click=lambda: ss.update(gen_seed=ss["gen_seed"] + 1), help="seed + 1")
prompt, src = readable(tok, prompt, "The prompt"), src and readable(tok, src, "The source")
texts[path].update(prompt=prompt, src=src)
gen = or_stop(lambda: cache.generation(loaded, prompt, src, n, temperature, top_k, seed, eos),
              "Cannot generate: {}", st.warning)

tokens = tok.tokens_of(gen.ids)
# [UNK]s the text produced (not an added [BOS] that is also the unk token, as GPT-2's
# <|endoftext|> is, nor a special literal typed on purpose)
unknown = len(explorer.unknown_spans(tok, prompt))
if unknown:
    st.warning(f"{unknown} prompt token(s) are not in this model's vocabulary and became [UNK].")
st.html(viz.generated_tokens_html(tokens, gen.n_prompt, gen.probs))
st.caption("Grey: prompt. Blue: generated, more opaque = the model gave it a higher probability "
           "(hover a token). " + ("Stopped at [EOS]." if gen.stopped_at_eos else ""))


def attention_view() -> None:
    """Layer / head (/ self or cross) selectors and where each step's query looked."""
    cols = st.columns(3)
    kind = cols.pop().radio("Attention", ["self", "cross"], horizontal=True, key="gen_kind") \
        if cfg.arch == "encoder-decoder" else "self"
    layer, h = layer_head(cfg, "gen", cols, average=True)
    head = "average" if h is None else h
    name = hook_name(layer, f"{'cross_attn' if kind == 'cross' else 'attn'}.hook_pattern",
                     "decoder" if cfg.arch == "encoder-decoder" else "")
    if kind == "self":
        fig = cache.figure(viz.generation_attention, gen.rows(name), tokens, head=h, q_positions=gen.q_positions,
                           title=f"Each new token's attention over the past — layer {layer}")
        data = lambda: viz.generation_frame(gen.rows(name), tokens, head=h, q_positions=gen.q_positions)  # noqa: E731
    else:
        fig = viz.cross_attention_alignment(
            gen.matrix(name, h), tok.tokens_of(gen.src_ids), [tokens[p] for p in gen.q_positions],
            title=f"Each step's cross-attention over the source (layer {layer}, "
                  f"{'mean over heads' if h is None else f'head {h}'})")
        fig.update_layout(height=max(fig.layout.height or 0, 360))  # room for the axis titles
        data = None
    show(fig, "gen_attention", data=data, filename=f"generation-{kind}-L{layer}-{head}")


attention_view()

positions = [p + 1 for p in gen.q_positions]
st.metric("KV cache now", f"{gen.cache_nbytes[-1]:,} bytes",
          help=f"{len(positions)} steps, {positions[-1]} cached positions, "
               f"{cfg.n_kv_heads} K/V head(s) per layer")
formula = [kv_cache_bytes(cfg.n_layers, cfg.n_kv_heads, cfg.d_head, p) for p in positions]
show(cache.figure(viz.kv_cache_growth, positions, gen.cache_nbytes, formula,
                  title=f"KV cache size ({cfg.n_layers} layers × {cfg.n_kv_heads} K/V heads × "
                        f"d_head {cfg.d_head}, float32)"), "gen_cache", filename="kv-cache")
with st.expander("Step by step: chosen token and the model's top alternatives"):
    st.dataframe(pd.DataFrame({
        "step": range(len(gen.probs)), "token": tokens[gen.n_prompt:],
        "p": np.round(gen.probs, 3),
        "top alternatives": [", ".join(f"{tok.display(i)} {p:.2f}" for i, p in t) for t in gen.top],
    }), hide_index=True, key="gen_steps")
