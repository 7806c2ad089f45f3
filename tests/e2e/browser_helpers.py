"""What every browser test shares: one deadline for every wait, and waits on events, not on time.

- ``DEADLINE_MS`` bounds every wait (Playwright's ``expect`` and every page's default timeout are
  set to it in conftest.py). A wait returns as soon as its event happens; the deadline only says
  how slow a machine may be before the test fails: a loaded 2-core machine (another test suite,
  a training job, torch imported by a cold server, a new tab evaluating Plotly's script) takes
  tens of seconds at worst. ``TRAINING_DEADLINE_MS`` is for a whole training run to finish.
- Events: the app root's ``data-test-script-state`` (``READY``: the script run has finished),
  an element becoming visible or holding a value, and the server's own "script finished"
  message on the page's websocket (``rerun``): after an action whose result we cannot see
  (a radio whose charts look the same), ``rerun`` waits for the run that action caused.
- No fixed sleep is used to synchronise with the app.
- Elements a live fragment redraws every second are found among the current run's (``CURRENT``),
  never by position (``.first``) among stale copies.

Pages are reached through the sidebar after loading "/", as a teacher does (``visit``); every
test file is ``test_browser_<page>.py`` (its AppTest twin: ``tests/test_page_<page>.py``).
"""
from __future__ import annotations

import re
import statistics
import time
from pathlib import Path

DEADLINE_MS = 120_000
TRAINING_DEADLINE_MS = 3 * DEADLINE_MS
READY = "[data-testid='stApp'][data-test-script-state='notRunning']"
SIDEBAR_LINK = "[data-testid='stSidebarNav'] a"
# Elements of the current script run only. While a run (a fragment's included) is under way,
# Streamlit keeps the previous run's elements on the page, marked data-stale="true", until the new
# ones are drawn: a live panel can briefly show two progress bars or two metric rows.
CURRENT = "[data-testid='stElementContainer']:not([data-stale='true'])"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
# Console errors that are not ours and not a failure; each entry needs a comment saying why.
# Patterns are matched against "<message text> (<url>)".
IGNORED_CONSOLE_ERRORS: list[re.Pattern[str]] = [
    # Opening a page's URL directly (/attention), Streamlit's frontend first probes the server
    # under the page path (/attention/_stcore/health, …/host-config: its way of finding a base
    # URL the app may be served under), gets a 404, then finds it at the root. The browser logs
    # the two 404s; the app works.
    re.compile(r"^Failed to load resource: .*404.*\(https?://[^ ]+/[^/ ]+/_stcore/(health|host-config)\)$"),
]


def settle(page) -> None:
    """Wait until the current script run has finished (callers first wait for something only
    the new run shows, or use ``rerun``: a run not started yet cannot pass for a finished one)."""
    page.wait_for_selector(READY, timeout=DEADLINE_MS)


class Runs:
    """Counts the script runs the server reports finished to one page (its websocket's
    ForwardMsg.script_finished), so a test can wait for the run an action caused."""

    def __init__(self, page) -> None:
        self.ws = None
        page.on("websocket", self._connected)

    def _connected(self, ws) -> None:
        if ws.url.endswith("/_stcore/stream"):
            self.ws = ws

    @staticmethod
    def finished(payload, fragment: bool = False) -> bool:
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        if not isinstance(payload, bytes):
            return False
        msg = ForwardMsg.FromString(payload)
        done = (ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY if fragment
                else ForwardMsg.FINISHED_SUCCESSFULLY)
        return msg.WhichOneof("type") == "script_finished" and msg.script_finished == done


def track_runs(page) -> Runs:
    """Call before the page's first goto (the ``page`` fixture does)."""
    page._tfviz_runs = Runs(page)
    return page._tfviz_runs


def rerun(page, action, *, fragment: bool = False) -> float:
    """Do ``action()`` (a click, a key press) and wait until the script run it caused has
    finished on the server and in the page; returns perf_counter() taken just before the action.
    ``fragment=True`` for a widget inside a fragment (its run is a fragment run)."""
    runs: Runs = page._tfviz_runs
    assert runs.ws is not None, "track_runs(page) before the page's first goto"
    t0 = time.perf_counter()
    with runs.ws.expect_event("framereceived", timeout=DEADLINE_MS,
                              predicate=lambda p: Runs.finished(p, fragment)):
        action()
    settle(page)
    return t0


