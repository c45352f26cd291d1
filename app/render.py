"""Chapter Markdown -> a list of segments: HTML prose, live widgets, planned-widget notes, notices.

One chapter body is cut at directive lines (outside fenced code) into prose chunks; each chunk is
rendered by markdown-it with three extras:

* ``[[display|term]]`` glossary marks. The first mark of a term in a chapter becomes a tooltip
  (hover or keyboard focus shows the short definition and a link to the glossary page); later
  marks are plain text. A mark that matches no term is shown as plain text and reported.
* ``$...$`` / ``$$...$$`` math, emitted as ``\\(...\\)`` / ``\\[...\\]``. Panel's HTML pane finds
  exactly those delimiters and typesets them with the MathJax bundled in Bokeh, served by our own
  server. Every ``$`` and ``\\`` outside math is written as an HTML entity, so nothing in prose or
  code can be mistaken for math.
* Fenced code highlighted by Pygments on the server (classes only; the colours are in app.css).
* ``{recorded:NAME:PATH|FORMAT}`` and ``{recorded-source:NAME}``: a GPU figure read from
  engine/bench/data/NAME.json, labelled with its device, command and date, or "not recorded yet"
  (app/recorded_figures.py). Chapters never type such a number in.

Raw HTML is off except the one form the content format allows:
``<details><summary>...</summary>`` ... ``</details>``. Everything else is escaped.
"""
from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from typing import Callable, Union

from markdown_it import MarkdownIt
from mdit_py_plugins.dollarmath import dollarmath_plugin
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import TextLexer, get_lexer_by_name
from pygments.util import ClassNotFound

from app.glossary import Glossary

DIRECTIVE_RE = re.compile(r"^:::\s*widget\s+(?P<name>\S+)\s*(?P<args>\{.*\})?\s*$")
PLANNED_RE = re.compile(r"^<!--\s*widget:\s*(?P<name>[^|]+?)\s*\|\s*(?P<what>.*?)\s*-->\s*$")
FENCE_RE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
DETAILS_OPEN_RE = re.compile(r"^\s*<details>\s*(?:<summary>(?P<summary>[^<]*)</summary>)?\s*$")
DETAILS_CLOSE_RE = re.compile(r"^\s*</details>\s*$")
CHAPTER_LINK_RE = re.compile(r"^\?chapter=(?P<slug>[a-z0-9-]+)(?P<frag>#[\w-]*)?$")


@dataclass(slots=True)
class HtmlSegment:
    html: str


@dataclass(slots=True)
class WidgetSegment:
    name: str
    args: dict


@dataclass(slots=True)
class PlannedWidget:
    name: str
    what: str


@dataclass(slots=True)
class Notice:
    message: str


Segment = Union[HtmlSegment, WidgetSegment, PlannedWidget, Notice]


@dataclass(slots=True)
class RenderedChapter:
    segments: list[Segment]
    unknown_terms: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)   # bad directive lines, with line numbers
    terms_used: list[str] = field(default_factory=list)  # glossary terms given a tooltip, in order
    chapter_links: list[str] = field(default_factory=list)  # slugs named by ?chapter= links


def _entity_guard(s: str) -> str:
    """Hide '$' and '\\' from the client-side math finder; the browser still shows them."""
    return s.replace("\\", "&#92;").replace("$", "&#36;")


def _tex(s: str) -> str:
    # TeX is cut out of the HTML string before it reaches innerHTML, but if typesetting ever fails
    # the source is inserted as-is: keep it free of markup characters.
    return s.replace("<", r"\lt ").replace(">", r"\gt ")


# TeX commands read aloud. The typeset SVG is an image; its name (aria-label, set in the browser from
# the data-speech of the element around it, widgets.js) is this text, so a screen reader says the formula.
_SPOKEN = {
    "cdot": " times ", "times": " times ", "le": " at most ", "leq": " at most ", "ge": " at least ",
    "geq": " at least ", "approx": " about ", "ne": " not equal to ", "to": " to ", "rightarrow": " to ",
    "sum": " sum ", "prod": " product ", "sqrt": " square root of ", "log": " log ", "exp": " exp ",
    "max": " max ", "min": " min ", "ldots": " … ", "dots": " … ", "cdots": " … ", "infty": " infinity ",
    "lt": " less than ", "gt": " greater than ", "in": " in ", "pm": " plus or minus ", "mid": " given ",
    "lceil": " ceiling of ", "rceil": " ", "lfloor": " floor of ", "rfloor": " ", "top": " transposed ",
}
_GREEK = {"alpha", "beta", "gamma", "delta", "epsilon", "varepsilon", "theta", "lambda", "mu", "pi", "sigma",
          "tau", "phi", "omega", "Delta", "Sigma", "Theta", "Omega", "eta", "rho", "kappa", "nu", "xi", "psi", "chi"}
