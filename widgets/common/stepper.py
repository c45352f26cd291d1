"""A row of steps a reader walks with the keyboard, llm-viz style: ← → step, Home/End jump, or click.

    stepper = Stepper(steps=["x", "RMSNorm", "attention", "+"], tips=[...], value=0,
                      label="Stages of one block", css_classes=["fp-stages"])
    stepper.param.watch(lambda e: show(e.new), "value")    # the step the reader is on, 0-based

Each step is a real <button> (Tab reaches the row; the current step is the one Tab lands on, and
the arrows move between steps, as in an ARIA tablist), so the whole row works without a mouse.
Prev/Next buttons sit at the ends. ``value`` syncs both ways: Python may set it too.
The chip text and tips are set with ``textContent``/``title``: never parsed as HTML.
"""
from __future__ import annotations

import param
from panel.custom import JSComponent

from widgets.common.theme import stylesheets


class Stepper(JSComponent):
    value = param.Integer(default=0, bounds=(0, None), doc="The current step, 0-based.")
    steps = param.List(default=[], item_type=str, doc="Each step's chip text.")
    tips = param.List(default=[], item_type=str, doc="Each step's hover/screen-reader description.")
    label = param.String(default="Steps", doc="What the row is, for screen readers.")

    _esm = """
    export function render({ model, el }) {
      const row = document.createElement("div");
      row.className = "stp";
      const prev = document.createElement("button");
      prev.className = "stp-prev"; prev.textContent = "◀"; prev.title = "Previous step (←)";
      prev.setAttribute("aria-label", "previous step");
      const next = document.createElement("button");
      next.className = "stp-next"; next.textContent = "▶"; next.title = "Next step (→)";
      next.setAttribute("aria-label", "next step");
      const list = document.createElement("div");
      list.className = "stp-list"; list.setAttribute("role", "tablist");
      row.append(prev, list, next);
      let chips = [];
      const n = () => model.steps.length;
      const go = (i, focus) => {
        if (!n()) return;
        i = Math.max(0, Math.min(n() - 1, i));
        if (i !== model.value) model.value = i;
        mark();
        if (focus && chips[i]) chips[i].focus();
      };
      function mark() {
        chips.forEach((c, i) => {
          const on = i === model.value;
          c.classList.toggle("on", on);
          c.setAttribute("aria-selected", on ? "true" : "false");
          c.tabIndex = on ? 0 : -1;
        });
        prev.disabled = model.value <= 0;
        next.disabled = model.value >= n() - 1;
      }
      function build() {
        list.setAttribute("aria-label", model.label);
        list.replaceChildren();
        chips = model.steps.map((text, i) => {
          const c = document.createElement("button");
          c.className = "stp-chip"; c.textContent = text; c.setAttribute("role", "tab");
          c.dataset.step = String(i);
          if (model.tips[i]) c.title = model.tips[i];
          c.addEventListener("click", () => go(i, true));
          list.append(c);
          return c;
        });
        mark();
      }
      prev.addEventListener("click", () => go(model.value - 1, false));
      next.addEventListener("click", () => go(model.value + 1, false));
      row.addEventListener("keydown", (e) => {
        const keys = {ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1};
        if (e.key in keys) go(model.value + keys[e.key], true);
        else if (e.key === "Home") go(0, true);
        else if (e.key === "End") go(n() - 1, true);
        else return;
        e.preventDefault();
      });
      model.on("value", mark);
      model.on("steps", build); model.on("tips", build); model.on("label", build);
      build();
      return row;
    }
    """

    def __init__(self, **params):
        params.setdefault("stylesheets", stylesheets())
        params.setdefault("sizing_mode", "stretch_width")
        super().__init__(**params)

    @param.depends("steps", watch=True)
    def _clamp(self) -> None:
        if self.steps and self.value >= len(self.steps):
            self.value = len(self.steps) - 1
