"""The Lesson page's machinery (issue 32): the lecture's steps (``ui.lesson_steps.STEPS``) one at a
time, presenting for a projector, a class that follows its teacher, the whole lesson offline.

* A step: its lecture part and "step k of n", title, words, its controls (the model it reads, when
  it takes one, and at most two more), its live view (``ui.figures.show``), the "what to notice"
  sentence from the view's numbers, and a link to the full page with the same model and input.
* Presenting (``?present=1``): no sidebar, large type, ← / → keys, and no ``?sid=`` in the
  address bar (``ui.session.HIDDEN``).
* Leading and following: the browser that gave the teacher key (``ui.teacher``) leads while the
  server's one ``ClassRecord`` (``tfviz.classroom.follow``) says so — "Present to the class"
  presents and leads in one press; the lead state is the record's, never a widget's, so
  presenting, Esc, a reload or a second tab of the teacher's keep it. Each of a leading tab's runs
  publishes its step and settings to the record; a leading tab whose class was moved by the
  teacher's other tab (or that is new: a reload) takes the class's view first. A student who
  opened the class link (``?follow=1``) polls the record once a second in a fragment and redraws
  the page when its version changes; a student who steps away sees "Back to the teacher".
* Settings in the URL: ``ui.links`` (its "lesson" schema is ``url_settings``: the step, and the
  model and controls of that step).
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path

import streamlit as st

from tfviz.lesson import PARTS

from . import links
from .figures import show
from .lesson_steps import BY_ID, STEPS, Control, Step, view_of
from .session import HIDDEN

STEP, PRESENT, FOLLOW, AWAY = "lesson_step", "lesson_present", "lesson_follow", "lesson_away"
SEEN = "_lesson_seen"  # the lead's version this session last drew
PUBLISHED = "_lesson_published"  # the view a leading tab last published (its own changes differ from it)
POLL_S = 1.0  # a follower reads the class record this often
PRESENT_CSS = """<style>
[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"], [data-testid="stExpandSidebarButton"],
header[data-testid="stHeader"], [data-testid="stToolbar"] { display: none !important; }
[data-testid="stMainBlockContainer"] { padding: 0.8rem 2.2rem 2rem !important; max-width: 100% !important; }
[data-testid="stMain"] [data-testid="stMarkdownContainer"] p,
[data-testid="stMain"] [data-testid="stMarkdownContainer"] li { font-size: 1.35rem; line-height: 1.4; }
.st-key-lesson_words [data-testid="stMarkdownContainer"] p,
.st-key-lesson_notice [data-testid="stMarkdownContainer"] p { font-size: var(--tfviz-words, 1.25rem); line-height: 1.35; }
.st-key-lesson_side [data-testid="stCaptionContainer"] p { font-size: 0.95rem; }
[data-testid="stMain"] [data-testid="stCaptionContainer"] p { font-size: 1.15rem; }
[data-testid="stMain"] [data-testid="stWidgetLabel"] p { font-size: 1.15rem; }
[data-testid="stMain"] h1 { font-size: 2.1rem; padding: 0 0 0.1rem; }
[data-testid="stMain"] [data-testid="stSpinner"], [data-testid="stMain"] [data-testid="stSpinner"] p { font-size: 1.4rem; }
[data-testid="stLayoutWrapper"]:has(> .st-key-lesson_figbox), .st-key-lesson_figbox {
  flex: 0 0 var(--tfviz-fig-h, 62vh) !important; height: var(--tfviz-fig-h, 62vh) !important;
  max-height: none !important; overflow: hidden !important; }
[data-testid="stMain"] [data-testid="stButton"] button p { font-size: 1.2rem; }
[data-testid="stMain"] [data-baseweb="select"] div { font-size: 1.1rem; }
[data-testid="stMain"] [data-testid="stRadio"] label p { font-size: 1.15rem; }
[class*="st-key-lesson_"][class*="-csv"], [class*="st-key-lesson_"][class*="-html"] { display: none !important; }
</style>"""
FIGURE_FONT, TITLE_FONT, AXIS_FONT = 16, 20, 14  # a presented figure's type (tfviz's theme: 13 and 16)
PRESENT_TITLE_CHARS = 46  # a presented title's line: fits the figure's column at 1024 px (wide: + 8)
MIN_FIGURE_TEXT = 14  # px: no text of a presented figure is smaller (read from the back of a room)
Y_TITLE_CHARS = 16  # a presented y-axis title longer than this is put on two lines
LOG_TICK_FONT = 19  # a log axis's minor digits are drawn at 0.75 of it: 14 px
# Presenting fits the step to the viewport (issue 41, item 2): title on top, the figure (its
# controls above it) on the left at the height the window leaves, the step's words and what to
# notice on the right, their type made smaller (down to MIN_WORDS px) until the notice ends inside
# the window. The browser measures (a script in the page), the server cannot know the window.
MIN_WORDS = 15
FIT_JS = """<script>
(() => {
  if (window.__tfvizFit) { window.__tfvizFit(); return; }
  const PAD = 14, MIN_WORDS = %(min_words)d, MIN_FIG = 240;
  const live = (sel) => [...document.querySelectorAll(sel)].filter(e => !e.closest("[data-stale='true']"));
  let busy = false;
  function fit() {
    const root = document.documentElement.style;
    const box = live(".st-key-lesson_figbox")[0];
    if (!box) { root.removeProperty("--tfviz-fig-h"); root.removeProperty("--tfviz-words"); return; }
    const H = window.innerHeight;
    let size = Math.max(MIN_WORDS, Math.min(24, Math.round(H * 0.027)));
    root.setProperty("--tfviz-words", size + "px");
    const notice = live(".st-key-lesson_notice")[0];
    while (notice && notice.getBoundingClientRect().bottom > H - PAD && size > MIN_WORDS) {
      size -= 1;
      root.setProperty("--tfviz-words", size + "px");
    }
    const below = live(".st-key-lesson_below")[0];
    const under = below ? below.getBoundingClientRect().height + 16 : 0;
    const h = Math.max(MIN_FIG, Math.floor(H - box.getBoundingClientRect().top - PAD - under));
    if (root.getPropertyValue("--tfviz-fig-h") !== h + "px") root.setProperty("--tfviz-fig-h", h + "px");
  }
  function later() { if (!busy) { busy = true; requestAnimationFrame(() => { busy = false; fit(); }); } }
  window.__tfvizFit = fit;
  window.addEventListener("resize", later);
  new MutationObserver(later).observe(document.body, {childList: true, subtree: true, attributes: true,
                                                      attributeFilter: ["data-stale"]});
  later();
})();
</script>""" % {"min_words": MIN_WORDS}


# ------------------------------------------------------------------------------ state
def control_key(step: Step, name: str) -> str:
    return f"lesson_{step.id}_{name}"


def current_step() -> Step:
    return BY_ID.get(st.session_state.get(STEP), STEPS[0])


def _type(c: Control) -> type:
    return int if c.kind == "slider" else c.type


def url_settings(params: dict | None = None) -> tuple:
    """The lesson's link schema (``ui.links``): the step, presenting and following, and the model
    and controls of the step (named as the step names them)."""
    wanted = (params or {}).get("step") if params is not None else st.session_state.get(STEP)
    step = BY_ID.get(wanted, STEPS[0])
    out = [links.Setting("step", STEP, choices=tuple(BY_ID)),
           links.Setting("present", PRESENT, bool, default=False),
           links.Setting("follow", FOLLOW, bool, default=False)]
    if step.model:
        out.append(links.Setting("model", control_key(step, "model")))
    out += [links.Setting(c.name, control_key(step, c.name), _type(c),
                          lo=c.lo if c.kind == "slider" else None,
                          hi=(c.hi if isinstance(c.hi, int) else None) if c.kind == "slider" else None)
            for c in step.controls]
    return tuple(out)



def go(seen: str, offset: int = 0, to: str | None = None) -> None:
    """A button's or the step list's callback (it runs before the page): the step ``offset`` from
    ``seen`` (the step the button was drawn on), or ``to``. A follower who moves has stepped away
    from the teacher. A step-list change drawn on another step than the current one is a stale
    message (a follower's page was moved by the teacher meanwhile): ignored."""
    ids = [s.id for s in STEPS]
    ss = st.session_state
    if to is not None:
        if seen != current_step().id or to not in BY_ID:
            return
        ss[STEP] = to
    else:
        i = ids.index(seen) if seen in BY_ID else 0
        ss[STEP] = ids[max(0, min(len(ids) - 1, i + offset))]
    if ss.get(FOLLOW):
        ss[AWAY] = True


def following() -> bool:
    """This session follows the teacher now (joined the class link, not stepped away)."""
    return bool(st.session_state.get(FOLLOW)) and not st.session_state.get(AWAY) and not leading()


# ------------------------------------------------------------------------------ the step's model
def _zoo_ref(name: str):
    from tfviz.paths import zoo_dir
    from tfviz.zoo.findings import zoo_path

    from .models import ModelRef

    path = zoo_path(name, zoo_dir())
    return ModelRef(f"{name} (shipped)", str(path), "shipped") if path.is_file() else None


CHOICES_S = 5.0  # a session's list of models for a step is read again after this long


def model_choices(step: Step) -> dict:
    """model id -> ModelRef a step can show: its shipped model first, then every model the picker
    lists (shipped, published, trained by this session, uploaded) whose header fits the step.
    Hugging Face folders are left out (the steps read tfviz task examples). Kept for
    ``CHOICES_S`` per session: listing the folders and reading each header on every run was a
    third of a follower's redraw."""
    import time

    kept = st.session_state.setdefault("_lesson_choices", {})
    now = time.monotonic()
    if step.id in kept and now - kept[step.id][0] < CHOICES_S:
        return kept[step.id][1]
    kept[step.id] = (now, _model_choices(step))
    return kept[step.id][1]


def _model_choices(step: Step) -> dict:
    from . import cache
    from .models import available_models
    from .picker import model_id

    out = {}
    if step.model and (ref := _zoo_ref(step.model)) is not None:
        out[model_id(ref)] = ref
    for ref in available_models():
        if ref.source in ("local", "hf-cache") or model_id(ref) in out:
            continue
        card = cache.card(ref.path)
        if card is not None and step.fits is not None and step.fits(card):
            out[model_id(ref)] = ref
    return out


def step_model(step: Step, where=None):
    """The model the step shows (loaded), with its picker in ``where`` (None: no widget — the
    export). None when the step takes no model."""
    if not step.model:
        return None
    from .models import load_model

    refs = model_choices(step)
    if not refs:
        raise ValueError(f"no model here can show this step: build the shipped **{step.model}** "
                         f"(`python -m tfviz.zoo build --only {step.model}`)")
    key, ss = control_key(step, "model"), st.session_state
    chosen = ss.get(key)
    if chosen not in refs:
        if chosen and where is not None:
            links.note(f"The model **{chosen}** is not here for this step: showing {next(iter(refs))}.")
        chosen = next(iter(refs))
    if where is not None:
        ss[key] = chosen
        chosen = where.selectbox("Model", list(refs), key=key, format_func=lambda i: refs[i].label,
                                 disabled=following(),
                                 help="Any model that fits this step: the shipped one, one the "
                                      "class trained (published), or yours.")
    return load_model(refs[chosen])


def control_values(step: Step, lm, cols=None) -> dict:
    """Each control's value, kept valid for the model; with ``cols``, its widget drawn there (and
    its state set first). Without (the export), the values are read, never written."""
    ss, out = st.session_state, {}
    for i, c in enumerate(step.controls):
        key = control_key(step, c.name)
        default = c.default(lm) if callable(c.default) else c.default
        options = c.options(lm) if callable(c.options) else c.options
        value = ss.get(key)
        if options is not None:
            if value not in list(options):
                if value is not None and cols is not None:
                    links.fell_back(key, default)
                value = default if default in list(options) else list(options)[0]
        elif c.kind == "slider":
            hi = c.hi(lm) if callable(c.hi) else c.hi
            if not isinstance(value, int) or not c.lo <= value <= hi:
                if value is not None and cols is not None:
                    links.fell_back(key, min(max(int(default), c.lo), hi))
                value = min(max(int(default), c.lo), hi)
        elif value is None:
            value = default
        out[c.name] = value
        if cols is None:
            continue
        ss[key] = value  # every run: a widget's state is dropped while its step is not shown
        where = cols[i]
        fmt = {"format_func": lambda v, f=c.fmt: f(v, lm)} if c.fmt else {}
        fmt["disabled"] = following()  # the teacher's settings; Back / Next to explore alone
        if c.kind == "select":
            where.selectbox(c.label, list(options), key=key, **fmt)
        elif c.kind == "radio":
            where.radio(c.label, list(options), key=key, horizontal=True, **fmt)
        elif c.kind == "slider":
            hi = c.hi(lm) if callable(c.hi) else c.hi
            if hi > c.lo:
                where.slider(c.label, c.lo, hi, key=key, step=c.step, disabled=fmt["disabled"])
            else:
                where.caption(f"{c.label}: {c.lo}")
        else:
            where.text_input(c.label, key=key, disabled=fmt["disabled"])
        out[c.name] = ss[key]
    return out


# ------------------------------------------------------------------------------ one step
def _presented(fig):
    """A copy of ``fig`` with type a room can read (figures are shared read-only, so a copy),
    made once per shared figure."""
    original, copy = _presented_copy(id(fig), fig)
    return copy if original is fig else _presented_copy.__wrapped__(id(fig), fig)[1]


@st.cache_resource(max_entries=64, show_spinner=False)
def _presented_copy(fig_id: int, _fig):
    """Keyed on the shared figure's identity; the entry holds the figure itself, so while it is
    cached no other figure can take its id."""
    from tfviz.viz.theme import wrap_title

    fig = type(_fig)(_fig)
    top = (fig.layout.margin.t or 60) + 16
    if fig.layout.title.text:  # the figure's column is narrower than the page: the title wrapped again
        text, n = _present_title(fig.layout.title.text, PRESENT_TITLE_CHARS + 8 if wide(fig) else PRESENT_TITLE_CHARS)
        # the top margin holds all its lines (Plotly centres the title in it; a y-axis title ran
        # into a second line that the margin did not hold)
        if any(a.side == "top" for a in fig.select_xaxes()):  # the axis's labels above the plot
            top += int(TITLE_FONT * 1.3) * max(0, n - fig.layout.title.text.count("<br>") - 1)
        else:
            top = max(top, 20 + int(TITLE_FONT * 1.3) * n + (40 if fig.layout.annotations else 16))
        fig.update_layout(title=dict(text=text))
    fig.update_layout(font=dict(size=FIGURE_FONT), title=dict(font=dict(size=TITLE_FONT)),
                      margin=dict(t=top), height=None)
    fig.update_annotations(font_size=MIN_FIGURE_TEXT if wide(fig) else FIGURE_FONT)  # panels' titles side by side
    # axis titles stay smaller: a long one ("max |Δ logit| (over the vocabulary)") in large type ran
    # past the plot into the figure's title
    fig.update_xaxes(title_font_size=AXIS_FONT)
    fig.update_yaxes(title_font_size=AXIS_FONT)
    # a long y-axis title on two lines: the window's height makes the plot short, and a title longer
    # than the plot ran up into the figure's title
    fig.for_each_yaxis(lambda a: a.update(title_text=wrap_title(a.title.text, Y_TITLE_CHARS)[0])
                       if a.title.text and "<br>" not in a.title.text and len(a.title.text) > Y_TITLE_CHARS
                       else None)
    for trace in fig.data:  # numbers printed in cells and on bars: at least MIN_FIGURE_TEXT px
        font = getattr(trace, "textfont", None)
        if font is not None and font.size is not None and not isinstance(font.size, (int, float)):
            continue  # one size per point: left as the figure made it
        if font is not None and (font.size or FIGURE_FONT) < MIN_FIGURE_TEXT:
            trace.textfont.size = MIN_FIGURE_TEXT
    # a log axis prints its in-between digits (2, 5) at three quarters of the tick type
    fig.for_each_xaxis(lambda a: a.update(tickfont_size=LOG_TICK_FONT) if a.type == "log" else None)
    fig.for_each_yaxis(lambda a: a.update(tickfont_size=LOG_TICK_FONT) if a.type == "log" else None)
    if fig.layout.uniformtext.minsize is not None:  # text squeezed into bars: hidden below it
        fig.update_layout(uniformtext_minsize=MIN_FIGURE_TEXT)
    if fig.layout.legend.orientation == "h":  # a row legend under the plot: more entries a row, fewer rows
        fig.update_layout(legend_font_size=MIN_FIGURE_TEXT)
    elif fig.layout.legend.font.size is not None and fig.layout.legend.font.size < MIN_FIGURE_TEXT:
        fig.update_layout(legend_font_size=MIN_FIGURE_TEXT)
    return _fig, fig


def _present_title(title: str, chars: int) -> tuple[str, int]:
    """A figure's title for a projector: its plain lines wrapped again at ``chars``, a line with
    markup (a subtitle's <span>) kept whole, its type at least ``MIN_FIGURE_TEXT`` px -> (text,
    lines)."""
    import re

    from tfviz.viz.theme import wrap_title

    out, lines, words = [], 0, []
    for part in [*title.split("<br>"), None]:
        if part is not None and "<" not in part:
            words.append(part)
            continue
        if words:
            text, n = wrap_title(" ".join(words), chars)
            out.append(text)
            lines += n
            words = []
        if part is not None:
            out.append(re.sub(r"font-size:\s*(\d+)px",
                              lambda m: f"font-size:{max(int(m[1]), MIN_FIGURE_TEXT)}px", part))
            lines += 1
    return "<br>".join(out), lines


def wide(fig) -> bool:
    """A figure of two or more panels side by side: it gets more of a presented step's width."""
    domains = {tuple(a.domain) for a in fig.select_xaxes() if a.domain is not None}
    return len(domains) >= 2


def page_link(step: Step, lm, view) -> None:
    """"Go deeper": the full page with the same model and input (the link's settings)."""
    from .navigation import PAGES
    from .picker import model_id

    info = next(p for p in PAGES if Path(p.file).stem == step.page)
    params = {k: str(v) for k, v in view.link.items() if v not in (None, "")}
    if lm is not None:
        params["model"] = model_id(lm.ref)
    st.page_link(info.file, label=f"Go deeper: the {info.title} page, same model and input",
                 icon=info.icon, query_params=params)


def render_step(step: Step, presenting: bool) -> None:
    k, n = [s.id for s in STEPS].index(step.id) + 1, len(STEPS)
    st.caption(f"Lecture part **{list(PARTS).index(step.part) + 1} · {PARTS[step.part]}** · step {k} of {n}")
    st.header(step.title, anchor=False)
    if presenting:  # the figure and its controls on the left, the words and the notice beside it
        left, side = st.columns(WIDE_SPLIT if _wide_step(step) else SPLIT, gap="medium")
        side = side.container(key="lesson_side")
        side.container(key="lesson_words").markdown(step.text)
    else:
        st.markdown(step.text)
        left = side = st.container()
    width = 1 + len(step.controls) + bool(step.model)
    if presenting and width - 1 == 3:  # three boxes in the figure's column: a long value (a
        # sentence) was cut; two on a row, the third on its own
        cols = [*left.columns(2), left.columns(1)[0]]
    else:
        cols = left.columns(max(width - 1, 1)) if width > 1 else None
    try:
        lm = step_model(step, cols[0] if cols and step.model else None)
        values = control_values(step, lm, (cols[1:] if step.model else cols) if cols else None)
        _yield_to_leader()
        if presenting:  # the room sees that the view is being computed (Streamlit's running
            # indicator is hidden while presenting); shown only past half a second (st.spinner)
            with left, st.spinner("Computing this step's view…", show_time=True):
                view = view_of(step, lm, values)
        else:
            view = view_of(step, lm, values)
    except ValueError as e:
        st.warning(f"This step cannot be shown here: {e}")
        return
    _yield_to_leader()  # the chart's JSON is a follower's largest piece of work
    if presenting:
        if wide(view.figure) != _wide_step(step):  # known after the view: drawn again split for it
            _WIDE[step.id] = wide(view.figure)
            st.rerun()
        with left:
            with st.container(key="lesson_figbox", height=480, border=False):
                show(_presented(view.figure), f"lesson_{step.id}", caption=view.caption,
                     height="stretch", downloads=False)
            if view.html:
                st.container(key="lesson_below").html(view.html)
        with side:
            with st.container(border=True, key="lesson_notice"):
                st.markdown(f"**What to notice.** {step.notice(view.numbers)}")
            if view.caption:
                st.caption(view.caption)
        st.html(FIT_JS, unsafe_allow_javascript=True)
        return
    show(view.figure, f"lesson_{step.id}", caption=view.caption)
    if view.html:
        st.html(view.html)
    if view.caption:
        st.caption(view.caption)
    with st.container(border=True, key="lesson_notice"):
        st.markdown(f"**What to notice.** {step.notice(view.numbers)}")
    page_link(step, lm, view)


SPLIT, WIDE_SPLIT = [3, 2], [7, 3]  # presenting: the figure's column and the words' beside it
_WIDE: dict[str, bool] = {}  # step id -> its last presented figure had panels side by side


def _wide_step(step: Step) -> bool:
    return _WIDE.get(step.id, False)


def _yield_to_leader() -> None:
    """In a follower's redraw: let the teacher's page run first if it is being drawn now (Python
    runs one thread at a time; thirty redraws would otherwise share it with the teacher's)."""
    if st.session_state.get(FOLLOW) and not leading():
        class_record().wait_for_leader()


def nav(presenting: bool) -> None:
    """← Back · step k of n (a jump list) · Next →; the arrow keys press the buttons."""
    step = current_step()
    ids = [s.id for s in STEPS]
    i = ids.index(step.id)
    c1, c2, c3 = st.columns([1, 4, 1], vertical_alignment="center")
    c1.button("Back", key="lesson_prev", icon=":material/arrow_back:", on_click=go, args=(step.id, -1),
              disabled=i == 0, shortcut="Left", width="stretch")
    c3.button("Next", key="lesson_next", icon=":material/arrow_forward:", icon_position="right",
              on_click=go, args=(step.id, 1), disabled=i == len(ids) - 1, shortcut="Right", width="stretch")
    # one widget per step (its key names the step): a follower's page is moved by the teacher, and a
    # browser message still carrying the old step's choice (a poll sent just before the redraw
    # arrived) would otherwise have "changed" the list back — a jump that stepped the student away
    jump = f"lesson_jump_{step.id}"
    st.session_state[jump] = step.id
    c2.selectbox("Step", ids, key=jump, label_visibility="collapsed",
                 format_func=lambda s: f"Step {ids.index(s) + 1} of {len(ids)} · {BY_ID[s].title}",
                 on_change=lambda: go(step.id, to=st.session_state[jump]))


# ------------------------------------------------------------------------------ the class
@st.cache_resource
def class_record():
    """The server's one record of the teacher's current view (``tfviz.classroom.follow``)."""
    from tfviz.classroom.follow import ClassRecord

    return ClassRecord()


def me() -> str:
    """This browser (``ui.session.client_id``): who the class record knows as the teacher."""
    from .session import client_id

    return client_id()


def is_teacher() -> bool:
    """This browser gave the teacher key: in this session (``ui.teacher``'s key box), or in an
    earlier one of the same browser (a reload, another tab: the class record remembers it)."""
    ss, record = st.session_state, class_record()
    if not os.environ.get("TFVIZ_TEACHER_KEY"):
        return False
    if ss.get("teacher"):
        record.add_teacher(me())
        return True
    if record.is_teacher(me()):
        ss["teacher"] = True
        return True
    return False


def set_leading(on: bool) -> None:
    """Start (this tab's view becomes the class's) or stop leading; a button's callback."""
    if not is_teacher():
        return
    record = class_record()
    record.set_leading(on, me())
    if on:  # this tab's view wins over a class view left from an earlier lead
        st.session_state[SEEN] = record.current().version
        st.session_state.pop(PUBLISHED, None)


def present_to_class() -> None:
    """"Present to the class": the projector view and the class following, one press."""
    st.session_state.update({PRESENT: True, HIDDEN: True})
    set_leading(True)


def lead_state() -> dict:
    """What a follower needs to draw the leader's view: the lesson's link settings, without
    presenting and following (a student's own)."""
    params = links.current("lesson")
    return {**{k: v for k, v in params.items() if k not in ("present", "follow", "hide")},
            "step": current_step().id}


def _apply_lead(state: dict) -> None:
    links.apply("lesson", dict(state))


def leading() -> bool:
    """This tab moves the class: the record leads and this browser is the teacher's."""
    return bool(st.session_state.get("teacher")) and class_record().leads(me())


def take_class_view() -> None:
    """A leading tab, before it draws: when the class was moved since this tab last drew (by the
    teacher's other tab), or this tab is new (a reload, a second tab), it shows the class's view
    — unless this run is this tab's own change (its view differs from what it last published)."""
    ss, lead = st.session_state, class_record().current()
    if not lead.version or ss.get(SEEN) == lead.version:
        return
    if ss.get(PUBLISHED) is not None and lead_state() != ss[PUBLISHED]:
        return
    _apply_lead(lead.state)
    ss[SEEN] = lead.version


def teacher_panel() -> None:
    """Leading the class: the teacher key (``ui.teacher``), then whether the class follows (the
    record's state, a button to change it: no switch whose state a hidden run would drop), how
    many students follow, and the class link."""
    from .teacher import gate, key_box

    teacher = is_teacher()
    with st.expander("Lead the class", icon=":material/school:", expanded=teacher):
        if not os.environ.get("TFVIZ_TEACHER_KEY"):
            st.caption("To lead a class, start the server with a teacher key (TFVIZ_TEACHER_KEY): "
                       "whoever holds it moves every student's lesson.")
            return
        if gate().problem:
            st.warning(f"Leading is off: {gate().problem}.")
            return
        if not teacher:
            key_box(st, key="lesson_teacher_key")
            return
        record = class_record()
        n = record.followers()
        if leading():
            st.success(f"Leading: the class follows your steps ({_following(n)}).", icon=":material/school:")
            st.button("Stop leading", key="lesson_lead_off", icon=":material/stop_circle:",
                      on_click=set_leading, args=(False,))
        else:
            st.caption(f"Not leading now ({_following(n)}). **Present to the class** presents and "
                       "leads; or lead from this page:")
            st.button("Lead the class", key="lesson_lead_on", icon=":material/school:",
                      on_click=set_leading, args=(True,))
        st.caption("Students open the class link; they see your step within about two seconds, "
                   "and may step away and come back. Leading stays on while you present, after "
                   "Esc, on a reload and in your other tabs, until you stop it.")
        st.code(class_link(), language=None)


def _following(n: int) -> str:
    return "no student follows yet" if n == 0 else f"{n} student{'s' * (n != 1)} following"


def class_link() -> str:
    return links.url("lesson", {"follow": "1"})


def follower_bar() -> None:
    """A student who joined (``?follow=1``): the teacher's step, polled once a second."""
    st.fragment(_follow_tick, run_every=POLL_S)()


def _follow_tick() -> None:
    ss = st.session_state
    class_record().wait_for_leader()  # a tick never competes with the teacher's page for the CPU
    class_record().polled(me())
    lead = class_record().current()
    if lead.version == 0:
        st.caption("Waiting for the teacher to start the lesson…")
        return
    teacher_at = BY_ID.get(lead.state.get("step"))
    where = f"step {[s.id for s in STEPS].index(teacher_at.id) + 1}: {teacher_at.title}" if teacher_at else "?"
    if not ss.get(AWAY):
        if ss.get(SEEN) != lead.version:
            ss[SEEN] = lead.version
            _apply_lead(lead.state)
            st.rerun(scope="app")
        st.caption(f"Following the teacher (now at {where}).")
        return
    c1, c2 = st.columns([3, 1], vertical_alignment="center")
    c1.caption(f"You stepped away. The teacher is at {where}.")
    if c2.button("Back to the teacher", key="lesson_back_to_teacher", icon=":material/undo:"):
        ss[AWAY], ss[SEEN] = False, lead.version
        _apply_lead(lead.state)
        st.rerun(scope="app")


def _leader_tick() -> None:
    """A leading tab's poll: the teacher's other tab moved the class: draw its view."""
    if leading() and class_record().current().version != st.session_state.get(SEEN):
        st.rerun(scope="app")


def publish() -> None:
    """After the leader's run: the class record holds this view (unchanged: no new version)."""
    if leading():
        state = lead_state()
        lead = class_record().publish(state)
        st.session_state[SEEN], st.session_state[PUBLISHED] = lead.version, state


# ------------------------------------------------------------------------------ warm-up
WARM = {"done": 0, "steps": 0, "seconds": None, "failed": []}  # the warm-up's progress (for a log line)


def default_values(step: Step, lm) -> dict:
    """Each control's default for ``lm`` (no session: the warm-up's)."""
    out = {}
    for c in step.controls:
        default = c.default(lm) if callable(c.default) else c.default
        options = c.options(lm) if callable(c.options) else c.options
        if options is not None and default not in list(options):
            default = list(options)[0]
        elif c.kind == "slider":
            hi = c.hi(lm) if callable(c.hi) else c.hi
            default = min(max(int(default), c.lo), hi)
        out[c.name] = default
    return out


def warm_up(pause_s: float = 0.2) -> dict:
    """Compute every step's default view (its shipped model, its controls' defaults) once, one
    step at a time, at a low priority: the views are memoised for the server (``view_of``), so
    the first visitor of a step, the projector included, draws what is already computed. Run
    in a thread when the server starts (``ui.server``, ``TFVIZ_LESSON_WARM=1``: scripts/app.sh
    sets it). A step that fails is skipped (its page says why when visited)."""
    import time

    try:  # this thread at the lowest priority: visitors' page runs go first (Linux: per thread)
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass
    from .models import load_model

    t0 = time.perf_counter()
    WARM.update(steps=len(STEPS), done=0, failed=[])
    for step in STEPS:
        try:
            ref = _zoo_ref(step.model) if step.model else None
            if step.model and ref is None:
                raise ValueError(f"no shipped {step.model}")
            lm = load_model(ref) if ref is not None else None
            view = view_of(step, lm, default_values(step, lm))
            _presented(view.figure)
        except Exception as e:  # noqa: BLE001 - a warm-up never stops the server
            WARM["failed"].append(f"{step.id}: {type(e).__name__}: {e}"[:200])
        WARM["done"] += 1
        time.sleep(pause_s)
    WARM["seconds"] = round(time.perf_counter() - t0, 1)
    return WARM


# ------------------------------------------------------------------------------ offline
EXPORTS_KEPT = 4  # built lesson files kept for the server (about 5 MB each: plotly.js inlined)


@st.cache_resource
def _exports() -> tuple[OrderedDict, threading.Lock]:
    return OrderedDict(), threading.Lock()


def export_settings() -> tuple:
    """Every step's model and control values as this session has them (hashable)."""
    ss = st.session_state
    return tuple((s.id, ss.get(control_key(s, "model")),
                  tuple((c.name, ss.get(control_key(s, c.name))) for c in s.controls)) for s in STEPS)


def lesson_slides(progress=None) -> list:
    """Every step as a ``Slide``: its figure (the view the page shows, with this session's models
    and settings), its words, caption and what to notice; a step that cannot be shown here says
    why instead."""
    from tfviz.viz import Slide

    slides = []
    for k, step in enumerate(STEPS, 1):
        if progress is not None:
            progress(k / len(STEPS), f"step {k} of {len(STEPS)}: {step.title}")
        try:
            lm = step_model(step)
            view = view_of(step, lm, control_values(step, lm))
        except ValueError as e:
            slides.append(Slide(_empty(str(e)), f"Step {k} · {step.title}", step.text))
            continue
        what = f"What to notice: {step.notice(view.numbers)}"
        slides.append(Slide(view.figure, f"Step {k} · {PARTS[step.part]} · {step.title}",
                            "\n\n".join(x for x in (step.text, view.caption, what) if x)))
    return slides


def _empty(reason: str):
    import plotly.graph_objects as go

    fig = go.Figure()
    fig.add_annotation(text=reason, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    return fig


def lesson_html(progress=None) -> bytes:
    """The whole lesson as one self-contained HTML file (``tfviz.viz.slides_html``), built once
    per server for these settings (the last few kept)."""
    from datetime import datetime, timezone

    from tfviz.viz import slides_html

    before = export_settings()
    store, lock = _exports()
    with lock:
        if before in store:
            return store[before]
    out = slides_html(lesson_slides(progress), title="tfviz · The transformer, step by step",
                      subtitle="Every figure computed by tfviz from real models; exported "
                               f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC").encode()
    with lock:
        store[before] = out
        while len(store) > EXPORTS_KEPT:
            store.popitem(last=False)
    return out


def export_button() -> None:
    """Build the whole lesson as one HTML file (with a progress bar), then offer it."""
    ss = st.session_state
    if st.button("Prepare the whole lesson as one HTML file", key="lesson_export_build",
                 icon=":material/slideshow:", help="Every step in order, each figure with its words "
                 "and what to notice: one file that opens offline, without this server."):
        bar = st.progress(0.0, text="Computing the steps…")
        lesson_html(lambda f, t: bar.progress(f, text=t))
        bar.empty()
        ss["_lesson_export"] = export_settings()
    if ss.get("_lesson_export") == export_settings():
        st.download_button("Download the lesson (HTML)", lesson_html(), "tfviz-lesson.html",
                           "text/html", key="lesson_export_html", icon=":material/download:",
                           on_click="ignore")


# ------------------------------------------------------------------------------ the page
def page() -> None:
    """The Lesson page. The leader's run is marked on the class record while it draws; a
    follower's redraw waits for it (``ClassRecord.wait_for_leader``) and for its turn (two at a
    time: ``follower_turn``): the teacher goes first."""
    is_teacher()  # a reload or another tab of the teacher's browser is the teacher again
    record, lead = class_record(), leading()
    if lead:
        record.begin()
        try:
            _page()
        finally:
            record.end()
    elif st.session_state.get(FOLLOW):
        record.polled(me())
        with record.follower_turn():
            record.wait_for_leader()
            _page()
    else:
        _page()


def _page() -> None:
    ss = st.session_state
    if ss.get(FOLLOW) and AWAY not in ss:
        ss[AWAY] = False
    lead = class_record().current()
    if following() and lead.version:  # every run: the teacher's view, whatever an old message said
        _apply_lead(lead.state)
        ss[SEEN] = lead.version
    leads = leading()
    if leads:
        take_class_view()
    presenting = bool(ss.get(PRESENT))
    ss[HIDDEN] = presenting
    if presenting:
        if "sid" in st.query_params:
            del st.query_params["sid"]
        st.html(PRESENT_CSS)
    else:
        st.title("Lesson: the transformer, step by step")
    if ss.get(FOLLOW) and not leads:
        follower_bar()
    elif leads:
        st.fragment(_leader_tick, run_every=POLL_S)()
    nav(presenting)
    render_step(current_step(), presenting)
    if presenting:
        c1, c2 = st.columns([1, 3], vertical_alignment="center")
        c1.button("Stop presenting", key="lesson_unpresent", icon=":material/close_fullscreen:",
                  on_click=lambda: ss.update({PRESENT: False, HIDDEN: False}), shortcut="Esc",
                  type="tertiary")
        if leads:
            c2.caption(f"Leading the class ({_following(class_record().followers())}) · class link: "
                       f"`{class_link()}`")
    else:
        c1, c2 = st.columns(2)
        if is_teacher():
            c1.button("Present to the class (full screen, ← → keys)", key="lesson_present_btn",
                      type="primary", icon=":material/co_present:", on_click=present_to_class,
                      help="The projector view, and every student who opened the class link "
                           "follows your steps.")
        else:
            c1.button("Present (full screen, ← → keys)", key="lesson_present_btn", type="primary",
                      icon=":material/co_present:", on_click=lambda: ss.update({PRESENT: True, HIDDEN: True}))
        with c2:
            export_button()
        teacher_panel()
    publish()
