"""The app's pages, listed once: app.py's sidebar navigation and Home's guided tour both read
``PAGES``. To add a page: create app_pages/<name>.py and add one ``PageInfo`` line here.

The folder is app_pages/, not pages/: a folder named pages/ next to app.py switches Streamlit
to its legacy multipage mode until app.py has first called ``st.navigation``, so on a freshly
started server a bookmarked page URL (/attention) ran that file alone, with a sidebar of
lowercase file names and no icons (``PagesManager.uses_pages_directory``).
"""
from __future__ import annotations

from dataclasses import dataclass

import streamlit as st


@dataclass(frozen=True)
class PageInfo:
    file: str    # path from the repository root
    title: str   # as the sidebar shows it
    icon: str    # an emoji: a page's icon is also the tab's favicon, and a ":material/…:" one is
                 # fetched from fonts.gstatic.com, which offline classrooms cannot reach
    blurb: str   # one line for the guided tour: what you do there


PAGES: tuple[PageInfo, ...] = (
    PageInfo("app_pages/home.py", "Home", "🏠",
             "what tfviz is, the device it trains on, and this tour."),
    PageInfo("app_pages/findings.py", "Findings", "🔬",
             "the famous effects (induction heads, heads that resolve “it”, positions that "
             "extrapolate or not), measured on the shipped models."),
    PageInfo("app_pages/tokens.py", "Tokens & embeddings", "🔤",
             "one text cut into characters, words and BPE pieces; token vectors and their "
             "nearest neighbours."),
    PageInfo("app_pages/train.py", "Train", "🏋️",
             "pick a task (copy, reverse, induction, “it”…) and a model size, watch the loss "
             "fall, replay the heads learning."),
    PageInfo("app_pages/attention.py", "Attention explorer", "🔍",
             "Q, K and V per token, every head's attention map, the formula stepped through on "
             "the real numbers, head roles."),
    PageInfo("app_pages/positional.py", "Positional encodings", "📐",
             "sinusoidal, learned, RoPE, ALiBi and T5 side by side; RoPE rotating a real query."),
    PageInfo("app_pages/masks.py", "Masks", "🎭",
             "causal, padding, sliding-window and global masks, and what each lets a token see."),
    PageInfo("app_pages/cost.py", "Cost", "⏱️",
             "time and memory of full attention (O(n²)) against a sliding window (O(n·w)), and "
             "the KV cache, measured here."),
    PageInfo("app_pages/generate.py", "Generate", "✍️",
             "a model writes one token at a time with its KV cache; see where each new token "
             "looked."),
)


def navigation():
    """``st.navigation`` over ``PAGES`` (the first is the default page)."""
    return st.navigation([st.Page(p.file, title=p.title, icon=p.icon, default=i == 0)
                          for i, p in enumerate(PAGES)])


def guided_tour() -> None:
    """Home's tour: one step per page after Home, in sidebar order, each a link to its page."""
    for i, p in enumerate(PAGES[1:], 1):
        st.page_link(p.file, label=f"{i}. **{p.title}** — {p.blurb}", icon=p.icon)
