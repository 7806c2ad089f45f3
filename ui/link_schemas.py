"""Every page's settings in a link (issue 32): the one list, read and written by ``ui.links``.
Each page is a tuple of ``Setting``s — the name in the URL, the session-state key of the page's
widget, its type and allowed values — or, for the Lesson, a function of the link's params (its
settings depend on its step). app.py imports this module once; to give a page a new setting in
its links, add it here (tests/test_links.py opens every page from a link).
"""
from __future__ import annotations

from .links import SCHEMAS, Setting


ATTENTION_TABS = ("Heatmap", "All heads", "Lines", "Step-through", "Head roles", "Pronoun probe", "Effects")


def _probe_query_given() -> None:
    """A link's pronoun for the Pronoun probe (``pquery``) belongs to the linked sentence: forget
    which sentence the box last followed, so it keeps the linked position (``widgets.query_picker``)."""
    import streamlit as st

    st.session_state.pop("_probe_query_follows", None)


def _input(prefix: str, examples: bool = True) -> tuple[Setting, ...]:
    """The text a model reads (``ui.inputs``): task example or typed text, and the typed text."""
    out = (Setting("text", f"{prefix}_text"),
           Setting("src", f"{prefix}_src"), Setting("tgt", f"{prefix}_tgt"))
    if examples:
        out = (Setting("input", f"{prefix}_source", values={"example": "Task example", "text": "Type text"}),
               Setting("example", f"{prefix}_example", int, lo=0, hi=10_000)) + out
    return out


def _trainable_tasks() -> tuple[str, ...]:
    """The tasks a Train link may name (those with a preset): any other value — a typo, "nan",
    an empty one, a path — falls back to the form's task with a note (issue 40, S5-6)."""
    from tfviz.tasks import TASKS
    from tfviz.train.presets import QUICK

    return tuple(t for t in TASKS if t in QUICK)


def _train_preset() -> None:
    from .train_state import apply_preset

    apply_preset()


def _lesson(params):
    """The lesson's settings: the step, and that step's model and controls (``ui.lesson``)."""
    from .lesson import url_settings

    return url_settings(params)


SCHEMAS.update({
    "home": (),
    "lesson": _lesson,
    "why": (Setting("corpus", "why_corpus", choices=("the built-in corpus", "your text")),
            Setting("a", "why_order_a"), Setting("b", "why_order_b"),
            Setting("bn_model", "why_bn_model", choices=("gru-attention", "transformer")),
            Setting("bn_len", "why_bn_len", int, lo=2, hi=16),
            Setting("layers_text", "why_layers_text")),
    "findings": (Setting("finding", "finding", choices=("The \"it\" heads", "Induction heads",
                                                        "Positional extrapolation", "Cross-attention",
                                                        "Compare: one setting apart", "All models")),
                 Setting("sentence", "find_sentence", int, choices=(1, 2)),
                 Setting("pronoun", "find_position", choices=("query", "pronoun")),
                 Setting("condition", "find_ind_cond"),
                 Setting("show", "find_ind_value", choices=("loss_repeat", "accuracy_repeat")),
                 Setting("score", "find_ind_score", choices=("induction", "prev_token")),
                 Setting("index", "find_tr_index", int, lo=0, hi=100_000),
                 Setting("layer", "find_tr_layer", int, lo=0, hi=1000),
                 Setting("head", "find_tr_head", int, lo=-1, hi=1000)),
    "tokens": (Setting("text", "tok_text"),
               Setting("corpus", "tok_corpus_src", choices=("built-in corpus", "my own text")),
               Setting("bpe", "tok_bpe_vocab", int, lo=263, hi=2000),
               Setting("token", "tok_nn_token", int, lo=0, hi=10_000_000),
               Setting("k", "tok_nn_k", int, lo=1, hi=10)),
    "train": (Setting("task", "train_task", choices=_trainable_tasks(), then=_train_preset),),
    "attention": (*_input("att"), Setting("site", "att_site"),
                  Setting("layer", "att_layer", int, lo=0, hi=1000), Setting("head", "att_head", int, lo=0, hi=1000),
                  Setting("tab", "att_tab", choices=ATTENTION_TABS), Setting("query", "att_query", int, lo=-1, hi=100_000),
                  Setting("probe", "probe_source"), Setting("pquery", "probe_query", int, lo=0, hi=100_000,
                                                            then=_probe_query_given),
                  Setting("view", "eff_view")),
    "positional": (Setting("section", "pos_section", choices=("Sinusoidal", "Learned", "RoPE", "ALiBi", "T5")),
                   Setting("stack", "pos_stack", choices=("encoder", "decoder")),
                   Setting("d", "pos_sin_d", int, lo=8, hi=512), Setting("n", "pos_sin_n", int, lo=8, hi=256),
                   Setting("rope_n", "pos_rope_n", int, lo=8, hi=128),
                   Setting("pair", "pos_rope_pair", int, lo=0, hi=4096),
                   Setting("layer", "pos_rope_layer", int, lo=0, hi=1000),
                   Setting("head", "pos_rope_head", int, lo=0, hi=1000),
                   Setting("text", "pos_rope_text"),
                   Setting("m", "pos_rope_m", int, lo=0, hi=100_000),
                   Setting("kpos", "pos_rope_kpos", int, lo=0, hi=100_000),
                   Setting("bias_n", "pos_bias_n", int, lo=4, hi=64)),
    "compare": (Setting("tab", "cmp_tab", choices=("Side by side", "Train a pair")),
                Setting("models", "cmp_models", "models"),
                Setting("layer", "cmp_layer", int, lo=0, hi=1000), Setting("head", "cmp_head", int, lo=0, hi=1000),
                Setting("task", "pair_task"), Setting("setting", "pair_setting"),
                Setting("steps", "pair_steps", int, lo=10, hi=2000)),
    "masks": (*_input("mask", examples=False),
              Setting("stack", "mask_stack", choices=("encoder", "decoder")),
              Setting("kind", "mask_kind", choices=("causal / full", "padding", "sliding window", "global + local")),
              Setting("window", "mask_window", int, lo=1, hi=100_000),
              Setting("global", "mask_global", int, lo=0, hi=4), Setting("pads", "mask_pads", int, lo=1, hi=8),
              Setting("layer", "mask_layer", int, lo=0, hi=1000), Setting("head", "mask_head", int, lo=0, hi=1000),
              Setting("edit", "mask_edit_pos", int, lo=1, hi=100_000),
              Setting("sinks", "sink_live", bool, default=False),  # the attention-sink section, measured live
              Setting("sink_window", "sink_window", int, lo=1, hi=100_000)),
    "cost": (Setting("max_n", "cost_max_n", int, choices=tuple(2 ** i for i in range(8, 18))),
             Setting("window", "cost_window", int, choices=(16, 32, 64, 128, 256)),
             Setting("pass", "cost_pass", choices=("fwd", "fwd+bwd")),
             Setting("repeats", "cost_repeats", int, lo=1, hi=5),
             Setting("threads", "cost_threads", int, lo=1, hi=1024)),
    "generate": (Setting("n", "gen_n", int, lo=1, hi=64), Setting("temperature", "gen_temp", float, lo=0, hi=2),
                 Setting("top_k", "gen_top_k", int, lo=0, hi=10_000_000),
                 Setting("seed", "gen_seed", int, lo=0, hi=2 ** 31 - 1), Setting("eos", "gen_eos", bool),
                 Setting("kind", "gen_kind", choices=("self", "cross")),
                 Setting("layer", "gen_layer", int, lo=0, hi=1000), Setting("head", "gen_head")),
})