def nav(page, title: str) -> None:
    """Click ``title`` in the sidebar (client-side navigation, as a user does)."""
    page.locator(SIDEBAR_LINK, has_text=title).click()


def click_radio(page, option: str) -> float:
    """Click the radio option labelled ``option`` and wait for the run it caused; seconds taken."""
    t0 = rerun(page, page.locator("[data-testid='stRadio'] label").filter(has_text=option).first.click)
    return time.perf_counter() - t0


def visit(page, title: str, heading: str | None = None, shows: str | None = None) -> float:
    """Open a page from the sidebar; seconds until its heading (default ``title``) and ``shows``
    (a text it draws) are on screen and its run finished."""
    from playwright.sync_api import expect

    t0 = time.perf_counter()
    nav(page, title)
    expect(page.get_by_role("heading", name=heading or title, exact=True)).to_be_visible()
    if shows is not None:
        page.get_by_text(shows).first.wait_for(timeout=DEADLINE_MS)
    settle(page)
    return time.perf_counter() - t0


def first_renders(page, title: str, times: int, heading: str | None = None,
                  shows: str | None = None) -> list[float]:
    """Open the page ``times`` times from the sidebar, going Home in between; the seconds each
    took (``visit``). The page is left open."""
    out = []
    for i in range(times):
        if i:
            visit(page, "Home", "tfviz")
        out.append(visit(page, title, heading, shows))
    return out


def switch(page, label: str, option: str, shows: str) -> float:
    """Pick ``option`` in the page's selectbox ``label``; seconds until ``shows`` is on screen and
    the run finished."""
    from playwright.sync_api import expect

    t0 = select(page, page, label, option)
    expect(page.get_by_text(shows)).to_be_visible()
    settle(page)
    return time.perf_counter() - t0


def chart_title(page, text: str) -> None:
    """Wait for a Plotly chart whose title contains ``text``, then for the run to finish."""
    page.locator(".js-plotly-plot .gtitle", has_text=text).first.wait_for(timeout=DEADLINE_MS)
    settle(page)


def select(page, scope, label: str, option: str) -> float:
    """Pick ``option`` in the selectbox labelled ``label`` inside ``scope``; returns
    perf_counter() at the final click. The list is opened again if something closed it
    (a rerun redraws the box; a scroll while it opens shuts it), until the deadline."""
    box = scope.locator("[data-testid='stSelectbox']").filter(has_text=label).first
    choice = page.get_by_role("option", name=option, exact=True)
    end, attempt_ms = time.perf_counter() + DEADLINE_MS / 1000, 5_000
    while True:
        settle(page)
        box.scroll_into_view_if_needed(timeout=DEADLINE_MS)
        if not choice.is_visible():
            box.click(timeout=DEADLINE_MS)
        try:  # one try (then the list is opened again, each try longer), not the deadline
            choice.wait_for(state="visible", timeout=attempt_ms)
            t0 = time.perf_counter()
            choice.click(timeout=attempt_ms)
            return t0
        except Exception:  # noqa: BLE001 - playwright's TimeoutError: the list shut; open it again
            if time.perf_counter() > end:
                raise
            attempt_ms *= 2
            page.keyboard.press("Escape")


def pct(values, p: float) -> float:
    """The p-th percentile (nearest rank) of ``values``."""
    values = sorted(values)
    return round(values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))], 3)


def report(timings: dict, name: str, firsts: list[float], switches: list[float]) -> str:
    """Record p50/p95 of first renders and of switches in ``timings``; a line to print."""
    for what, xs in (("first_render", firsts), ("switch", switches)):
        if xs:
            timings[f"{name}_{what}_p50_s"], timings[f"{name}_{what}_p95_s"] = pct(xs, 50), pct(xs, 95)
    return (f"\n{name} first render p50 {pct(firsts, 50)} s p95 {pct(firsts, 95)} s; switch p50 "
            f"{pct(switches, 50)} s p95 {pct(switches, 95)} s (mean {statistics.mean(switches):.2f} s)")


