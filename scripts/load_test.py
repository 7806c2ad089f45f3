"""Load test: N students at once, in real headless Chromium sessions, against `streamlit run`.

    .venv/bin/python scripts/load_test.py --sessions 20 --duration 60
    .venv/bin/python scripts/load_test.py --sweep 5,10,20,30 --duration 45 --json artifacts/load.json
    .venv/bin/python scripts/load_test.py --url http://127.0.0.1:8501 --sessions 3 --duration 10
    .venv/bin/python scripts/load_test.py --scenario pages --client ws --sessions 20 --duration 120
    .venv/bin/python scripts/load_test.py --scenario follow --client ws --sweep 0,30 --duration 90 --think 3

Each session is its own browser context (its own Streamlit session, like a student's tab) in one
Chromium: it opens "/", goes to the Attention explorer, picks the coref model (the shipped
checkpoints/coref.safetensors; without it, a tiny zoo is built into a temp folder) and then
switches heads, with a think time between clicks, until the duration is over. Meanwhile one more
session trains a model on the Train page (a long induction run, stopped at the end), so the
server also trains, as in class.

Measured per session: the first render of the explorer (click on its link -> the heatmap of head 0
is drawn and the script run has finished) and every head switch (click -> the new head's heatmap,
run finished), for --duration seconds after its first render. One unmeasured visit comes first
(the server's very first visitor pays for importing torch and loading the model: reported apart). Errors: Streamlit exception boxes, browser console errors, page errors, anything
that did not render within the timeout. Reported: p50 / p95 per N, the errors, the machine load.
With --sweep, the knee: the smallest N whose p95 passes --target seconds (default 5).

``--scenario pages`` (with ``--client ws``): each student opens Home, then switches among all the
app's pages (``ui.navigation.PAGES``: a random other page after each think time) for --duration
seconds, with the default model of the picker; every page visit is a render (the request until
the script run has finished), reported overall and per page. Errors there: exception boxes,
``st.error`` boxes, and pages that did not answer within the timeout.

``--scenario follow`` (with ``--client ws``; the script starts its own server with a random
teacher key): a teacher unlocks the Lesson page with the key, presses Lead the class, walks once through
every step unmeasured (the server computes each step's view once), then presses Next every
--think seconds for --duration seconds while N students follow (``/lesson?follow=1``, their
fragment ticking once a second as a browser's does), in a process of their own: parsing thirty
students' pages in the leader's event loop had delayed the leader's own measurement. Reported per N of ``--sweep`` (default 0 and
--sessions): the leader's step change (the run its Next caused), and how long after it each
follower's page showed the new step.

Note: the browsers run on the same machine as the server here, so the figures are pessimistic
for a classroom where every student's browser renders on their own computer.

Without --url the script starts its own server (and stops it); tests/e2e use ``StreamlitServer``.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("TFVIZ_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
READY = "[data-testid='stApp'][data-test-script-state='notRunning']"
EXCEPTION_BOX = "[data-testid='stException']"


# ------------------------------------------------------------------------------ the server
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StreamlitServer:
    """``streamlit run app.py`` on a free port, in a subprocess; a context manager.

    ``env`` is added to this process's environment (e.g. TFVIZ_CHECKPOINT_DIR, TFVIZ_TEACHER_KEY)."""

    def __init__(self, env: dict[str, str] | None = None, log: Path | None = None,
                 timeout_s: float = 120) -> None:
        self.env, self.timeout_s = dict(env or {}), timeout_s
        self.log = log or Path(tempfile.mkstemp(prefix="tfviz-server-", suffix=".log")[1])
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.cold_start_s = float("nan")

    def __enter__(self) -> "StreamlitServer":
        cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
               "--server.port", str(self.port), "--server.address", "127.0.0.1",
               "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        self.log.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        with open(self.log, "w") as f:
            self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, env=env)
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"streamlit exited ({self.proc.returncode}):\n{self.log.read_text()[-3000:]}")
            if time.perf_counter() - t0 > self.timeout_s:
                self.__exit__()
                raise RuntimeError(f"streamlit not healthy after {self.timeout_s} s")
            try:
                with urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2) as r:
                    if r.read().decode().strip() == "ok":
                        break
            except OSError:
                pass
            time.sleep(0.1)
        self.cold_start_s = time.perf_counter() - t0
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def checkpoint_env() -> tuple[dict[str, str], str]:
    """(env for the server, model label to pick): the shipped coref model, else a tiny zoo."""
    if (REPO / "checkpoints" / "coref.safetensors").is_file():
        return {}, "coref (shipped)"
    sys.path.insert(0, str(REPO / "tests"))
    from tiny_zoo import build  # noqa: E402

    folder = Path(tempfile.mkdtemp(prefix="tfviz-load-zoo-"))
    build(folder)
    return {"TFVIZ_CHECKPOINT_DIR": str(folder)}, "tiny-coref (shipped)"


