"""Streamlit side of the Compare page: its computations cached per server (keyed on every compared
model's path and mtime, like ``ui.cache``), and the "train a pair" form's jobs. The numbers come
from ``tfviz.analysis.compare`` (and the bench's step time); nothing here computes them."""
from __future__ import annotations

import json

import streamlit as st

from tfviz.analysis import compare as cmp

from . import cache
from .figures import show
from .jobs import job_manager, my_jobs, trained_dir
from .models import load_model, locked
from .widgets import choice

PAIR_JOBS = "_cmp_pair_jobs"  # session state: the job ids of the pair this session started last
PAIR_FILE = "pair.json"  # the same ids in the session's folder: a reopened URL finds its pair again


def _keys(named: dict) -> tuple:
    return tuple((name, *lm.key) for name, lm in named.items())


def _models(named: dict) -> dict:
    return {name: lm.model for name, lm in named.items()}


def key(named: dict) -> tuple:
    """What identifies the compared models for the server's caches: each name, path and mtime."""
    return _keys(named)


@st.cache_resource(max_entries=16, show_spinner=False)
def _training(keys: tuple, _named: dict):
    hist = {name: lm.ckpt.history for name, lm in _named.items()}
    return cmp.curves_frame(hist), cmp.gradient_frames(hist)


def training(named: dict):
    """(``cmp.curves_frame``, ``cmp.gradient_frames``) of the models' histories, built once per
    server and shared read-only (0.1 s of pandas per visit before)."""
    return _training(_keys(named), named)


@st.cache_data(max_entries=16, show_spinner=False)
def _patterns(keys: tuple, ids: tuple, src: tuple | None, view: str | None, _named: dict):
    with locked(_named.values()):
        return cmp.patterns_on(_models(_named), list(ids), view, None if src is None else list(src))


def patterns(named: dict, ids, src=None, view: str | None = None) -> dict:
    """name -> [layer, head, q_pos, k_pos] of the ``view`` kind of attention on the one input
    (``cmp.patterns_on``; ``src``: its source, for encoder-decoders)."""
    return _patterns(_keys(named), tuple(ids), None if src is None else tuple(src), view, named)


@st.cache_data(max_entries=16, show_spinner="Scoring every head of every model…")
def _roles(keys: tuple, view: str | None, _named: dict, _task):
    with locked(_named.values()):
        return cmp.head_roles(_models(_named), _task, view)


def roles(named: dict, task, view: str | None = None):
    """``cmp.head_roles`` (ValueError saying why when an encoder-decoder's cannot be scored)."""
    return _roles(_keys(named), view, named, task)


def roles_panel(named: dict, task, view: str | None = None) -> None:
    """The head roles of the models side by side (their differences shaded), or the sentence
    saying why there are none for this kind of attention."""
    from tfviz import viz

    st.subheader("Head roles (orange: the models differ)")
    try:
        wide, long = roles(named, task, view)
    except ValueError as e:
        return st.info(f"No head roles here: {e}.")
    show(cache.figure_for((key(named), task is not None, view), viz.head_role_grid, wide, list(named)),
         "cmp_roles", data=long)
    st.dataframe(differs_style(wide), hide_index=True)


def input_model(named: dict):
    """The model whose input widgets give the one input: the first encoder-decoder when the set
    has one (its input carries a source; single-stack models read its target tokens), else the
    first model."""
    return next((lm for lm in named.values() if getattr(lm.config, "arch", None) == "encoder-decoder"),
                next(iter(named.values())))


VIEW_TITLES = {"cross-attention": "cross-attention (decoder → source)"}


def attention_view(named: dict) -> str | None:
    """The kind of attention the panels show (``cmp.attention_views``): None for single-stack
    models (each one's self-attention); for encoder-decoders, the "Attention" selector's pick; a
    set that mixes both gets decoder self-attention and the sentence saying why."""
    views, note = cmp.attention_views({n: lm.config for n, lm in named.items()})
    if note:
        st.info(note)
    if len(views) < 2:
        return views[0] if views else None
    return choice(st, "Attention", views, "cmp_view", format_func=lambda v: VIEW_TITLES.get(v, v))


def with_heads(named: dict) -> dict:
    """The models the attention panels can show, after a note for each one left out (a recurrent
    network has no heads: it is compared in the other panels)."""
    from .picker import missing_view

    out = {}
    for n, lm in named.items():
        if (why := missing_view(lm, "self_attention")) is None:
            out[n] = lm
        else:
            st.info(f"**{n}**: {why[0].upper()}{why[1:]}. It is left out of the attention and "
                    "head-role panels and compared in the others.")
    return out


