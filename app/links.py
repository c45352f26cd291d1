"""Every internal URL the app writes, in one place.

Pages are real links (``?chapter=<slug>``, ``?page=glossary``), so the browser's back/forward,
open-in-new-tab and bookmarks work. A reader who picked the dark theme keeps it from link to link
because each link carries ``theme=dark`` (Panel reads that query argument itself).
"""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, urlencode


@dataclass(slots=True, frozen=True)
class Links:
    dark: bool = False

    def _q(self, **args: str) -> str:
        if self.dark:
            args["theme"] = "dark"
        return "?" + urlencode(args) if args else "?"

    def cover(self) -> str:
        return self._q() if self.dark else "?"

    def chapter(self, slug: str) -> str:
        return self._q(chapter=slug)

    def glossary(self, anchor: str | None = None) -> str:
        return self._q(page="glossary") + (f"#{quote(anchor)}" if anchor else "")

    def with_theme(self, dark: bool, chapter: str | None = None, page: str | None = None) -> str:
        """The same page in the other theme (what the light/dark toggle links to)."""
        other = Links(dark)
        if chapter:
            return other.chapter(chapter)
        if page == "glossary":
            return other.glossary()
        return other.cover()