_FRAC_RE = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")


def tex_speech(tex: str) -> str:
    """A plain-words reading of a TeX formula: "\\frac{QK^\\top}{\\sqrt{d}}" -> "QK transposed over
    square root of d". Rough, but a formula read as words, not as an unnamed picture."""
    s = re.sub(r"\^\s*(?:\{\s*\\top\s*\}|\\top|\{\s*T\s*\}|T\b)", " transposed ", tex)
    for _ in range(4):          # innermost groups first: a fraction's parts may hold a root or a subscript
        s = re.sub(r"\\(?:text|mathrm|mathbf|mathit|operatorname|textbf|texttt)\s*\{([^{}]*)\}", r" \1 ", s)
        s = re.sub(r"\\sqrt\s*\{([^{}]*)\}", r" square root of (\1) ", s)
        s = re.sub(r"_\s*\{([^{}]*)\}", r" sub \1 ", s)
        s = re.sub(r"\^\s*\{([^{}]*)\}", r" to the power \1 ", s)
        s = _FRAC_RE.sub(r" (\1) over (\2) ", s)

    def word(m: re.Match) -> str:
        name = m.group(1)
        if name in _SPOKEN:
            return _SPOKEN[name]
        if name in _GREEK:
            return f" {name} "
        return " " if name in ("left", "right", "big", "Big", "quad", "qquad", "displaystyle", ",", ";", "!") else f" {name} "
    s = re.sub(r"\\([A-Za-z]+|[,;!])", word, s)
    s = re.sub(r"\^\s*\{([^{}]*)\}", r" to the power \1 ", s)
    s = re.sub(r"\^\s*(\S)", r" to the power \1 ", s)
    s = re.sub(r"_\s*\{([^{}]*)\}", r" sub \1 ", s)
    s = re.sub(r"_\s*(\S)", r" sub \1 ", s)
    s = s.replace("{", " ").replace("}", " ").replace("&", " ").replace("\\", " ")
    s = s.replace("=", " equals ").replace("+", " plus ").replace("−", " minus ")
    s = re.sub(r"(?<=\s)-(?=\s)", " minus ", s)
    return re.sub(r"\s+", " ", s).strip()


def _math(tex: str, display: bool) -> str:
    """Inline or display math, wrapped in an element that carries its speech text (data-speech)."""
    speech = html.escape(tex_speech(tex), quote=True)
    if display:
        return f'<div class="math-display" data-speech="{speech}">\\[' + _tex(tex) + "\\]</div>\n"
    return f'<span class="math-inline" data-speech="{speech}">\\(' + _tex(tex) + "\\)</span>"


def _highlight(code: str, lang: str, _attrs) -> str:
    try:
        lexer = get_lexer_by_name(lang) if lang else TextLexer()
    except ClassNotFound:
        lexer = TextLexer()
    out = highlight(code, lexer, HtmlFormatter(nowrap=True))   # markdown-it adds <pre><code>
    return _entity_guard(out)


def _recorded_rule(state, silent: bool) -> bool:
    """Inline rule for {recorded:...} and {recorded-source:...} (see app/recorded_figures.py)."""
    src, pos = state.src, state.pos
    if not src.startswith("{recorded", pos):
        return False
    end = src.find("}", pos)
    if end < 0:
        return False
    from app.recorded_figures import FIGURE_RE, SOURCE_RE   # reads engine data: loaded on first use
    text = src[pos:end + 1]
    m, source = FIGURE_RE.fullmatch(text), SOURCE_RE.fullmatch(text)
    if m is None and source is None:
        return False
    if not silent:
        tok = state.push("recorded_figure", "", 0)
        tok.meta = m.groupdict() if m else {"source": source["name"]}
    state.pos = end + 1
    return True


