// Page helpers for the widgets (loaded on every page beside app.js). Bokeh renders each pane in its
// own shadow root, so these listen on the document and look at the event's composed path.
(function () {
  "use strict";

  // 0. One anonymous id per browser (random, in a cookie), so the engine dashboard can mark this reader's
  //    requests as "yours" on any page, and the per-reader limits count every tab of one reader.
  if (!/(?:^|; )reader=[0-9a-f]{16}(?:;|$)/.test(document.cookie)) {
    const id = Array.from(crypto.getRandomValues(new Uint8Array(8)), (b) => b.toString(16).padStart(2, "0")).join("");
    document.cookie = "reader=" + id + "; path=/; max-age=86400; SameSite=Strict";
  }

  function deepFind(root, sel) {
    const hit = root.querySelector(sel);
    if (hit) return hit;
    for (const el of root.querySelectorAll("*")) {
      if (el.shadowRoot) {
        const found = deepFind(el.shadowRoot, sel);
        if (found) return found;
      }
    }
    return null;
  }

  // 1. Hover links. Elements with the same data-link value in one pane light up together (a token's
  //    coloured span and its id), and the nearest .hover-readout shows the data-tip of the hovered
  //    element, or of an element linked to it.
  let lit = null;
  function light(el, on) {
    const root = el.getRootNode();
    const key = el.getAttribute("data-link");
    root.querySelectorAll('[data-link="' + CSS.escape(key) + '"]').forEach((e) => e.classList.toggle("linked", on));
    let box = el.parentElement, readout = null;          // the nearest .hover-readout around it
    while (box && !(readout = box.querySelector(".hover-readout"))) box = box.parentElement;
    const tipped = el.dataset.tip ? el : root.querySelector('[data-link="' + CSS.escape(key) + '"][data-tip]');
    if (readout && on && tipped) readout.textContent = tipped.dataset.tip;
  }
  function linkTarget(e) {
    for (const el of e.composedPath()) {
      if (el.getAttribute && el.hasAttribute("data-link")) return el;
    }
    return null;
  }
  function over(e) {
    const el = linkTarget(e);
    if (el === lit) return;
    if (lit) light(lit, false);
    lit = el;
    if (el) light(el, true);
  }
  // mousemove as well as mouseover: Chrome skips mouseover after some re-renders of a pane.
  document.addEventListener("mouseover", over, true);
  document.addEventListener("mousemove", over, { capture: true, passive: true });
  document.addEventListener("focusin", over, true);

  // 2. The reader's sentence travels in the URL (widgets/common/sentence.py). The text box marked
  //    .sentence-source is copied into ?sentence= once the reader changes it (replaceState: no reload,
  //    no extra Back-button entries), with mine=1: typing one's own sentence is using it on this page.
  //    Links to other pages of the app carry the sentence but not mine, so each chapter opens on its
  //    worked example (which its prose quotes) and offers "Use my sentence: “…”" (.sentence-choice).
  //    That control is a link that reloads the page with mine toggled: a reload rebuilds every widget
  //    of the page from the URL alone (its first text, its saved example or a live run), so what the
  //    reader sees is exactly what a copied link shows; switching in place would need each widget to
  //    swap its text and results by hand, and the model stays loaded on the server either way.
  const LIMIT = 1000, SOURCE = "sentence-source", MINE = "mine", CHOICE = "sentence-choice";
  let source = null, last = null, tries = 0;
  const choices = new Set();                     // the page's .sentence-choice links (found by scan below)
  function syncChoice(a) {
    // The control follows the URL: no sentence, or the example's own text, shows nothing; else
    // "Use my sentence" while the page shows the example, "Back to the chapter's example" once it uses it.
    const params = new URL(window.location.href).searchParams;
    const sentence = params.get("sentence") || "", mine = params.get(MINE) === "1";
    const row = a.closest(".sc-row") || a;
    const hide = !sentence.trim() || sentence.trim() === (a.dataset.example || "").trim();
    row.hidden = hide;
    if (hide) return;
    const name = mine ? "Back to the chapter's example" : "Use my sentence: “" + sentence + "”";
    a.dataset.mine = mine ? "0" : "1";               // what following the link asks for
    a.title = name;
    a.setAttribute("aria-label", name);
    a.querySelector(".sc-verb").textContent = mine ? "Back to the chapter's example" : "Use my sentence:";
    a.querySelector(".sc-text").textContent = mine ? "" :
      "“" + (sentence.length > 60 ? sentence.slice(0, 60) + "…" : sentence) + "”";
    const hint = row.querySelector(".sc-hint");
    if (hint) hint.textContent = mine ? "Your sentence is shown; the text quotes the example's figures." : "";
    const url = new URL(window.location.href);
    if (mine) url.searchParams.delete(MINE); else url.searchParams.set(MINE, "1");
    a.href = url.toString();
  }
  function record(value) {
    last = value;
    const url = new URL(window.location.href);
    if (value.trim() && value.length <= LIMIT) {
      url.searchParams.set("sentence", value);
      url.searchParams.set(MINE, "1");
    } else {                                         // nothing to carry (or too long to share): the page's
      url.searchParams.delete("sentence");           // own text is in the box, no choice to offer
      url.searchParams.delete(MINE);
    }
    window.history.replaceState(window.history.state, "", url);
    choices.forEach((a) => { if (a.isConnected) syncChoice(a); else choices.delete(a); });
  }
  // Typing: "input" events cross shadow roots, so one listener sees a keystroke in any pane, at once.
  document.addEventListener("input", (e) => {
    const path = e.composedPath();
    if (!path.some((el) => el.classList && el.classList.contains(SOURCE))) return;
    const box = path[0];
    if (!box || typeof box.value !== "string") return;
    source = box;
    if (box.value !== last) record(box.value);
  }, true);
  // Text the server puts in the box (a sample button) raises no event: watch the box we know of.
  setInterval(() => {
    if (!source || !source.isConnected) {
      if (tries > 40 && tries++ % 5) return;                     // every 2 s after the first 16 s
      const host = deepFind(document, "." + SOURCE);               // the widget's host; its box is inside
      source = host ? (host.shadowRoot || host).querySelector("textarea, input") : null;
      if (!source) { tries += 1; return; }
      // The text the page opened with (the example, or the URL's sentence) stays out of the URL; a box
      // found again after a re-render is compared with what was last recorded.
      if (last === null) { last = source.value; return; }
    }
    if (source.value !== last) record(source.value);
  }, 400);

  function carry(e) {
    for (const el of e.composedPath()) {
      if (el.tagName !== "A") continue;
      if (el.classList.contains(CHOICE)) { syncChoice(el); return; }   // this page, mine toggled, as of now
      const sentence = new URL(window.location.href).searchParams.get("sentence");
      if (!sentence) return;
      const raw = el.getAttribute("href") || "";
      if (!raw || raw.startsWith("#")) return;            // same-page anchors stay as they are
      const url = new URL(el.href, window.location.href);
      if (url.origin !== window.location.origin || url.pathname !== window.location.pathname) return;
      url.searchParams.set("sentence", sentence);
      url.searchParams.delete(MINE);                      // the next chapter opens on its own example
      el.href = url.toString();
      return;
    }
  }
  document.addEventListener("click", carry, true);
  document.addEventListener("auxclick", carry, true);

  // 3. Step with a key (llm-viz style). A widget holds an element such as
  //    <div data-keys="ArrowRight n" data-press=".kv-step" tabindex="0">; while focus is anywhere in
  //    that widget (except a text box or a list), those keys click the button inside the .kv-step
  //    component of the same widget. Keys never act on a widget the reader is not in.
  const TYPING = new Set(["INPUT", "TEXTAREA", "SELECT"]);
  function widgetOf(path) {
    return path.find((el) => el.classList && [...el.classList].some((c) => c.startsWith("widget-"))) || null;
  }
  let clicked = null;                                     // the widget the reader last pressed the pointer in
  document.addEventListener("pointerdown", (e) => { clicked = widgetOf(e.composedPath()); }, true);
  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const path = e.composedPath();
    const first = path[0];
    if (!first || TYPING.has(first.tagName) || first.isContentEditable) return;
    let widget = widgetOf(path);
    // A click on a widget's plain text leaves the focus on the page itself, not in the widget; the keys
    // still belong to the widget the reader last clicked in, while nothing else has the focus.
    if (!widget && (first === document.body || first === document.documentElement) && clicked && clicked.isConnected) {
      widget = clicked;
    }
    if (!widget) return;
    if (ROVE_KEYS.has(e.key) && first.parentElement && first.parentElement.dataset.rove) return;   // chips move
    const root = widget.shadowRoot || widget;
    const zone = deepFind(root, "[data-keys]");
    if (!zone || !zone.dataset.keys.split(" ").includes(e.key)) return;
    const host = deepFind(root, zone.dataset.press);
    const button = host && (host.shadowRoot || host).querySelector("button");
    if (!button || button.disabled) return;
    e.preventDefault();                                   // the arrow must not also scroll the page
    button.click();
  });

  // 4. Text boxes have a length limit (maxlength); the browser alone would cut a long paste silently.
  //    A paste that does not fit is refused when it is far over the limit (a 1 MB paste never reaches
  //    the server) and cut to fit otherwise; either way a note under the box says so.
  const REFUSE_FACTOR = 4;
  function note(box, text) {
    const root = box.getRootNode();
    let p = root.querySelector(".paste-note");
    if (!p) {
      p = document.createElement("p");
      p.className = "w-note paste-note";
      p.setAttribute("role", "status");
      box.insertAdjacentElement("afterend", p);
    }
    p.textContent = text;
  }
  document.addEventListener("paste", (e) => {
    const box = e.composedPath()[0];
    if (!box || !TYPING.has(box.tagName) || !(box.maxLength > 0)) return;
    const pasted = (e.clipboardData && e.clipboardData.getData("text")) || "";
    const kept = box.value.length - Math.abs((box.selectionEnd || 0) - (box.selectionStart || 0));
    const room = box.maxLength - kept;
    if (pasted.length <= room) return;
    const n = (x) => x.toLocaleString("en-US");
    if (pasted.length > REFUSE_FACTOR * box.maxLength) {
      e.preventDefault();
      note(box, "Not pasted: that text has " + n(pasted.length) + " characters and this box takes at most " +
           n(box.maxLength) + ".");
    } else {
      note(box, "Only the first " + n(Math.max(room, 0)) + " pasted characters fit: this box takes at most " +
           n(box.maxLength) + " characters.");
    }
  }, true);
  // 5. Names for screen readers. Bokeh draws some controls without one: a slider's handle, a spinner's
  //    arrows, a checkbox beside its text, the input of a composite control whose label is a sibling
  //    component; and MathJax draws each formula as an unnamed <svg role="img">. Each gets its name from
  //    what the page already shows (the control's visible label; the formula's speech text, written by
  //    the server in data-speech). Every shadow root is watched, so re-rendered parts are named again.
  const watched = new WeakSet(), dirty = new Set();
  let queued = false;
  function words(el) { return el ? (el.textContent || "").replace(/\s+/g, " ").trim() : ""; }
  function ownText(el) {                     // "Layer: <span>13</span>" -> "Layer"
    if (!el) return "";
    const t = [...el.childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent).join("");
    return (t.trim() ? t : el.textContent || "").replace(/\s+/g, " ").replace(/[:\s]+$/, "").trim();
  }
  function siblingLabel(el) {               // a composite control: its title is a Div beside it
    let root = el.getRootNode();
    for (let i = 0; i < 3 && root && root.host; i += 1) {
      const outer = root.host.getRootNode();
      const div = deepFind(outer, ".bk-Div");
      const t = div ? ownText(div.shadowRoot || div) : "";
      if (t) return t;
      root = outer;
    }
    return "";
  }
  function visible(el) { return !!el && el.getClientRects().length > 0 && getComputedStyle(el).display !== "none"; }
  function labelOf(root, control) {
    const title = root.querySelector(".bk-slider-title, label");
    return (visible(title) && ownText(title)) || ownText(root.querySelector(".bk-label")) || siblingLabel(control);
  }
  function name(root) {
    root.querySelectorAll('.noUi-handle[role="slider"]').forEach((h) => {
      if (!h.getAttribute("aria-label")) { const n = labelOf(root, h); if (n) h.setAttribute("aria-label", n); }
      const shown = words(root.querySelector(".bk-slider-value")) || words(h.querySelector(".noUi-tooltip"));
      if (shown && h.getAttribute("aria-valuetext") !== shown) h.setAttribute("aria-valuetext", shown);
    });
    root.querySelectorAll("input, textarea, select").forEach((c) => {
      if (c.type === "hidden" || c.getAttribute("aria-label")) return;
      const lab = c.id ? root.querySelector('label[for="' + CSS.escape(c.id) + '"]') : null;
      if (lab && visible(lab) && words(lab)) return;          // a visible <label for> names it already
      if (c.closest("label") && words(c.closest("label"))) return;
      const n = labelOf(root, c);
      if (n) c.setAttribute("aria-label", n);
    });
    root.querySelectorAll(".bk-spin-btn").forEach((b) => {
      if (b.getAttribute("aria-label")) return;
      const input = b.parentElement && b.parentElement.querySelector("input");
      const what = (input && input.getAttribute("aria-label")) || labelOf(root, b);
      b.setAttribute("aria-label", (b.classList.contains("bk-spin-btn-up") ? "Increase " : "Decrease ") + what);
      b.tabIndex = -1;                                         // the arrow keys in the box do the same
    });
    root.querySelectorAll("a." + CHOICE).forEach((a) => {
      if (!choices.has(a)) { choices.add(a); syncChoice(a); }      // a pane (re)drawn: in step with the URL
    });
    root.querySelectorAll("mjx-container > svg:not([aria-label])").forEach((svg) => {
      const holder = svg.closest("[data-speech]");
      if (holder) svg.setAttribute("aria-label", holder.dataset.speech);
    });
    root.querySelectorAll("pre, .fp-lens-box, .math-display, .prose table").forEach((box) => {
      if (!sized.has(box)) { sized.add(box); resized.observe(box); }
      scrollable(box);
    });
  }
  // A box that scrolls is reachable by keys (its arrows scroll it); its size may only settle after
  // fonts and layout, so each such box is checked again whenever its size changes.
  const sized = new WeakSet();
  function scrollable(box) {
    if (box.hasAttribute("tabindex")) return;
    const style = getComputedStyle(box);
    const across = box.scrollWidth > box.clientWidth + 1 && /auto|scroll/.test(style.overflowX);
    const down = box.scrollHeight > box.clientHeight + 1 && /auto|scroll/.test(style.overflowY);
    if (across || down) box.tabIndex = 0;
  }
  const resized = new ResizeObserver((entries) => entries.forEach((e) => scrollable(e.target)));
  function scan(root) {
    name(root);
    rove(root);
    for (const el of root.querySelectorAll("*")) {
      if (el.shadowRoot && !watched.has(el.shadowRoot)) { watch(el.shadowRoot); scan(el.shadowRoot); }
    }
  }
  function flush() {
    queued = false;
    const roots = [...dirty];
    dirty.clear();
    roots.forEach((r) => { if (r === document || r.host && r.host.isConnected) scan(r); });
  }
  function watch(root) {
    watched.add(root);
    new MutationObserver(() => {
      dirty.add(root);
      if (!queued) { queued = true; requestAnimationFrame(flush); }
    }).observe(root, { childList: true, subtree: true, characterData: true });
  }
  watch(document);
  dirty.add(document);
  queued = true;
  requestAnimationFrame(flush);

  // 7. Token chips are one Tab stop per row, not one each (a 35-token sequence was 35 Tab presses): in a
  //    parent holding two or more focusable chips ([data-link][tabindex]), only one chip keeps tabindex 0
  //    (the last one focused, else the first) and the arrow keys, Home and End move between them. The
  //    hover link (1.) still lights the chip that has the focus.
  const ROVE_KEYS = new Set(["ArrowRight", "ArrowDown", "ArrowLeft", "ArrowUp", "Home", "End"]);
  function rove(root) {
    const groups = new Set();
    root.querySelectorAll("[data-link][tabindex]").forEach((chip) => { if (chip.parentElement) groups.add(chip.parentElement); });
    groups.forEach((group) => {
      const chips = [...group.children].filter((c) => c.hasAttribute("data-link") && c.hasAttribute("tabindex"));
      if (chips.length < 2) return;
      group.dataset.rove = "1";
      const current = chips.find((c) => c.dataset.roveCurrent) || chips[0];
      chips.forEach((c) => { c.tabIndex = c === current ? 0 : -1; });
    });
  }
  function rovedChip(e) {
    const chip = e.composedPath()[0];
    const group = chip && chip.parentElement;
    return group && group.dataset && group.dataset.rove && chip.hasAttribute("data-link") ? chip : null;
  }
  function makeCurrent(chip) {
    [...chip.parentElement.children].forEach((c) => {
      if (!c.hasAttribute("data-link") || !c.hasAttribute("tabindex")) return;
      c.tabIndex = c === chip ? 0 : -1;
      if (c === chip) c.dataset.roveCurrent = "1"; else delete c.dataset.roveCurrent;
    });
  }
  // A focus move inside one shadow root never reaches the document (the event would be retargeted to the
  // same host on both sides), so the arrow keys and a pointer press set the current chip themselves.
  ["focusin", "pointerdown"].forEach((type) => document.addEventListener(type, (e) => {
    const chip = rovedChip(e);
    if (chip) makeCurrent(chip);
  }, true));
  document.addEventListener("keydown", (e) => {
    if (!ROVE_KEYS.has(e.key) || e.ctrlKey || e.metaKey || e.altKey) return;
    const chip = rovedChip(e);
    if (!chip) return;
    const chips = [...chip.parentElement.children].filter((c) => c.hasAttribute("data-link") && c.hasAttribute("tabindex"));
    const i = chips.indexOf(chip);
    const next = {ArrowRight: i + 1, ArrowDown: i + 1, ArrowLeft: i - 1, ArrowUp: i - 1, Home: 0, End: chips.length - 1}[e.key];
    e.preventDefault();                                    // the arrow moves the focus, not the page
    if (next >= 0 && next < chips.length) { makeCurrent(chips[next]); chips[next].focus(); }
  }, true);

  // 6. A checkbox's text is its label: a click on it toggles the box (Bokeh draws them as siblings).
  document.addEventListener("click", (e) => {
    const el = e.composedPath()[0];
    if (!el || !el.classList || !el.classList.contains("bk-label")) return;
    const box = el.parentElement && el.parentElement.querySelector('input[type="checkbox"]');
    if (box && !box.disabled && el.previousElementSibling === box) box.click();
  }, true);
})();
