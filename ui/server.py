"""What the web server does for itself, before and beside any page (``app.py`` is served as an
``st.App``, which ``streamlit run app.py`` finds and runs under uvicorn):

- ``lifespan``: when the server starts, the run manager of the checkpoint folder is made
  (``ui.jobs.job_manager``): its supervision keeps the training workers, so runs queued or
  interrupted before a restart train again with nobody on a page.
- ``ClientCookie``: every browser gets a random ``tfviz_client`` cookie on its first request
  (HttpOnly, a year); every tab of that browser sends it, so its sessions count as one student
  for the jobs limit and the fair queue (``ui.session.client_id``).
"""
from __future__ import annotations

import os
import re
import secrets
import threading
from contextlib import asynccontextmanager

CLIENT_COOKIE = "tfviz_client"
CLIENT_ID = re.compile(r"[0-9a-f]{16}")
_MAX_AGE = 365 * 86400


@asynccontextmanager
async def lifespan(app):
    """At the server's start: the run manager (in a thread: the server answers at once; the
    manager imports torch and starts its supervision and a warm worker)."""
    import tfviz  # noqa: F401 - imported here, before the thread: two threads importing the package at once
    # (this one and the first page's run) met it partially initialised (ImportError: cached_task)
    from .jobs import job_manager

    def start() -> None:
        try:
            job_manager()
        except Exception:  # noqa: BLE001 - the first page says what is wrong (e.g. the store)
            import traceback

            traceback.print_exc()

    threading.Thread(target=start, daemon=True, name="tfviz-runs-start").start()
    if os.environ.get("TFVIZ_LESSON_WARM", "0") not in ("", "0", "false", "no"):
        threading.Thread(target=_warm_lesson, daemon=True, name="tfviz-lesson-warm").start()
    yield


def _warm_lesson() -> None:
    """Issue 41, item 3: every Lesson step's default view computed at start, in the background
    (``ui.lesson.warm_up``); one line on stderr when done (the warm-up time)."""
    import logging
    import sys

    class _OwnThread(logging.Filter):  # the cached loaders it calls say "missing ScriptRunContext"
        def filter(self, record: logging.LogRecord) -> bool:  # once a call: ~150 lines at start
            return threading.current_thread().name != "tfviz-lesson-warm"

    logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context").addFilter(_OwnThread())
    try:
        from .lesson import warm_up

        done = warm_up()
        print(f"tfviz: the Lesson's {done['steps']} steps warmed in {done['seconds']} s"
              + (f"; failed: {done['failed']}" if done["failed"] else ""), file=sys.stderr, flush=True)
    except Exception:  # noqa: BLE001 - a warm-up never stops the server
        import traceback

        traceback.print_exc()


def _has_client(headers) -> bool:
    for key, value in headers:
        if key == b"cookie":
            for part in value.decode("latin-1").split(";"):
                name, _, val = part.strip().partition("=")
                if name == CLIENT_COOKIE and CLIENT_ID.fullmatch(val):
                    return True
    return False


class ClientCookie:
    """ASGI middleware: an HTTP response to a browser without a valid ``tfviz_client`` cookie
    sets one (random, 64 bits); requests that carry it pass untouched."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or _has_client(scope.get("headers", [])):
            return await self.app(scope, receive, send)
        cookie = (f"{CLIENT_COOKIE}={secrets.token_hex(8)}; Path=/; Max-Age={_MAX_AGE}; HttpOnly; "
                  "SameSite=Lax").encode()

        async def send_with_cookie(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie)]}
            await send(message)

        return await self.app(scope, receive, send_with_cookie)


def middleware() -> list:
    from starlette.middleware import Middleware

    return [Middleware(ClientCookie)]