def _render_recorded(tokens, idx) -> str:
    from app.recorded_figures import figure_html, source_html
    meta = tokens[idx].meta
    out = source_html(meta["source"]) if "source" in meta else figure_html(meta["name"], meta["path"], meta["fmt"])
    return _entity_guard(out)


def _glossary_rule(state, silent: bool) -> bool:
    """Inline rule for [[display|term]] / [[term]]; runs before markdown-it's link rule."""
    src, pos = state.src, state.pos
    if not src.startswith("[[", pos):
        return False
    end = src.find("]]", pos + 2)
    if end < 0 or "\n\n" in src[pos:end]:
        return False
    inner = src[pos + 2:end]
    if not inner.strip() or "[" in inner:
        return False
    if not silent:
        display, _, term = inner.partition("|")
        tok = state.push("glossary_term", "", 0)
        tok.meta = {"display": " ".join(display.split()), "term": " ".join((term or display).split())}
    state.pos = end + 2
    return True


def _th(renderer, tokens, idx, options, env, inline: int) -> str:
    """A table's empty corner cell (``| | a | b |``) is data, not a header: a screen reader would announce a
    header with no name (axe: empty-table-header)."""
    tag = renderer.renderToken(tokens, idx, options, env)
    if tokens[inline].type == "inline" and not tokens[inline].content.strip():
        tag = tag.replace("<th", "<td", 1).replace("</th", "</td", 1)
    return tag