@st.cache_data(max_entries=16, show_spinner="Loss and accuracy per position…")
def _positions(keys: tuple, ids: tuple, src: tuple | None, _named: dict, _task):
    batch = cmp.task_batch(_task) if _task is not None else cmp.next_token_batch(list(ids), src)
    with locked(_named.values()):
        return cmp.position_frame(_models(_named), batch)


def positions(named: dict, task, ids, src=None) -> "pd.DataFrame":  # noqa: F821
    """Per position on the shared task's validation examples, else on the one input (``src``: its
    source ids, for encoder-decoders)."""
    if task is not None:
        return _positions(_keys(named), (), None, named, task)
    return _positions(_keys(named), tuple(ids), None if src is None else tuple(src), named, None)


@st.cache_data(max_entries=16, show_spinner="Loss at each length…")
def _lengths(keys: tuple, lengths: tuple, _named: dict):
    with locked(_named.values()):
        return cmp.length_frame([(n, lm.ckpt) for n, lm in _named.items()], list(lengths),
                                n_tokens=2048)


def lengths(named: dict, lengths_) -> "pd.DataFrame":  # noqa: F821
    return _lengths(_keys(named), tuple(lengths_), named)


@st.cache_data(max_entries=16, show_spinner="Timing a training step of each model…")
def _cost(keys: tuple, ids: tuple, src: tuple | None, _named: dict):
    from tfviz.bench.measure import step_times

    df = cmp.cost_frame(_models(_named), pos=len(ids))
    batch = cmp.next_token_batch(list(ids), src)
    with locked(_named.values()):  # warm-up steps first, then the timed ones in turn (step_times)
        times = step_times([(lm.model, cmp.model_inputs(lm.model, batch), batch.targets)
                            for lm in _named.values()], repeats=3)
    df["step_ms"] = [1000 * t for t in times]
    return df


def cost(named: dict, ids, src=None) -> "pd.DataFrame":  # noqa: F821
    """Parameters, KV-cache bytes at the input's length, and a measured training step (forward +
    backward on the one input — with its source ``src`` for encoder-decoders —; after untimed
    warm-up steps of every model, the median of 3 taken in turn; this server's CPU/GPU under its
    current load: ``tfviz.bench.measure.step_times``)."""
    return _cost(_keys(named), tuple(ids), None if src is None else tuple(src), named)


# ------------------------------------------------------------------------------ train a pair
def start_pair(runs, task) -> list[str]:
    """Queue the pair's runs as this session's jobs (all or none) -> job ids."""
    from tfviz.runs.pairs import submit_pair

    from .session import client_id, session_id
    from .train_state import unique_name

    names, taken = [], set()
    for r in runs:
        n = unique_name(r.name)
        while n in taken:
            n = unique_name(f"{n}-b")
        taken.add(n)
        names.append(n)
    ids = submit_pair(job_manager(), runs, task, owner=session_id(), directory=trained_dir(),
                      names=names, client=client_id())
    st.session_state[PAIR_JOBS] = ids
    from tfviz.storage import atomic_write

    atomic_write(trained_dir().parent / PAIR_FILE, json.dumps({"jobs": ids}).encode())
    return ids


