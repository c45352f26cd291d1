"""Entry point for `panel serve app`: one session per page view, routed by the query string.

    ?                    -> cover page: pitch and the 21 sections with reading times
    ?chapter=<slug>      -> one chapter (content/NN-<slug>.md)
    ?page=glossary       -> every glossary term, alphabetical, with anchors
    anything else        -> a friendly "no such chapter" page

Every page is a fresh document, so links are plain links: back/forward, new tabs and shared URLs
all work. The URL never names a file: a slug is looked up among the chapter files we listed.
"""
from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:       # `panel serve app` puts app/ on the path, we also need the repo root
    sys.path.insert(0, _ROOT)

import panel as pn  # noqa: E402

# Bokeh's MathJax bundle (served by this server, no CDN) typesets \( \) and \[ \] in HTML panes.
pn.extension("mathjax", notifications=False)

from app.router import build  # noqa: E402

build(pn.state.session_args)