# ------------------------------------------------------------------------------ statistics
def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, max(0, round(q / 100 * (len(v) - 1))))]


@dataclass
class Result:
    sessions: int
    duration_s: float
    first: list[float] = field(default_factory=list)
    switch: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    cold_first_s: float | None = None
    load_before: tuple = ()
    load_after: tuple = ()
    train_steps: int | None = None
    pages: dict[str, list[float]] = field(default_factory=dict)  # page -> render seconds (scenario pages)

    def summary(self) -> dict:
        renders = self.first + self.switch
        r = lambda x: round(x, 2)  # noqa: E731
        per_page = {p: {"n": len(v), "p50_s": r(pct(v, 50)), "p95_s": r(pct(v, 95)), "max_s": r(max(v))}
                    for p, v in sorted(self.pages.items()) if v}
        return {"per_page": per_page, "sessions": self.sessions, "duration_s": self.duration_s,
                "cold_first_render_s": None if self.cold_first_s is None else r(self.cold_first_s),
                "first_render_n": len(self.first), "first_render_p50_s": r(pct(self.first, 50)),
                "first_render_p95_s": r(pct(self.first, 95)),
                "switch_n": len(self.switch), "switch_p50_s": r(pct(self.switch, 50)),
                "switch_p95_s": r(pct(self.switch, 95)),
                "render_p50_s": r(pct(renders, 50)), "render_p95_s": r(pct(renders, 95)),
                "render_max_s": r(max(renders)) if renders else None,
                "errors": len(self.errors), "error_samples": self.errors[:10],
                "loadavg_before": [round(x, 2) for x in self.load_before],
                "loadavg_after": [round(x, 2) for x in self.load_after],
                "training_steps_during_run": self.train_steps}


# ------------------------------------------------------------------------------ one student
async def _think(deadline: float, think: float, rng) -> bool:
    """A user's pause (``think`` s, ±50%) before the next action; False once the run's time is up."""
    if time.perf_counter() >= deadline:
        return False
    await asyncio.sleep(think * rng.uniform(0.5, 1.5))
    return time.perf_counter() < deadline


def _next_head(heads: list[str], k: int, current: str) -> str:
    """The k-th head of the cycle, or the one after it when that one is already showing."""
    return heads[k % len(heads)] if heads[k % len(heads)] != current else heads[(k + 1) % len(heads)]


async def _settle(page, timeout_ms: float) -> None:
    await page.wait_for_selector(READY, timeout=timeout_ms)


async def _chart(page, title: str, timeout_ms: float) -> None:
    await page.locator(".js-plotly-plot .gtitle", has_text=title).first.wait_for(timeout=timeout_ms)
    await _settle(page, timeout_ms)


async def _select(page, scope, label: str, option: str, timeout_ms: float) -> float:
    box = scope.locator("[data-testid='stSelectbox']").filter(has_text=label).first
    await box.click(timeout=timeout_ms)
    choice = page.get_by_role("option", name=option, exact=True)
    await choice.wait_for(timeout=timeout_ms)
    t0 = time.perf_counter()
    await choice.click(timeout=timeout_ms)
    return t0


