"""The sidebar model picker every page that shows a model calls once (``current_model``).

``st.session_state["model_path"]`` is the selection; any page may set it (e.g. "open the model I
just trained"), and the picker shows it on the next run.
"""
from __future__ import annotations

import re
from pathlib import Path

import streamlit as st

from .jobs import housekeeping
from .models import DEFAULTED, LoadedModel, available_models, load_model, model_id, unopenable_models
from .export import panel as export_panel
from .teacher import teacher_panel
from .uploads import upload_box


def _from_url(refs) -> None:
    """A fresh session (a reload) opens on the model its URL names, as if picked again."""
    from .session import URL_MODEL

    ss, wanted = st.session_state, st.query_params.get("model")
    if "model_path" in ss or not wanted:
        return
    found = next((r for r in refs if model_id(r) == wanted), None)
    if found is not None:
        ss["model_path"], ss[URL_MODEL] = found.path, wanted


def _to_url(ref) -> None:
    """Keep a picked model in the URL (``ui.session`` writes it back on every run); a model the
    picker chose itself is not a pick, and is not kept."""
    from .session import URL_MODEL

    from .links import wrote

    if st.session_state.get(DEFAULTED) == ref.path:
        st.session_state.pop(URL_MODEL, None)
        st.query_params.pop("model", None)
        wrote("model", None)
    elif st.query_params.get("model") != model_id(ref) or st.session_state.get(URL_MODEL) != model_id(ref):
        st.session_state[URL_MODEL] = st.query_params["model"] = model_id(ref)
        wrote("model", model_id(ref))


def _picked() -> None:
    choose(st.session_state["model_select"])


def choose(path: str) -> None:
    """Select the model at ``path`` as if picked in the box (a callback: before the next run)."""
    st.session_state["model_path"] = path
    st.session_state.pop(DEFAULTED, None)  # a choice, from now on kept on every page


def _default(refs, prefer: str | None) -> str:
    """The shipped model named ``prefer`` (e.g. "lm" where a model must generate), else the first."""
    named = [r.path for r in refs if r.source == "shipped" and Path(r.path).stem == prefer]
    return named[0] if named else refs[0].path


def model_picker(sidebar: bool = True, prefer: str | None = None) -> LoadedModel | None:
    """The shared model selector. Returns the chosen, loaded model, or None (with a message).
    Until somebody picks a model (here, by an upload, or a page setting "model_path"), the
    picker's own choice is ``prefer`` when it is shipped, else the first model listed."""
    where = st.sidebar if sidebar else st
    housekeeping()
    upload_box(where)
    refs = available_models()
    if not refs:
        where.info("No models yet: train one on the **Train** page or upload a checkpoint.")
        return None
    paths = [r.path for r in refs]
    ss = st.session_state
    _from_url(refs)
    current = ss.get("model_path")
    if current is not None and current not in paths:
        where.warning("The model you had selected is gone; showing another one.")
        current = None
    if current is None or (prefer and current == ss.get(DEFAULTED)):  # nobody chose it
        current = ss[DEFAULTED] = _default(refs, prefer)
    # Every run, not only when it differs: a widget's id includes the page, so on another page the
    # box is a new widget that would open on its first option (and "model_path" followed it).
    st.session_state["model_select"] = current
    # on_change: a pick in this box becomes "model_path" before the next run's sync above, which
    # would otherwise put the previous model back into the box (the pick never took effect)
    choice = where.selectbox("Model", paths, format_func=lambda p: refs[paths.index(p)].label,
                             key="model_select", on_change=_picked, help=LOCAL_HELP)
    local_notes(where)
    st.session_state["model_path"] = choice
    ref = refs[paths.index(choice)]
    _to_url(ref)
    try:
        loaded = load_model(ref)
    except ValueError as e:
        where.error(f"Could not load {ref.label}: {e}")
        return None
    teacher_panel(where, ref)
    export_panel(loaded, "sidebar_export", where=where, on_open=choose)  # as a Hugging Face folder
    return loaded


LOCAL_HELP = ("*local*: a Hugging Face model folder (GPT-2, BERT, Llama, Mistral, Qwen2) under "
              "models/ on the server, or in its Hugging Face cache — opened offline, never "
              "downloaded.")


def local_notes(where) -> None:
    """The local folders that cannot open, each with its reason (they are not in the list)."""
    bad = unopenable_models()
    if bad:
        with where.expander(f"{len(bad)} local model folder{'s' if len(bad) > 1 else ''} cannot open"):
            st.markdown("\n".join(f"- **{_plain(name)}**: {_plain(reason)}" for name, reason in bad))


def _plain(text: str) -> str:
    """``text`` shown as it is in markdown (a folder's name or a value from its files may hold
    ``*``, ``$`` (LaTeX), ``[`` ... ``]``, ``<``): each such character escaped."""
    return re.sub(r"([\\`*_{}\[\]()<>#+!|~$])", r"\\\1", text)


def current_model(required: bool = True, prefer: str | None = None,
                  needs: str | None = None) -> LoadedModel | None:
    """Render the sidebar picker and return the picked model. With ``required``, a page without a
    model shows a hint and stops there; ``prefer``: the shipped model this page opens on while
    nobody has picked one (``model_picker``). ``needs``: a view the page shows
    (``tfviz.model.families.VIEWS``, e.g. "self_attention"); a model that lacks it (a recurrent
    network has no heads) is explained in one sentence, then the page stops (``required``) or goes
    on without a model. The page works however it was reached (app.py's navigation, or a
    bookmarked URL)."""
    loaded = model_picker(prefer=prefer)
    if loaded is not None and needs is not None and (why := missing_view(loaded, needs)):
        st.info(f"{why[0].upper()}{why[1:]}. This page needs a model that has it: pick a "
                "transformer in the sidebar. (A recurrent run's curves and accuracy are on the "
                "**Train** page; the **Why attention** page compares recurrent networks with "
                "transformers.)")
        if required:
            st.stop()
        return None
    if loaded is None and required:
        st.info("Pick a model in the sidebar (or train one on the **Train** page) to see this page.")
        st.stop()
    return loaded


def missing_view(loaded: LoadedModel, view: str) -> str | None:
    """Why ``view`` does not apply to the loaded model (``tfviz.model.families.lacks``), or None."""
    from tfviz.model.families import lacks

    try:
        return lacks(loaded.config, view)
    except ValueError:  # not a tfviz config (an imported model): the page checks what it needs
        return None
