"""The server's CPU time for one visit of each page, with warm caches (issue 15, the class's load).

    .venv/bin/python scripts/page_cpu.py                       # every page of the sidebar
    .venv/bin/python scripts/page_cpu.py compare why --profile 25
    .venv/bin/python scripts/page_cpu.py --server              # a real server, over its websocket

For each page: one AppTest session opens it (computes and fills ``ui/cache.py``), then ``--repeat``
fresh sessions open Home and switch to it, as a student arriving on the page does; reported is the
CPU time of that switch's script run (``time.thread_time`` of the script thread: its own work,
Plotly's conversion of every figure included, not other processes' load), the median over the
repeats. This is what 20 students multiply, measured without the 20: a decision can rest on it on a
busy machine where wall time cannot. ``--profile N``: the N functions with the most cumulative time
in the last repeat's run (cProfile of the script thread). Pages open with the picker's default model
and their default inputs, as in ``scripts/load_test.py --scenario pages``.

``--server``: the same visits against ``streamlit run`` (``load_test.StreamlitServer``), one
websocket session each (``load_test._WsSession``), after one session has visited every page;
reported is the server process's CPU time (utime + stime from /proc, 10 ms ticks) from the switch
until 0.3 s after its script run ended — the script run plus serialising and sending its
messages — with the bytes of its elements and its number of Plotly charts.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pages", nargs="*", help="page file stems (default: every page)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    ap.add_argument("--server", action="store_true", help="measure a real server's process CPU")
    args = ap.parse_args(argv)
    if args.server:
        import asyncio

        return asyncio.run(server_cpu(args.pages, args.repeat))

    import torch
    from streamlit.testing.v1 import AppTest
    from streamlit.testing.v1.local_script_runner import LocalScriptRunner

    torch.set_num_threads(1)  # CPU time of the script thread is then the page's whole cost
    sys.path.insert(0, str(REPO))
    from ui.navigation import PAGES

    pages = args.pages or [Path(p.file).stem for p in PAGES[1:]]
    box: dict = {}
    original = LocalScriptRunner._run_script_thread

    def measured(self):  # the script thread: its CPU time, and a profile when asked
        prof = cProfile.Profile(time.thread_time) if box.get("profile") else None  # CPU, not wall
        t0 = time.thread_time()
        if prof:
            prof.enable()
        try:
            original(self)
        finally:
            if prof:
                prof.disable()
                box["stats"] = prof
            box["cpu"] = time.thread_time() - t0

    LocalScriptRunner._run_script_thread = measured
    app = str(REPO / "app.py")
    print(f"{'page':<12} {'cold s':>7} {'warm CPU s (median)':>20}  each")
    for page in pages:
        at = AppTest.from_file(app, default_timeout=600)
        at.run()
        at.switch_page(f"app_pages/{page}.py").run()
        cold = box["cpu"]
        problems = [e.value for e in at.exception]
        runs = []
        for r in range(args.repeat):
            box["profile"] = args.profile and r == args.repeat - 1
            at = AppTest.from_file(app, default_timeout=600)
            at.run()
            at.switch_page(f"app_pages/{page}.py").run()
            runs.append(box["cpu"])
            problems += [e.value for e in at.exception]
        box["profile"] = False
        print(f"{page:<12} {cold:7.2f} {statistics.median(runs):20.3f}  "
              + " ".join(f"{x:.3f}" for x in runs) + (f"  PROBLEMS: {problems[:2]}" if problems else ""),
              flush=True)
        if args.profile and "stats" in box:
            out = io.StringIO()
            pstats.Stats(box.pop("stats"), stream=out).sort_stats("cumulative").print_stats(args.profile)
            print(out.getvalue())
    return 0


def _process_cpu(pid: int) -> float:
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def server_cpu(pages: list[str], repeat: int) -> int:
    import asyncio

    import websockets

    sys.path.insert(0, str(REPO / "scripts"))
    import load_test as lt

    pages = pages or lt.page_names()[1:]
    env, _ = lt.checkpoint_env()

    async def session(url):
        return websockets.connect(url.replace("http", "ws", 1) + "/_stcore/stream",
                                  subprotocols=["streamlit"], max_size=None)

    with lt.StreamlitServer(env) as server:
        pid = server.proc.pid
        async with await session(server.url) as ws:  # the first visitor fills every cache
            s = lt._WsSession(ws)
            await s.run("", [], 600)
            for page in pages:
                await s.run(page, [], 600)
        print(f"{'page':<12} {'server CPU s (median)':>22} {'wall s':>7} {'MB sent':>8} {'charts':>7}")
        for page in pages:
            runs = []
            for _ in range(repeat):
                async with await session(server.url) as ws:
                    s = lt._WsSession(ws)
                    await s.run("", [], 600)
                    await asyncio.sleep(0.5)
                    c0 = _process_cpu(pid)
                    took, elements = await s.run(page, [], 600)
                    await asyncio.sleep(0.3)
                    runs.append((_process_cpu(pid) - c0, took, sum(e.ByteSize() for e in elements),
                                 sum(e.WhichOneof("type") == "plotly_chart" for e in elements)))
                    problems = s.problems(elements)
            print(f"{page:<12} {statistics.median(r[0] for r in runs):22.2f} "
                  f"{statistics.median(r[1] for r in runs):7.2f} {runs[-1][2] / 1e6:8.2f} {runs[-1][3]:7d}"
                  + (f"  PROBLEMS: {problems[:2]}" if problems else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