class ChapterRenderer:
    """Renders one chapter at a time; remembers which terms already got their tooltip."""

    def __init__(self, glossary: Glossary, glossary_href: Callable[[str], str],
                 chapter_href: Callable[[str], str] | None = None):
        self.glossary = glossary
        self.glossary_href = glossary_href
        self.chapter_href = chapter_href
        md = MarkdownIt("commonmark", {"html": True, "highlight": _highlight, "typographer": False})
        md.enable("table").enable("strikethrough")
        md.use(dollarmath_plugin, allow_space=False, allow_digits=False, double_inline=True,
               allow_labels=False)
        md.inline.ruler.before("link", "glossary_term", _glossary_rule)
        md.inline.ruler.before("emphasis", "recorded_figure", _recorded_rule)
        r = md.add_render_rule
        r("recorded_figure", lambda _r, tokens, idx, options, env: _render_recorded(tokens, idx))
        r("glossary_term", lambda _r, tokens, idx, options, env: self._render_term(tokens, idx, options, env))
        r("math_inline", lambda self_, tokens, idx, options, env: _math(tokens[idx].content, display=False))
        r("math_inline_double", self._render_display_math)
        r("math_block", self._render_display_math)
        r("text", lambda self_, tokens, idx, options, env: _entity_guard(html.escape(tokens[idx].content, quote=False)))
        r("code_inline", lambda self_, tokens, idx, options, env:
          "<code>" + _entity_guard(html.escape(tokens[idx].content)) + "</code>")
        r("code_block", lambda self_, tokens, idx, options, env: _highlight(tokens[idx].content, "", None))
        r("html_block", self._render_html_block)
        r("link_open", lambda _r, tokens, idx, options, env: self._render_link_open(_r, tokens, idx, options, env))
        r("html_inline", lambda self_, tokens, idx, options, env: _entity_guard(html.escape(tokens[idx].content)))
        r("th_open", lambda self_, tokens, idx, options, env: _th(self_, tokens, idx, options, env, idx + 1))
        r("th_close", lambda self_, tokens, idx, options, env: _th(self_, tokens, idx, options, env, idx - 1))
        self.md = md

    # -- render rules ---------------------------------------------------------------------------
    @staticmethod
    def _render_display_math(self_, tokens, idx, options, env) -> str:
        return _math(tokens[idx].content.strip(), display=True)

    @staticmethod
    def _render_html_block(self_, tokens, idx, options, env) -> str:
        content = tokens[idx].content
        m = DETAILS_OPEN_RE.match(content)
        if m:
            summary = html.escape(m["summary"] or "Show answer")
            return f"<details><summary>{_entity_guard(summary)}</summary>\n"
        if DETAILS_CLOSE_RE.match(content):
            return "</details>\n"
        if content.lstrip().startswith("<!--"):
            return ""                                   # comments carry notes for writers only
        return "<p>" + _entity_guard(html.escape(content)) + "</p>\n"

    def _render_link_open(self, renderer, tokens, idx, options, env) -> str:
        """Cross-links written as ``?chapter=slug`` go through the page's link builder (so they keep
        the reader's theme) and are recorded, so tests can check that every target exists."""
        tok = tokens[idx]
        m = CHAPTER_LINK_RE.match(tok.attrGet("href") or "")
        if m:
            env.setdefault("chapter_links", []).append(m["slug"])
            if self.chapter_href is not None:
                tok.attrSet("href", self.chapter_href(m["slug"]) + (m["frag"] or ""))
        return renderer.renderToken(tokens, idx, options, env)

    def _render_term(self, tokens, idx, options, env) -> str:
        meta = tokens[idx].meta
        display = _entity_guard(html.escape(meta["display"]))
        term = self.glossary.lookup(meta["term"])
        if term is None:
            env.setdefault("unknown", []).append(meta["term"])
            return f'<span class="gl-missing" title="not in the glossary">{display}</span>'
        seen = env.setdefault("seen", [])
        if term.term in seen:
            return display
        seen.append(term.term)
        n = len(seen)
        href = html.escape(self.glossary_href(term.anchor))
        return (
            f'<span class="gl-term" tabindex="0" aria-describedby="gl-tip-{n}">{display}'
            f'<span class="gl-tip" role="tooltip" id="gl-tip-{n}">'
            f"<strong>{_entity_guard(html.escape(term.term))}</strong> "
            f"{_entity_guard(html.escape(term.short))} "
            f'<a href="{href}">See in glossary →</a></span></span>'
        )

    # -- public ---------------------------------------------------------------------------------
    def render(self, body: str) -> RenderedChapter:
        if "{recorded-if:" in body:      # a paragraph shown only once its GPU run is recorded (app/recorded_figures.py)
            from app.recorded_figures import resolve_conditionals
            body = resolve_conditionals(body)
        env: dict = {}
        out = RenderedChapter(segments=[])
        chunk: list[str] = []

        def flush() -> None:
            text = "".join(chunk).strip("\n")
            chunk.clear()
            if text.strip():
                out.segments.append(HtmlSegment(self.md.render(text, env)))

        fence: str | None = None
        for lineno, line in enumerate(body.splitlines(keepends=True), start=1):
            f = FENCE_RE.match(line)
            if fence is not None:
                if f and f.group(1)[0] == fence[0] and len(f.group(1)) >= len(fence):
                    fence = None
                chunk.append(line)
                continue
            if f:
                fence = f.group(1)
                chunk.append(line)
                continue
            stripped = line.strip()
            d = DIRECTIVE_RE.match(stripped) if stripped.startswith(":::") else None
            if stripped.startswith(":::") and d is None:
                flush()
                out.problems.append(f"line {lineno}: malformed directive {stripped[:80]!r}")
                out.segments.append(Notice(f"Malformed widget directive on line {lineno}."))
                continue
            if d is not None:
                flush()
                try:
                    args = json.loads(d["args"]) if d["args"] else {}
                    if not isinstance(args, dict):
                        raise ValueError("arguments must be a JSON object")
                except ValueError as exc:
                    out.problems.append(f"line {lineno}: widget {d['name']!r} has bad arguments ({exc})")
                    out.segments.append(Notice(f"Widget “{d['name']}” has bad arguments (line {lineno})."))
                    continue
                out.segments.append(WidgetSegment(d["name"], args))
                continue
            p = PLANNED_RE.match(stripped)
            if p is not None:
                flush()
                out.segments.append(PlannedWidget(p["name"], p["what"]))
                continue
            chunk.append(line)
        flush()
        out.unknown_terms = env.get("unknown", [])
        out.terms_used = env.get("seen", [])
        out.chapter_links = env.get("chapter_links", [])
        return out


def render_inline(text: str) -> str:
    """Escape a short plain string (a title, a subtitle) for use inside our HTML."""
    return _entity_guard(html.escape(text))
