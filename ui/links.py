"""Links that reproduce a view (issue 32), in one place: each page's settings as a schema — the
name in the URL, the session-state key of its widget, its type and allowed values — read from the
URL when a link is opened and written back to it on every run, so the address bar (and the
sidebar's "Link to this view") always says what the page shows: the model, the input text,
layer, head, tab and the page's own settings. Never the private session id (``?sid=``): the
shared link leaves it out, and presenting keeps it out of the address bar too (``ui.session``).

    /attention?model=shipped/coref&input=example&example=0&layer=1&head=1&tab=Step-through
    /masks?model=shipped/lm&kind=sliding+window&window=4&hide=kind,window,sidebar

* A value the schema refuses (not a number, out of range, not one of the choices) falls back to
  the page's default with a note at the top of the page; so does one the model cannot take (layer
  7 of a 2-layer model: ``fell_back``, called by the shared selectors in ``ui.widgets``).
* ``hide=`` names settings (and ``model``, ``sidebar``) a handout page leaves out: their widgets
  are hidden, the link's values still apply (TensorFlow Playground's ``hide``).
* A page forgets its settings when the model changes (``ui.widgets.forget_on_model_change``);
  values a link just set are kept through that first forget (``protected``).

The schemas themselves (every page's settings) are data in ``ui.link_schemas``; this module is the
mechanism. To give a page links: add its settings there. Tested in tests/test_links.py (every page's schema against its widgets, AppTest) and
tests/e2e/test_browser_links.py (a link round-tripped on every page, in Chromium).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import streamlit as st

from .models import DEFAULTED, model_id
from .navigation import PAGES

MAX_TEXT = 2000  # characters of a text setting read from a link
WRITTEN, GIVEN, PROTECTED, NOTES, SLOT = ("_links_written", "_links_given", "_links_protected",
                                         "_links_notes", "_links_slot")
EARLIER = "_links_earlier"  # the last few URLs this session wrote (a browser may still send one of them)
EARLIER_KEPT = 16
PRIVATE = ("sid",)  # never in a shared link
KEEP = ("hide",)   # kept in the URL as the link gave it


@dataclass(frozen=True)
class Setting:
    """One setting of a page in the URL. ``kind``: int | float | str | bool | "models" (a list of
    model ids <-> the picker's paths); ``choices``: the allowed values (empty: any); ``values``:
    URL word -> widget value when they differ (input=example -> "Task example"); ``lo``/``hi``:
    a number's bounds; ``then``: called after the value is set (e.g. the Train form's preset);
    ``default``: a value the link leaves out."""
    name: str
    key: str
    kind: Any = str
    choices: Sequence = ()
    values: dict | None = None
    lo: float | None = None
    hi: float | None = None
    then: Callable | None = None
    default: Any = None  # left out of the link when the value is this

    def parse(self, raw: str):
        """The widget value of ``raw``; ValueError (the reason) when the schema refuses it."""
        if self.values is not None:
            if raw not in self.values:
                raise ValueError(f"one of {', '.join(self.values)}")
            return self.values[raw]
        if self.kind is bool:
            if raw.lower() not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError("1 or 0")
            return raw.lower() in ("1", "true", "yes")
        if self.kind in (int, float):
            try:
                value = self.kind(raw)
            except ValueError:
                raise ValueError("a whole number" if self.kind is int else "a number") from None
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError("a finite number")
            if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
                raise ValueError(f"between {self.lo:g} and {self.hi:g}")
            return value
        if self.kind == "models":
            return _model_paths(raw)
        if len(raw) > MAX_TEXT:
            raise ValueError(f"at most {MAX_TEXT} characters")
        if self.choices and raw not in [str(c) for c in self.choices]:
            raise ValueError(f"one of {', '.join(map(str, self.choices))}")
        return raw

    def dump(self, value) -> str | None:
        """The URL word of a widget value (None: leave it out)."""
        if value is None:
            return None
        if self.values is not None:
            return next((w for w, v in self.values.items() if v == value), None)
        if self.kind is bool:
            return "1" if value else "0"
        if self.kind == "models":
            return ",".join(_model_ids(value)) or None
        if isinstance(value, float) and value.is_integer() and self.kind is int:
            value = int(value)
        return str(value)


# ------------------------------------------------------------------------------ the schemas
# page (its file's stem) -> its settings: a tuple, or a function of the link's params (None when
# writing). Filled by ``ui.link_schemas`` (the one list of every page's settings; app.py imports it).
SCHEMAS: dict[str, tuple[Setting, ...] | Callable] = {}
# Hidden by name besides the settings: the model picker, the whole sidebar.
EXTRA_HIDE = {"model": ".st-key-model_select", "sidebar": "[data-testid='stSidebar'], "
              "[data-testid='stSidebarCollapsedControl'], [data-testid='stExpandSidebarButton']"}


def settings(page: str, params: dict | None = None) -> tuple[Setting, ...]:
    """``page``'s schema; a callable one gets the link's params (when reading one) or None."""
    s = SCHEMAS.get(page, ())
    return s(params) if callable(s) else s


def page_of(title: str) -> str:
    """The schema name of a page of ``ui.navigation.PAGES`` (its file's stem)."""
    return next((Path(p.file).stem for p in PAGES if p.title == title), "home")


# ------------------------------------------------------------------------------ models
def _refs():
    from .models import available_models

    return available_models()


def _model_paths(raw: str) -> list[str]:
    refs = {model_id(r): r.path for r in _refs()}
    ids = [x for x in raw.split(",") if x]
    missing = [x for x in ids if x not in refs]
    if missing:
        raise ValueError(f"models this server lists (not {', '.join(missing)})")
    return [refs[x] for x in ids]


def _model_ids(paths) -> list[str]:
    ids = {r.path: model_id(r) for r in _refs()}
    return [ids[p] for p in paths if p in ids]


def _apply_model(wanted: str) -> None:
    """The link's ``model`` (an id, "shipped/coref") picked in the sidebar, or a note."""
    from .session import URL_MODEL

    found = next((r for r in _refs() if model_id(r) == wanted), None)
    if found is None:
        note(f"The link's model **{wanted}** is not on this server: showing another one.")
        return
    ss = st.session_state
    ss["model_path"], ss[URL_MODEL] = found.path, wanted
    ss.pop(DEFAULTED, None)


# ------------------------------------------------------------------------------ reading a link
def note(text: str) -> None:
    """Say ``text`` at the top of the page (the link's value that could not be used)."""
    ss = st.session_state
    ss.setdefault(NOTES, []).append(text)
    if ss.get(SLOT) is not None:
        ss[SLOT].info(text, icon=":material/link:")


def _query() -> dict[str, str]:
    return {k: st.query_params.get(k) for k in st.query_params.keys() if k not in PRIVATE}


def apply(page: str, params: dict[str, str]) -> None:
    """Set the widgets' state from a link's ``params`` (refused values noted)."""
    ss = st.session_state
    given, protected = {}, set()
    for s in settings(page, params):
        if s.name not in params:
            continue
        raw = params[s.name]
        try:
            value = s.parse(raw)
        except ValueError as e:
            note(f"The link's **{s.name}={raw[:40]}** is not usable here (it must be {e}): showing "
                 "the page's default.")
            continue
        ss[s.key] = value
        given[s.key] = (s.name, raw)
        protected.add(s.key)
        if s.then is not None:
            s.then()
    if page != "lesson" and params.get("model"):
        _apply_model(params["model"])
    ss[GIVEN], ss[PROTECTED] = given, protected


def fell_back(key: str, shown) -> None:
    """A selector could not show the value a link gave ``key`` (not an option for this model):
    say so once."""
    given = st.session_state.get(GIVEN) or {}
    if key in given:
        name, raw = given.pop(key)
        note(f"The link's **{name}={raw[:40]}** is not an option for this model: showing {shown}.")


def protected(key: str) -> bool:
    """Whether ``key`` was just set by a link (kept through the page's first model-change reset);
    asking uses it up."""
    keep = st.session_state.get(PROTECTED)
    if keep and key in keep:
        keep.discard(key)
        return True
    return False


# ------------------------------------------------------------------------------ writing the link
def current(page: str) -> dict[str, str]:
    """The page's settings as they are now (link words), the model and ``hide`` as given."""
    ss, out = st.session_state, {}
    for s in settings(page):
        if s.key in ss and (s.default is None or ss[s.key] != s.default):
            word = s.dump(ss[s.key])
            if word is not None:
                out[s.name] = word
    if page != "lesson":
        from .session import URL_MODEL

        if ss.get(URL_MODEL):
            out["model"] = ss[URL_MODEL]
    for k in KEEP:
        if st.query_params.get(k):
            out[k] = st.query_params.get(k)
    return out


def write(page: str) -> dict[str, str]:
    """The URL's query string = ``current(page)`` (and the session id, kept by ``ui.session``)."""
    want = current(page)
    for k in list(st.query_params.keys()):
        if k not in PRIVATE and k not in want:
            del st.query_params[k]
    for k, v in want.items():
        if st.query_params.get(k) != v:
            st.query_params[k] = v
    _remember(want)
    return want


def _remember(written: dict) -> None:
    """``written`` is what the URL holds now; kept among the last ``EARLIER_KEPT`` written."""
    ss = st.session_state
    ss[WRITTEN] = written
    earlier = [w for w in ss.get(EARLIER, []) if w != written][-(EARLIER_KEPT - 1):]
    ss[EARLIER] = [*earlier, written]


def _ours(query: dict) -> bool:
    """The browser sent a URL this session wrote itself, now or a few runs ago: a rerun sent
    before the browser had shown the newest URL (a slider moved by keys: each press a rerun)
    carries an earlier one. Only a URL the session never wrote is a link opened."""
    ss = st.session_state
    return query == ss.get(WRITTEN) or query in ss.get(EARLIER, [])


def wrote(name: str, value: str | None) -> None:
    """A setting the app itself just wrote into the URL during the page (the picked model, by
    ``ui.picker``): part of what was written, so the next run does not take it for a link
    opened (which would apply the URL's settings again and keep them through a model change)."""
    written = dict(st.session_state.get(WRITTEN) or {})
    if value is None:
        written.pop(name, None)
    else:
        written[name] = value
    _remember(written)


def url(page: str, params: dict[str, str]) -> str:
    """The full link (this server's address, the page, its settings; never the session id)."""
    base = ""
    try:
        base = (st.context.url or "").split("?")[0].rstrip("/")
        base = base.rsplit("/", 1)[0] if base.count("/") > 2 else base
    except Exception:  # noqa: BLE001 - no browser (AppTest): a relative link
        base = ""
    path = "" if page == "home" else page
    query = urlencode({k: v for k, v in params.items() if k not in PRIVATE})
    return f"{base}/{path}" + (f"?{query}" if query else "")


def hide_css(page: str, names: Sequence[str]) -> str:
    """CSS hiding the widgets of ``names`` (settings of ``page``, "model", "sidebar")."""
    keys = {s.name: s.key for s in settings(page)}
    rules = [EXTRA_HIDE[n] if n in EXTRA_HIDE else f".st-key-{keys[n]}" for n in names
             if n in EXTRA_HIDE or n in keys]
    return (f"<style>{', '.join(rules)} {{ display: none !important; }}</style>") if rules else ""


def share_box(page: str, params: dict[str, str]) -> None:
    """The sidebar's "Link to this view": the page's link (copy button), and controls to leave
    out of a handout (``hide=``)."""
    names = [s.name for s in settings(page)] + list(EXTRA_HIDE)
    with st.sidebar.expander("Link to this view", icon=":material/link:"):
        hidden = st.multiselect("Leave out (for a handout)", names, key="links_hide",
                                help="The link still sets these; the page it opens does not show them.")
        shown = {k: v for k, v in params.items() if k != "hide"}
        if hidden:
            shown["hide"] = ",".join(hidden)
        st.code(url(page, shown), language=None, wrap_lines=True)
        st.caption("Opens this page with the same model, input and settings — without your "
                   "session (your runs stay yours).")


def at_start(page: str) -> None:
    """Before a page runs (``ui.figures.run_page``): apply a link just opened, write the current
    settings to the URL, show the notes (later ones, ``fell_back``, appear in the same place),
    hide what ``hide=`` names, offer the link."""
    ss = st.session_state
    ss.pop(SLOT, None)
    if page != "lesson":  # only a presented lesson keeps the session id out of the address bar
        from .session import HIDDEN

        ss.pop(HIDDEN, None)
    query = _query()
    ss[NOTES] = []
    if not _ours(query):  # a link opened (or a page switched to): not what we wrote
        apply(page, query)
        names = [s.name for s in settings(page)] + list(EXTRA_HIDE)  # the link box offers its hide=
        ss["links_hide"] = [n for n in (query.get("hide") or "").split(",") if n in names]
    params = write(page)
    if params.get("hide"):
        st.html(hide_css(page, params["hide"].split(",")))
    ss[SLOT] = st.container()
    for text in ss[NOTES]:
        ss[SLOT].info(text, icon=":material/link:")
    share_box(page, params)