def plot_layout(plot) -> dict:
    """Where a Plotly chart's pieces landed (client pixels): the svg, the title, every subplot
    title (annotation) and the font size of every printed heatmap cell number."""
    return plot.evaluate("""(el) => {
      const box = (e) => { const r = e.getBoundingClientRect();
                           return {left: r.left, top: r.top, right: r.right, bottom: r.bottom}; };
      return {svg: box(el.querySelector('svg.main-svg')), title: box(el.querySelector('.gtitle')),
              titles: [...el.querySelectorAll('.annotation-text')].map(box),
              cells: [...el.querySelectorAll('.heatmaplayer text, .hm text, g.textpoint text')]
                       .map(e => parseFloat(getComputedStyle(e).fontSize))};
    }""")


def apart(a: dict, b: dict) -> bool:
    """Two boxes ({left, top, right, bottom}) do not overlap."""
    return a["right"] <= b["left"] or b["right"] <= a["left"] or a["bottom"] <= b["top"] or b["bottom"] <= a["top"]


def assert_readable(layout: dict, min_font_px: float = 11) -> None:
    """No two subplot titles overlap, the title lies inside the chart, every printed number is at
    least ``min_font_px`` high."""
    titles, svg, title = layout["titles"], layout["svg"], layout["title"]
    for i, a in enumerate(titles):
        for b in titles[i + 1:]:
            assert apart(a, b), f"subplot titles overlap: {a} and {b}"
    assert svg["left"] <= title["left"] and title["right"] <= svg["right"], (title, svg)
    assert layout["cells"] and min(layout["cells"]) >= min_font_px, layout["cells"][:5]


def assert_ticks_apart(plot, axis: str = "y") -> int:
    """No two tick labels of the chart's first ``axis`` overlap; returns how many there are."""
    boxes = plot.evaluate(f"""(el) => [...el.querySelectorAll('.{axis}tick text')].map(e => {{
        const r = e.getBoundingClientRect(); return [r.top, r.bottom, r.left, r.right]; }})""")
    key = (lambda b: b[0]) if axis == "y" else (lambda b: b[2])
    boxes.sort(key=key)
    for a, b in zip(boxes, boxes[1:]):
        assert (a[1] <= b[0] + 0.5) if axis == "y" else (a[3] <= b[2] + 0.5), f"tick labels overlap: {a} {b}"
    return len(boxes)


def title_problems(plot) -> list[str]:
    """What is wrong with a chart's titles as drawn: its title cut by the chart's edge, an axis
    title running into it, two annotations (subplot titles, labels) overlapping. [] when clear."""
    got = plot.evaluate("""(el) => {
      const box = (e) => { const r = e.getBoundingClientRect();
                           return {left: r.left, top: r.top, right: r.right, bottom: r.bottom}; };
      const t = el.querySelector('.gtitle');
      return {svg: box(el.querySelector('svg.main-svg')), title: t ? box(t) : null,
              text: t ? t.textContent : '',
              axes: [...el.querySelectorAll('.g-ytitle text, .g-xtitle text')].map(box),
              notes: [...el.querySelectorAll('.annotation-text')].map(box)};
    }""")
    out, title, svg = [], got["title"], got["svg"]
    if title:
        if not (svg["left"] <= title["left"] and title["right"] <= svg["right"] + 0.5):
            out.append(f"{got['text']!r}: title cut ({title} outside {svg})")
        out += [f"{got['text']!r}: an axis title runs into the title" for a in got["axes"] if not apart(a, title)]
    notes = got["notes"]
    out += [f"{got['text']!r}: annotations overlap" for i, a in enumerate(notes) for b in notes[i + 1:]
            if not apart(a, b)]
    return out


def cut_off(page, selector: str) -> list[str]:
    """The visible elements matching ``selector`` whose text the browser cuts (an element inside
    wider than its box: a one-line label with an ellipsis, a select's value) — their texts.
    Elements of a previous run (``data-stale``) and empty ones are not looked at."""
    return page.evaluate("""(sel) => [...document.querySelectorAll(sel)]
        .filter(el => el.offsetParent !== null && el.innerText.trim() !== ''
                      && !el.closest("[data-stale='true']"))
        .filter(el => [el, ...el.querySelectorAll('*')]
                      .some(e => e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1))
        .map(el => el.innerText.replace(/\\s+/g, ' ').slice(0, 80))""", selector)
