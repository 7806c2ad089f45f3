"""The app's pages, listed once in ``ui/pages.toml``: app.py's sidebar navigation and Home's
guided tour both read ``PAGES``. To add a page: create app_pages/<name>.py and add one [[page]]
entry there.

The folder is app_pages/, not pages/: a folder named pages/ next to app.py switches Streamlit
to its legacy multipage mode until app.py has first called ``st.navigation``, so on a freshly
started server a bookmarked page URL (/attention) ran that file alone, with a sidebar of
lowercase file names and no icons (``PagesManager.uses_pages_directory``).
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

import streamlit as st


@dataclass(frozen=True)
class PageInfo:
    file: str    # path from the repository root
    title: str   # as the sidebar shows it
    icon: str    # an emoji (see pages.toml)
    blurb: str   # one line for the guided tour: what you do there


_LIST = tomllib.loads((Path(__file__).parent / "pages.toml").read_text(encoding="utf-8"))
PAGES: tuple[PageInfo, ...] = tuple(PageInfo(**p) for p in _LIST["page"])


def navigation():
    """``st.navigation`` over ``PAGES`` (the first is the default page)."""
    return st.navigation([st.Page(p.file, title=p.title, icon=p.icon, default=i == 0)
                          for i, p in enumerate(PAGES)])


def guided_tour() -> None:
    """Home's tour: one step per page after Home, in sidebar order, each a link to its page and
    its blurb beneath (a link's label is one line, cut at the column's edge: the blurb wraps)."""
    for i, p in enumerate(PAGES[1:], 1):
        st.page_link(p.file, label=f"{i}. **{p.title}**", icon=p.icon)
        st.caption(p.blurb)