def _saved_pair() -> list[str]:
    """The pair's job ids kept in the session's folder ([] when none, or unreadable)."""
    from tfviz.storage import CheckpointError, read_json

    path = trained_dir().parent / PAIR_FILE
    if not path.is_file():
        return []
    try:
        ids = read_json(path, "the pair's record", max_bytes=4096, max_containers=4).get("jobs")
    except (CheckpointError, AttributeError):
        return []
    return [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else []


def pair_steps(task: str) -> int:
    """The pair's default Steps: the Train page's preset of the pair's task (100 steps left coref
    at 0.24 / 0.14 accuracy: a pair of untrained models). The box is one per task
    (``pair_steps_<task>``), so each task opens at its own preset and keeps what was typed."""
    from tfviz.train.presets import QUICK

    return min(QUICK[task].train.steps, PAIR_MAX_STEPS) if task in QUICK else 100


PAIR_MAX_STEPS = 2000  # the pair form's Steps box


def runs_allowed() -> int | None:
    """How many trainings a session may have running or queued on this server (None: any)."""
    return job_manager().per_owner


def pair_jobs() -> list:
    """The jobs of the pair this session started last (those still known to the server; none
    while the run store cannot be read: the Train page says why)."""
    from tfviz.runs.store import StoreUnavailable

    if PAIR_JOBS not in st.session_state:  # a new tab on this session's URL
        st.session_state[PAIR_JOBS] = _saved_pair()
    ids = set(st.session_state[PAIR_JOBS])
    if not ids:
        return []
    try:
        return [j for j in my_jobs() if j.id in ids]
    except StoreUnavailable:
        return []


def pair_checkpoints(jobs) -> list[str] | None:
    """The saved checkpoints of a finished pair, None while any run is still going."""
    snaps = [j.snapshot() for j in jobs]
    if not snaps or any(s.active for s in snaps):
        return None
    return [s.checkpoint for s in snaps if s.checkpoint]


OPEN = "cmp_open"  # the pair the "Compare them side by side" button asked for


def select(refs: dict, selected: str | None) -> None:
    """Set the Models widget's state ("cmp_models") before it is drawn: the pair a finished
    training asked for, else the defaults on the first visit; models no longer listed are dropped.
    (A widget's state is only set safely in a full run before the widget: the button sits in a
    fragment, so it leaves its request under OPEN.) More than ``cmp.MAX_MODELS`` (a crafted
    message: the widget itself allows no more) keeps the first ones and says so, instead of the
    widget's exception."""
    if (opened := st.session_state.pop(OPEN, None)) is not None:
        st.session_state["cmp_models"] = opened
    elif "cmp_models" not in st.session_state:
        st.session_state["cmp_models"] = default_models(refs, selected)
    chosen = st.session_state["cmp_models"]
    chosen = [p for p in dict.fromkeys(chosen if isinstance(chosen, (list, tuple)) else []) if p in refs]
    if len(chosen) > cmp.MAX_MODELS:
        st.warning(f"{len(chosen)} models were selected; Compare shows at most {cmp.MAX_MODELS} side by "
                   f"side, so it keeps the first {cmp.MAX_MODELS}.")
        chosen = chosen[:cmp.MAX_MODELS]
    st.session_state["cmp_models"] = chosen


def default_models(refs: dict, selected: str | None) -> list[str]:
    """The models the page opens with (``cmp.suggest``: the sidebar model's positional family or
    task, else the shipped pre/post-norm pair)."""
    cards = {p: c for p in refs if (c := cache.card(p)) is not None}
    return cmp.suggest(cards, selected)



def load_named(refs: dict, chosen) -> dict:
    """The chosen model paths loaded, keyed by their label without its "(...)" suffix; where two
    chosen models share that name (a shipped "lm" and a trained "lm"), by "name (source)"."""
    stems = [refs[p].label.rsplit(" (", 1)[0] for p in chosen]
    names = [f"{s} ({refs[p].source})" if stems.count(s) > 1 else s for s, p in zip(stems, chosen)]
    return {n: load_model(refs[p]) for n, p in zip(names, chosen)}


def differs_style(wide):
    """The head-role table with the rows where the models differ shaded orange."""
    return wide.style.apply(lambda r: ["background-color: #fde7c7" if r["differs"] else ""] * len(r),
                            axis=1)

def pair_progress() -> None:
    """The pair's live curves on one set of axes (a fragment: once a second while it trains), and
    once every run has ended, a button that opens them side by side."""
    from tfviz import viz

    polling = any(j.snapshot().active for j in pair_jobs())

    @st.fragment(run_every=1 if polling else None)
    def live():
        jobs = pair_jobs()
        if not jobs:
            return
        snaps = [j.snapshot() for j in jobs]
        if polling and not any(s.active for s in snaps):
            st.rerun(scope="app")  # done: one full run draws the button and stops the polling
        st.caption(" · ".join(f"**{s.name}**: {s.state} (step {s.step}/{s.total_steps})"
                              + (f" — {s.error}" if s.error else "") for s in snaps))
        df = cmp.curves_frame({s.name: s.history for s in snaps})
        if len(df):
            show(viz.compare_curves(df, title="The pair, live: same axes"), "pair_curves", data=df)
        done = pair_checkpoints(jobs)
        if done and st.button("Compare them side by side", key="pair_open", type="primary"):
            st.session_state[OPEN] = done[:cmp.MAX_MODELS]  # taken by select() before the widget
            st.rerun(scope="app")
    live()
