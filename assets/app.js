// Small page helpers. Bokeh renders every pane inside a shadow root, where the browser's own
// handling of "#anchor" URLs and of :target cannot see, so we do those two jobs here.
(function () {
  "use strict";

  // 0. The preview (app/shell.py) covers the page while Bokeh's scripts load and draw it; it goes once
  //    Bokeh's document is idle (every root drawn). If the live page never comes (no websocket), the
  //    preview stays: the text is still there to read.
  const preview = document.getElementById("ex-preview");
  if (preview) {
    const drawn = () => {
      const doc = window.Bokeh && window.Bokeh.documents && window.Bokeh.documents[0];
      if (!doc) return false;
      const idle = typeof doc.is_idle === "function" ? doc.is_idle() : doc.is_idle;
      return idle && document.querySelector("[data-root-id] ~ *, [data-root-id] > *") !== null;
    };
    const poll = setInterval(() => {
      if (drawn()) { clearInterval(poll); preview.remove(); }
    }, 50);
  }

  // 0b. The header's overview map (app/overview_map.py) is one row that scrolls sideways on a phone:
  //     bring this chapter's stage ("you are here") into view in it, in the preview and in the live page.
  //     Only the row scrolls (scrollLeft), never the page.
  function showHere(root) {
    const here = root.querySelector('.ovm-compact a[aria-current]');
    const row = here && here.closest(".ovm-row");
    if (!row || row.scrollWidth <= row.clientWidth) return !!here;
    const hr = here.getBoundingClientRect(), rr = row.getBoundingClientRect();
    if (!hr.width) return false;                   // not laid out yet: try again
    const left = row.scrollLeft + hr.left - rr.left - (row.clientWidth - hr.width) / 2;
    row.scrollLeft = Math.max(0, left);
    return true;
  }
  if (preview) showHere(preview);
  let hereTries = 0;
  const hereTimer = setInterval(() => {
    hereTries += 1;
    const map = !document.getElementById("ex-preview") && deepQuery(document, ".ovm-compact");
    if ((map && showHere(map.getRootNode())) || hereTries > 200) clearInterval(hereTimer);
  }, 100);

  function deepFind(root, id) {
    const hit = root.getElementById ? root.getElementById(id) : null;
    if (hit) return hit;
    for (const el of root.querySelectorAll("*")) {
      if (el.shadowRoot) {
        const found = deepFind(el.shadowRoot, id);
        if (found) return found;
      }
    }
    return null;
  }

  function deepActive() {
    let a = document.activeElement;
    while (a && a.shadowRoot && a.shadowRoot.activeElement) a = a.shadowRoot.activeElement;
    return a;
  }

  // 1. Scroll to the URL's #anchor (a glossary entry) once it exists, and keep it in place while
  //    stylesheets and math finish loading and shift the layout; stop as soon as the reader scrolls.
  const id = decodeURIComponent(window.location.hash.slice(1));
  if (id) {
    let ticks = 0, settled = 0, stop = false;
    const halt = () => { stop = true; };
    ["wheel", "touchstart", "keydown", "mousedown"].forEach((e) => window.addEventListener(e, halt, { once: true, passive: true }));
    const timer = setInterval(() => {
      ticks += 1;
      const el = stop ? null : deepFind(document, id);
      if (el) {
        const top = el.getBoundingClientRect().top;
        if (Math.abs(top) > 2) { el.scrollIntoView({ block: "start" }); settled = 0; } else { settled += 1; }
        if (!el.classList.contains("targeted")) el.classList.add("targeted");
      }
      if (stop || settled >= 5 || ticks > 100) clearInterval(timer);
    }, 100);
  }

  // 2. Skip links. "Skip to the text" moves keyboard focus to the page's main heading, inside its
  //    shadow root; "Skip to the widget" to the first control of the chapter's first widget (or the
  //    widget itself when none is enabled yet), so the next keys act on it.
  const FOCUSABLE = 'button:not([disabled]), input:not([disabled]), textarea:not([disabled]), ' +
    'select:not([disabled]), a[href], [tabindex]:not([tabindex="-1"])';
  function deepQuery(root, sel) {
    const hit = root.querySelector(sel);
    if (hit) return hit;
    for (const el of root.querySelectorAll("*")) {
      if (el.shadowRoot) {
        const found = deepQuery(el.shadowRoot, sel);
        if (found) return found;
      }
    }
    return null;
  }
  document.addEventListener("click", (e) => {
    const a = e.composedPath()[0];
    const link = a && a.closest ? a.closest("a.skip-link") : null;
    if (!link) return;
    e.preventDefault();
    e.stopPropagation();
    if (link.classList.contains("skip-widget")) {
      const widget = deepQuery(document, ".ex-widget");
      if (!widget) return;
      const target = deepQuery(widget.shadowRoot || widget, FOCUSABLE) || widget;
      if (target === widget) widget.tabIndex = -1;
      widget.scrollIntoView({ block: "start" });
      target.focus({ preventScroll: true });
      return;
    }
    const h = deepFind(document, "main-content");
    if (h) { h.tabIndex = -1; h.focus(); h.scrollIntoView({ block: "start" }); }
  }, true);

  // 3. Escape hides a glossary tooltip that keyboard focus opened (WCAG 1.4.13: dismissible).
  document.addEventListener("keydown", (e) => {
    if (e.key !== "Escape") return;
    const a = deepActive();
    if (a && a.classList && a.classList.contains("gl-term")) a.blur();
  });
})();
