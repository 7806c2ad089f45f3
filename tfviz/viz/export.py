"""Figures as one self-contained HTML file, for slides and for a class without the server.

Plotly's JavaScript (plotly.min.js from the installed ``plotly`` package, about 4.7 MB) is inlined
once in the page's ``<head>``, so the file opens offline in any browser and every figure stays
interactive (hover with exact values, zoom, the animations' play buttons); nothing is loaded from
the network. Each figure is a section one screen high with its title (a heading unless the figure
shows that title itself) and caption, so scrolling (or
Page Down) in class goes figure by figure; printing puts one figure per page.

    figure_html(fig)                                        # one figure
    slides_html([Slide(fig, "Layer 0 · head 1", "caption")], title="Attention explorer")

Figures are written as they are (tfviz's light theme); captions are plain text with ``**bold**``
and ``code`` spans, as ``st.caption`` shows them.
Plotly escapes ``</script>`` in the figure's data, and every title and caption here is escaped, so a
token typed by a student stays text.
"""
from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

FIGURE_HEIGHT = "560px"  # a figure's height when its layout sets none (Plotly's default is 450 px)
CONFIG = {"displaylogo": False, "responsive": True,
          "toImageButtonOptions": {"format": "png", "scale": 2}}

_STYLE = """
body { font-family: Inter, system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif; color: #1f2937;
       background: #ffffff; margin: 0 auto; max-width: 1400px; padding: 0 24px; }
header { padding: 24px 0 8px; border-bottom: 1px solid #e5e7eb; }
header h1 { margin: 0 0 4px; font-size: 28px; }
header p, nav { color: #6b7280; margin: 4px 0; font-size: 14px; }
nav a { color: #2563eb; margin-right: 14px; text-decoration: none; }
section { min-height: 92vh; padding: 20px 0; border-bottom: 1px solid #e5e7eb; break-before: page; }
section:first-of-type { break-before: auto; }
section h2 { font-size: 20px; margin: 0 0 8px; }
section p.caption { color: #4b5563; font-size: 15px; max-width: 70em; }
"""


@dataclass(frozen=True)
class Slide:
    """One figure of an exported page: the figure, a heading and a caption (both may be empty)."""
    figure: go.Figure
    title: str = ""
    caption: str = ""


def figure_title(fig) -> str:
    """The figure's own title as plain text (tags such as <br> and <sup> removed), or ''."""
    text = getattr(getattr(getattr(fig, "layout", None), "title", None), "text", None) or ""
    return " ".join(re.sub(r"<[^>]*>", " ", text).split())


def _caption_html(text: str) -> str:
    escaped = html.escape(text)
    escaped = re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)  # the markdown st.caption shows
    return re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", escaped)


def _figure_div(fig, div_id: str) -> str:
    return pio.to_html(fig, include_plotlyjs=False, full_html=False, config=CONFIG,
                       default_width="100%", default_height=FIGURE_HEIGHT, div_id=div_id,
                       validate=False)


def slides_html(slides: Sequence[Slide], title: str, subtitle: str = "") -> str:
    """One HTML document: ``title`` and ``subtitle`` on top, a link to each figure, then each
    figure in its own section (heading, interactive figure, caption), plotly.js inlined once."""
    if not slides:
        raise ValueError("nothing to export: no figures")
    sections, links = [], []
    for i, s in enumerate(slides, 1):
        heading = s.title or figure_title(s.figure) or f"Figure {i}"
        links.append(f'<a href="#fig{i}">{i}. {html.escape(heading)}</a>')
        caption = f'<p class="caption">{_caption_html(s.caption)}</p>' if s.caption else ""
        shown = heading == figure_title(s.figure) or (len(slides) == 1 and heading == title)
        h2 = "" if shown else f"<h2>{i}. {html.escape(heading)}</h2>"  # not twice on one screen
        sections.append(f'<section id="fig{i}">{h2}\n'
                        f'{_figure_div(s.figure, f"tfviz-figure-{i}")}\n{caption}</section>')
    nav = f"<nav>{' '.join(links)}</nav>" if len(slides) > 1 else ""
    sub = f"<p>{html.escape(subtitle)}</p>" if subtitle else ""
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html.escape(title)}</title>\n<style>{_STYLE}</style>\n"
            f'<script type="text/javascript">{get_plotlyjs()}</script>\n</head>\n<body>\n'
            f"<header><h1>{html.escape(title)}</h1>{sub}{nav}</header>\n"
            + "\n".join(sections) + "\n</body>\n</html>\n")


def figure_html(fig, title: str = "", caption: str = "", subtitle: str = "") -> str:
    """One figure as a self-contained HTML file (see ``slides_html``); the page title is the
    figure's own title unless ``title`` is given."""
    heading = title or figure_title(fig) or "tfviz figure"
    return slides_html([Slide(fig, heading, caption)], title=heading, subtitle=subtitle)