async def student(browser, url: str, i: int, duration: float, model: str, think: float,
                  timeout_s: float, res: Result, rng: random.Random, measure: bool = True) -> None:
    """One student: open the explorer (first render), then switch heads for ``duration`` s."""
    tms = timeout_s * 1000
    ctx = await browser.new_context(base_url=url, viewport={"width": 1280, "height": 900})
    page = await ctx.new_page()
    tag = f"session {i}"
    page.on("console", lambda m: res.errors.append(f"{tag}: console.error: {m.text[:200]}")
            if m.type == "error" else None)
    page.on("pageerror", lambda e: res.errors.append(f"{tag}: page error: {str(e)[:200]}"))
    try:
        await page.goto("/", timeout=tms)
        await _settle(page, tms)
        t0 = time.perf_counter()
        await page.locator("[data-testid='stSidebarNav'] a", has_text="Attention explorer").click()
        await _chart(page, "layer 0 · head 0", tms)
        sidebar = page.locator("[data-testid='stSidebar']")
        picked = await sidebar.locator("[data-testid='stSelectbox']").first.inner_text()
        if model not in picked:
            await _select(page, sidebar, "Model", model, tms)
            await _chart(page, "layer 0 · head 0", tms)
        if not measure:  # the warm-up visit
            res.cold_first_s = time.perf_counter() - t0
            return
        res.first.append(time.perf_counter() - t0)  # (includes picking the model when needed)
        deadline = time.perf_counter() + duration
        box = page.locator("[data-testid='stSelectbox']").filter(has_text="Head").first
        await box.click()
        heads = [h for h in await page.get_by_role("option").all_inner_texts() if h.strip().isdigit()]
        await page.keyboard.press("Escape")
        current, k = "0", 0
        while await _think(deadline, think, rng):
            k += 1
            head = _next_head(heads, k, current)
            try:
                t0 = await _select(page, page, "Head", head, tms)
                await _chart(page, f"layer 0 · head {head}", tms)
                res.switch.append(time.perf_counter() - t0)
                current = head
            except Exception as e:  # noqa: BLE001 - a timeout is a measured failure, go on
                res.errors.append(f"{tag}: head {head}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                await page.reload()
                await _settle(page, tms)
        boxes = await page.locator(EXCEPTION_BOX).all_inner_texts()
        res.errors += [f"{tag}: Streamlit exception: {b.strip()[:300]}" for b in boxes]
    except Exception as e:  # noqa: BLE001
        res.errors.append(f"{tag}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
    finally:
        await ctx.close()


# ------------------------------------------------------------------------------ one student, no browser
class _WsSession:
    """A Streamlit session driven over its websocket with the app's own protobuf messages, as the
    browser does it, minus the rendering: measures what the server takes (script run + sending)."""

    def __init__(self, ws, query: str = ""):
        self.ws, self.query, self.widgets = ws, query, {}
        self.fragments: dict[str, float] = {}  # fragment id -> its run_every (s), as the browser ticks it
        self.page_hash = ""

    async def run(self, page: str, widgets: list, timeout_s: float, fragment: str = "") -> tuple[float, list]:
        from streamlit.proto.BackMsg_pb2 import BackMsg
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        msg = BackMsg()
        msg.rerun_script.query_string, msg.rerun_script.page_name = self.query, page
        msg.rerun_script.widget_states.widgets.extend(widgets)
        if fragment:  # what the browser sends when a fragment's run_every comes round: the page's
            # hash too (without it the server ran the default page)
            msg.rerun_script.fragment_id, msg.rerun_script.is_auto_rerun = fragment, True
            msg.rerun_script.page_script_hash = self.page_hash
        t0 = time.perf_counter()
        await self.ws.send(msg.SerializeToString())
        elements = []
        while True:
            fwd = ForwardMsg()
            fwd.ParseFromString(await asyncio.wait_for(self.ws.recv(), timeout_s))
            kind = fwd.WhichOneof("type")
            if kind == "delta" and fwd.delta.WhichOneof("type") == "new_element":
                elements.append(fwd.delta.new_element)
            elif kind == "page_info_changed":
                self.query = fwd.page_info_changed.query_string
            elif kind == "navigation":  # st.navigation's current page
                self.page_hash = fwd.navigation.page_script_hash
            elif kind == "auto_rerun":
                self.fragments[fwd.auto_rerun.fragment_id] = fwd.auto_rerun.interval
            elif kind == "script_finished":
                if fwd.script_finished == ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                    continue  # a rerun follows (e.g. st.rerun): wait for its end
                if fwd.script_finished == ForwardMsg.FINISHED_WITH_COMPILE_ERROR:
                    raise RuntimeError("the script did not compile")
                return time.perf_counter() - t0, elements

    @staticmethod
    def selectboxes(elements) -> dict:
        return {e.selectbox.label: e.selectbox for e in elements if e.WhichOneof("type") == "selectbox"}

    @staticmethod
    def problems(elements) -> list[str]:
        return [f"Streamlit exception: {e.exception.type}: {e.exception.message[:200]}"
                for e in elements if e.WhichOneof("type") == "exception"]

    @staticmethod
    def chart_titles(elements) -> list[str]:
        out = []
        for e in elements:
            if e.WhichOneof("type") == "plotly_chart":
                title = json.loads(e.plotly_chart.spec).get("layout", {}).get("title", {})
                out.append(title.get("text", "") if isinstance(title, dict) else str(title))
        return out


async def ws_student(url: str, i: int, duration: float, model: str, think: float, timeout_s: float,
                     res: Result, rng: random.Random, measure: bool = True) -> None:
    import websockets
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    tag = f"session {i}"
    try:
        async with websockets.connect(url.replace("http", "ws", 1) + "/_stcore/stream",
                                      subprotocols=["streamlit"], max_size=None) as ws:
            s = _WsSession(ws)
            took, elements = await s.run("attention", [], timeout_s)
            boxes = s.selectboxes(elements)
            keep = []
            if "Model" in boxes and boxes["Model"].options[boxes["Model"].default[0]
                                                          if boxes["Model"].default else 0] != model:
                keep = [WidgetState(id=boxes["Model"].id, string_value=model)]
                more, elements = await s.run("attention", keep, timeout_s)
                took += more
            res.errors += [f"{tag}: {p}" for p in s.problems(elements)]
            if not any("head 0" in t for t in s.chart_titles(elements)):
                res.errors.append(f"{tag}: no head-0 heatmap on the first render")
            if not measure:
                res.cold_first_s = took
                return
            res.first.append(took)
            head_box = s.selectboxes(elements)["Head"]
            heads, current = list(head_box.options), "0"
            deadline, k = time.perf_counter() + duration, 0
            while await _think(deadline, think, rng):
                k += 1
                head = _next_head(heads, k, current)
                try:
                    took, elements = await s.run(
                        "attention", keep + [WidgetState(id=head_box.id, string_value=head)], timeout_s)
                except asyncio.TimeoutError:
                    res.errors.append(f"{tag}: head {head}: no answer within {timeout_s} s")
                    continue
                problems = s.problems(elements)
                res.errors += [f"{tag}: {p}" for p in problems]
                if not any(f"head {head}" in t for t in s.chart_titles(elements)):
                    res.errors.append(f"{tag}: head {head}: its heatmap did not come")
                elif not problems:
                    res.switch.append(took)
                    current = head
    except Exception as e:  # noqa: BLE001
        res.errors.append(f"{tag}: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")


def page_names() -> list[str]:
    """The app's pages by URL name (``ui.navigation.PAGES``; the first, Home, is "")."""
    sys.path.insert(0, str(REPO))
    from ui.navigation import PAGES

    return [""] + [Path(p.file).stem for p in PAGES[1:]]


def _errors_shown(elements) -> list[str]:
    from streamlit.proto.Alert_pb2 import Alert

    return [f"st.error: {e.alert.body[:200]}" for e in elements
            if e.WhichOneof("type") == "alert" and e.alert.format == Alert.ERROR]


async def ws_page_student(url: str, i: int, duration: float, think: float, timeout_s: float,
                          res: Result, rng: random.Random, measure: bool = True) -> None:
    """One student switching among every page (scenario "pages"), over the websocket."""
    import websockets

    tag, pages = f"session {i}", page_names()
    try:
        async with websockets.connect(url.replace("http", "ws", 1) + "/_stcore/stream",
                                      subprotocols=["streamlit"], max_size=None) as ws:
            s = _WsSession(ws)
            current = ""
            took, elements = await s.run(current, [], timeout_s)
            if not measure:
                for page in pages[1:]:  # the warm-up visit goes everywhere once
                    more, elements = await s.run(page, [], timeout_s)
                    took += more
                    res.errors += [f"{tag}: {page}: {p}" for p in s.problems(elements) + _errors_shown(elements)]
                res.cold_first_s = took
                return
            res.first.append(took)
            res.pages.setdefault("home", []).append(took)
            deadline = time.perf_counter() + duration
            while time.perf_counter() < deadline:
                await asyncio.sleep(think * rng.uniform(0.5, 1.5))
                if time.perf_counter() >= deadline:
                    break
                page = rng.choice([p for p in pages if p != current])
                try:
                    took, elements = await s.run(page, [], timeout_s)
                except asyncio.TimeoutError:
                    res.errors.append(f"{tag}: {page or 'home'}: no answer within {timeout_s} s")
                    continue
                problems = s.problems(elements) + _errors_shown(elements)
                res.errors += [f"{tag}: {page or 'home'}: {p}" for p in problems]
                if not problems:
                    res.switch.append(took)
                    res.pages.setdefault(page or "home", []).append(took)
                current = page
    except Exception as e:  # noqa: BLE001
        res.errors.append(f"{tag}: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")


# ------------------------------------------------------------------------------ a class following its teacher
def _headings(elements) -> list[str]:
    """The page's headings; the Lesson's step title is the last."""
    return [e.heading.body for e in elements if e.WhichOneof("type") == "heading"]


def _widget(elements, kind: str, label: str):
    return next((getattr(e, kind) for e in elements if e.WhichOneof("type") == kind
                 and getattr(e, kind).label == label), None)


@dataclass
class Lead:
    """What the leader did: each step change (its title, when its run finished, seconds it took)."""
    changes: list = field(default_factory=list)
    done: bool = False


async def ws_leader(url: str, key: str, duration: float, think: float, timeout_s: float, res: Result,
                    lead: Lead, measure: bool = True) -> None:
    """The teacher over the websocket: unlock with the key, press Lead the class, then press Next (or,
    at the last step, jump back to the first) every ``think`` s for ``duration`` s; every step
    change is a render (``res.switch``). ``measure=False``: one unmeasured pass over every step
    (the server computes and caches each step's view once, as a teacher rehearsing does)."""
    import websockets
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    async with websockets.connect(url.replace("http", "ws", 1) + "/_stcore/stream",
                                  subprotocols=["streamlit"], max_size=None) as ws:
        s = _WsSession(ws)
        _, el = await s.run("lesson", [], timeout_s)
        box = _widget(el, "text_input", "Teacher key")
        if box is None:
            raise RuntimeError("no Teacher key box: start the server with TFVIZ_TEACHER_KEY")
        _, el = await s.run("lesson", [WidgetState(id=box.id, string_value=key)], timeout_s)
        # leading is the server's (issue 41): a button starts it; a teacher who joins an ongoing
        # lead (the rehearsal's) finds "Stop leading" instead
        start = _widget(el, "button", "Lead the class")
        if start is None and _widget(el, "button", "Stop leading") is None:
            raise RuntimeError("the teacher key was refused")
        keep = []
        if start is not None:
            _, el = await s.run("lesson", [WidgetState(id=start.id, trigger_value=True)], timeout_s)
        deadline = time.perf_counter() + (duration if measure else 1e9)
        first = True
        while time.perf_counter() < deadline:
            nxt = next((e.button for e in el if e.WhichOneof("type") == "button" and e.button.label == "Next"), None)
            if nxt is not None and not nxt.disabled:
                action = [WidgetState(id=nxt.id, trigger_value=True)]
            elif not measure and not first:
                break  # the rehearsal has seen every step
            else:
                jump = _widget(el, "selectbox", "Step")
                action = [WidgetState(id=jump.id, string_value=jump.options[0])]
            first = False
            took, el = await s.run("lesson", keep + action, timeout_s)
            problems = s.problems(el) + _errors_shown(el)
            res.errors += [f"leader: {p}" for p in problems]
            title = (_headings(el) or ["?"])[-1]
            lead.changes.append((title, time.time(), took))
            if measure and not problems:
                res.switch.append(took)
                res.pages.setdefault(title, []).append(took)
            await asyncio.sleep(think if measure else 0)
    lead.done = True


async def ws_follower(url: str, i: int, timeout_s: float, res: Result, stop, seen: list) -> None:
    """A student who opened the class link: their fragment ticks as the browser's would (every
    run_every s); each time the page redraws with a new step, (its title, ``time.time()``) goes
    to ``seen``. Runs until ``stop()``."""
    import websockets

    tag = f"follower {i}"
    try:
        async with websockets.connect(url.replace("http", "ws", 1) + "/_stcore/stream",
                                      subprotocols=["streamlit"], max_size=None) as ws:
            s = _WsSession(ws, query="follow=1")
            took, el = await s.run("lesson", [], timeout_s)
            res.first.append(took)
            last = (_headings(el) or [None])[-1]
            while not stop():
                if not s.fragments:
                    await asyncio.sleep(0.5)
                    continue
                frag, every = next(iter(s.fragments.items()))
                await asyncio.sleep(every)
                took, el = await s.run("lesson", [], timeout_s, fragment=frag)
                res.errors += [f"{tag}: {p}" for p in s.problems(el)]
                title = (_headings(el) or [None])[-1]
                if title is not None and title != last:
                    last = title
                    seen.append((title, time.time()))
    except Exception as e:  # noqa: BLE001
        res.errors.append(f"{tag}: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")


def _followers_process(url: str, n: int, timeout_s: float, ramp_s: float, ready, stop, out) -> None:
    """The class, in its own process (the leader's client must not wait behind thirty students'
    pages being parsed): ``n`` followers; ``ready`` set once all are in; until ``stop``; then
    their first renders, the steps they saw with when, and their errors on ``out``."""
    async def main() -> tuple[Result, list]:
        res, seen = Result(n, 0), []
        tasks = []
        for i in range(n):
            tasks.append(asyncio.create_task(ws_follower(url, i, timeout_s, res, stop.is_set, seen)))
            await asyncio.sleep(ramp_s)
        while len(res.first) < n and not all(t.done() for t in tasks):
            await asyncio.sleep(0.2)
        ready.set()
        await asyncio.gather(*tasks)
        return res, seen

    res, seen = asyncio.run(main())
    out.put({"first": res.first, "seen": seen, "errors": res.errors})


def run_follow(url: str, key: str, followers: int, duration: float, think: float,
               timeout_s: float = 60.0, ramp_s: float = 0.1) -> tuple[Result, list]:
    """One leader stepping through the lesson (this process) while ``followers`` students follow
    (another process): the leader's step changes (``Result.switch``) and each follower's delay
    after the leader's change it drew (the list; wall clocks of one machine)."""
    import multiprocessing as mp

    res = Result(followers, duration)
    asyncio.run(ws_leader(url, key, 0, 0, timeout_s, res, Lead(), measure=False))  # the rehearsal
    ctx = mp.get_context("spawn")
    ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = None
    if followers:
        proc = ctx.Process(target=_followers_process, args=(url, followers, timeout_s, ramp_s, ready, stop, out))
        proc.start()
        ready.wait(timeout_s * 4)
    lead = Lead()
    res.load_before = os.getloadavg()
    asyncio.run(ws_leader(url, key, duration, think, timeout_s, res, lead))
    res.load_after = os.getloadavg()
    lag = []
    if proc is not None:
        stop.set()
        got = out.get(timeout=timeout_s * 2)
        proc.join(timeout_s)
        res.first, res.errors = got["first"], res.errors + got["errors"]
        for title, when in got["seen"]:  # the leader's latest change to that step before it was seen
            led = [t for name, t, _ in lead.changes if name == title and t <= when]
            if led:
                lag.append(when - led[-1])
    return res, lag


async def trainer(browser, url: str, started: asyncio.Event, stop: asyncio.Event, timeout_s: float,
                  res: Result) -> None:
    """One more session runs a long training job while the students work; stopped at the end."""
    tms = timeout_s * 1000
    ctx = await browser.new_context(base_url=url, viewport={"width": 1400, "height": 900})
    page = await ctx.new_page()
    try:
        await page.goto("/", timeout=tms)
        await _settle(page, tms)
        await page.locator("[data-testid='stSidebarNav'] a", has_text="Train").click()
        await page.get_by_role("button", name="Start training").wait_for(timeout=tms)
        await _settle(page, tms)
        main = page.locator("[data-testid='stMain']")
        await _select(page, main, "Task", "induction", tms)
        from playwright.async_api import expect

        # the task's preset fills the form (a rerun): wait for it, not for a time
        await expect(page.get_by_label("Name", exact=True)).to_have_value(
            re.compile(r"^induction-"), timeout=tms)
        await _settle(page, tms)
        await page.get_by_label("Steps", exact=True).fill("1000000")
        await page.get_by_role("button", name="Start training").click()
        progress = page.locator("p").filter(has_text=re.compile(r"running — step \d+")).first
        await progress.wait_for(timeout=tms)
        started.set()
        await stop.wait()
        m = re.search(r"running — step (\d+)", await progress.inner_text(timeout=tms))
        res.train_steps = int(m.group(1)) if m else None
        # scoped to the page body: Streamlit's own toolbar also has a "Stop" button while running
        await page.locator("[data-testid='stMain']").get_by_role(
            "button", name="Stop", exact=True).click(timeout=tms)
        await page.locator("p").filter(has_text=re.compile(r"stopped at step \d+")).first.wait_for(timeout=tms)
    except Exception as e:  # noqa: BLE001
        res.errors.append(f"trainer: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
        started.set()
    finally:
        await ctx.close()


async def run_load(url: str, sessions: int, duration: float, model: str, think: float = 1.0,
                   train: bool = True, ramp_s: float = 0.5, timeout_s: float = 60.0,
                   seed: int = 0, client: str = "browser", scenario: str = "heads") -> Result:
    """``client``: "browser" (a Chromium context per session) or "ws" (the session's websocket
    only: the server's side of every render, without drawing it). ``scenario``: "heads" (head
    switches in the Attention explorer) or "pages" (switching among every page; ws only)."""
    if scenario == "pages" and client != "ws":
        raise ValueError("the pages scenario drives sessions over their websocket (--client ws)")
    from playwright.async_api import async_playwright

    res = Result(sessions, duration)
    rng = random.Random(seed)

    def one(i, dur, r, measure=True):
        if scenario == "pages":
            return ws_page_student(url, i, dur, think, timeout_s, res, r, measure)
        if client == "ws":
            return ws_student(url, i, dur, model, think, timeout_s, res, r, measure)
        return student(browser, url, i, dur, model, think, timeout_s, res, r, measure)

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            started, stop = asyncio.Event(), asyncio.Event()
            trainer_task = asyncio.create_task(trainer(browser, url, started, stop, timeout_s, res)) \
                if train else None
            if trainer_task is not None:
                await asyncio.wait_for(started.wait(), timeout_s * 2)
            # one unmeasured visit first: the server's first visitor pays for importing torch,
            # loading the model and building the task's examples (reported as cold_first_render_s)
            await one(-1, 0, rng, measure=False)
            res.load_before = os.getloadavg()
            tasks = []
            for i in range(sessions):  # students arrive over a few seconds, not in one instant
                tasks.append(asyncio.create_task(one(i, duration, random.Random(rng.random()))))
                await asyncio.sleep(ramp_s)
            await asyncio.gather(*tasks)
            res.load_after = os.getloadavg()
            stop.set()
            if trainer_task is not None:
                await trainer_task
        finally:
            await browser.close()
    return res


# ------------------------------------------------------------------------------ command line
def _print(s: dict, target: float) -> None:
    ok = "OK " if s["errors"] == 0 and s["render_p95_s"] <= target else "   "
    load = lambda xs: "/".join(f"{x:.1f}" for x in xs) if xs else "?"  # noqa: E731  (1, 5, 15 min)
    n = s["first_render_n"] + s["switch_n"]
    print(f"{ok}N={s['sessions']:>3}: all renders p50 {s['render_p50_s']:.2f} s / p95 {s['render_p95_s']:.2f} s / "
          f"max {s['render_max_s']} s (n={n}); errors {s['errors']}; load average {load(s['loadavg_before'])} -> "
          f"{load(s['loadavg_after'])}; training steps {s['training_steps_during_run']}", flush=True)
    switch = "page switch" if s.get("per_page") else "head switch"
    print(f"      (cold first visit {s['cold_first_render_s']} s) first render p50 {s['first_render_p50_s']:.2f} s / "
          f"p95 {s['first_render_p95_s']:.2f} s (n={s['first_render_n']}); {switch} p50 {s['switch_p50_s']:.2f} s / "
          f"p95 {s['switch_p95_s']:.2f} s (n={s['switch_n']})", flush=True)
    for page, v in sorted(s.get("per_page", {}).items(), key=lambda kv: -kv[1]["p95_s"]):
        print(f"      {page:>12}: p50 {v['p50_s']:.2f} s / p95 {v['p95_s']:.2f} s / max {v['max_s']:.2f} s "
              f"(n={v['n']})")
    for e in s["error_samples"]:
        print(f"      {e}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=20, help="concurrent sessions (default 20)")
    ap.add_argument("--duration", type=float, default=60, help="seconds of head switching per run")
    ap.add_argument("--sweep", help="comma-separated session counts, e.g. 5,10,20,30 (finds the knee)")
    ap.add_argument("--url", help="an already running tfviz (default: start one)")
    ap.add_argument("--model", help="model label in the sidebar picker (default: coref)")
    ap.add_argument("--think", type=float, default=1.0, help="mean seconds between a student's clicks")
    ap.add_argument("--ramp", type=float, default=0.5, help="seconds between two students' arrivals")
    ap.add_argument("--client", choices=("browser", "ws"), default="browser",
                    help="browser: a Chromium context per session (renders every chart here too); "
                         "ws: the session's websocket only (the server's share of each render)")
    ap.add_argument("--scenario", choices=("heads", "pages", "follow"), default="heads",
                    help="heads: switch heads in the Attention explorer; pages: switch among every "
                         "page (needs --client ws); follow: a teacher steps through the Lesson "
                         "while --sessions students follow (ws; --sweep 0,30 compares the leader's "
                         "step changes without and with them)")
    ap.add_argument("--no-train", action="store_true", help="no training job during the run")
    ap.add_argument("--target", type=float, default=5.0, help="p95 render target in seconds (knee)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds before a render is an error")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args(argv)
    if args.scenario in ("pages", "follow") and args.client != "ws":
        ap.error(f"--scenario {args.scenario} drives sessions over their websocket: add --client ws")
    if args.scenario == "follow":
        return follow_main(args)
    if not os.access(CHROMIUM, os.X_OK):
        print(f"error: no Chromium at {CHROMIUM} (apt-get install -y chromium, or set TFVIZ_CHROMIUM)",
              file=sys.stderr)
        return 2
    counts = [int(x) for x in args.sweep.split(",")] if args.sweep else [args.sessions]
    env, model = ({}, args.model or "coref (shipped)") if args.url else checkpoint_env()
    model = args.model or model
    server = None if args.url else StreamlitServer(env, log=REPO / "artifacts" / "load-test-server.log")
    if server is not None:
        server.__enter__()
    url = args.url or server.url
    print(f"tfviz at {url}; model {model!r}; client {args.client}; {os.cpu_count()} cores; load average "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    results = []
    try:
        for n in counts:
            res = asyncio.run(run_load(url, n, args.duration, model, args.think, not args.no_train,
                                       ramp_s=args.ramp, timeout_s=args.timeout, client=args.client,
                                       scenario=args.scenario))
            s = res.summary()
            if server is not None and not server.alive():
                s["errors"] += 1
                s["error_samples"].append("the server died")
            results.append(s)
            _print(s, args.target)
    finally:
        if server is not None:
            server.__exit__()
    knee = next((s["sessions"] for s in results if s["render_p95_s"] > args.target), None)
    knee_switch = next((s["sessions"] for s in results if s["switch_p95_s"] > args.target), None)
    out = {"url": url, "model": model, "client": args.client, "scenario": args.scenario,
           "cores": os.cpu_count(),
           "target_p95_s": args.target, "ramp_s": args.ramp,
           "think_s": args.think, "training": not args.no_train, "results": results,
           "knee_sessions": knee, "knee_switch_sessions": knee_switch}
    if len(results) > 1:
        def say(k):
            return f"p95 > {args.target:.1f} s from N={k}" if k else f"none up to N={counts[-1]}"
        print(f"knee (all renders): {say(knee)}; knee (head switches only): {say(knee_switch)}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 1 if any(s["errors"] for s in results) else 0


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``; NaN elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return math.nan


def follow_main(args) -> int:
    """``--scenario follow``: the leader's step changes with 0, then N followers (``--sweep``)."""
    import secrets

    key = secrets.token_urlsafe(12)
    counts = [int(x) for x in args.sweep.split(",")] if args.sweep else [0, args.sessions]
    server = StreamlitServer({"TFVIZ_TEACHER_KEY": key}, log=REPO / "artifacts" / "load-test-server.log")
    out = {"scenario": "follow", "cores": os.cpu_count(), "think_s": args.think, "results": []}
    with server:
        print(f"tfviz at {server.url}; a leader and {counts} followers; {os.cpu_count()} cores; load "
              f"average {', '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        for n in counts:
            cpu0, t0 = process_cpu_s(server.proc.pid), time.perf_counter()
            res, lag = run_follow(server.url, key, n, args.duration, args.think, args.timeout)
            cpu_share = (process_cpu_s(server.proc.pid) - cpu0) / (time.perf_counter() - t0)
            r = lambda x: round(x, 2)  # noqa: E731
            row = {"followers": n, "step_changes": len(res.switch), "leader_p50_s": r(pct(res.switch, 50)),
                   "leader_p95_s": r(pct(res.switch, 95)), "leader_max_s": r(max(res.switch, default=math.nan)),
                   "follower_lag_n": len(lag), "follower_lag_p50_s": r(pct(lag, 50)),
                   "follower_lag_p95_s": r(pct(lag, 95)),
                   "per_step_p95_s": {k: r(pct(v, 95)) for k, v in res.pages.items()},
                   "server_cpu_cores": r(cpu_share),  # the server's CPU seconds per second, whole run
                   "errors": len(res.errors), "error_samples": res.errors[:10],
                   "loadavg_before": [r(x) for x in res.load_before], "loadavg_after": [r(x) for x in res.load_after]}
            out["results"].append(row)
            print(f"followers {n:>3}: leader's step change p50 {row['leader_p50_s']} s / p95 {row['leader_p95_s']} s / "
                  f"max {row['leader_max_s']} s (n={row['step_changes']}); followers saw it after p50 "
                  f"{row['follower_lag_p50_s']} s / p95 {row['follower_lag_p95_s']} s (n={row['follower_lag_n']}); "
                  f"server CPU {row['server_cpu_cores']} cores; errors {row['errors']}; load "
                  f"{row['loadavg_before']} -> {row['loadavg_after']}", flush=True)
            for e in row["error_samples"]:
                print(f"      {e}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 1 if any(x["errors"] for x in out["results"]) else 0


if __name__ == "__main__":
    sys.exit(main())
