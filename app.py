"""tfviz entry point: page setup and navigation. Run with `bash scripts/app.sh`.

To add a page: create app_pages/<name>.py and add one [[page]] entry to ui/pages.toml (the
sidebar and Home's guided tour both come from that list).
Pages import shared helpers from `ui/` (Streamlit) and `tfviz/` (the library), never from this file.
"""
import streamlit as st

# Guarded because multiprocessing (spawn/forkserver) re-imports the entry script in child processes.
if __name__ == "__main__":
    from ui import link_schemas  # noqa: F401  (every page's settings, for ui.links)
    from ui.figures import run_page
    from ui.links import at_start, page_of
    from ui.navigation import navigation
    from ui.session import session_id

    st.set_page_config(page_title="tfviz", layout="wide")

    # Every run (Home included) keeps ?sid=… in the URL: a page switch drops the query string, and
    # the id is what finds this browser's jobs and uploads again after a reload.
    session_id()
    page = navigation()
    # The page's settings in the URL (ui.links): a link just opened applied, the view written
    # back (never the session id in a shared link), "Link to this view" in the sidebar.
    at_start(page_of(page.title))
    # Pages that show a model render the sidebar picker themselves (ui.picker.current_model);
    # after the page, the sidebar offers its figures as one HTML file (ui.figures.page_export).
    run_page(page)
elif __name__ == "app":
    # `streamlit run app.py` serves this file as an ASGI app (it finds `app = st.App(...)` here and
    # imports the module as "app"); each page run still executes it as __main__ (above). The
    # server's own work (ui/server.py): the run manager starts with the server, and every browser
    # gets the cookie that makes its tabs one student.
    from ui.server import lifespan, middleware

    app = st.App(__file__, lifespan=lifespan, middleware=middleware())
