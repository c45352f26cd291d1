"""`prefix-cache` (chapter 16): a shared system prompt and a few questions sent through a private
engine of the reader's own; the blocks that hit the prefix cache light up with their chained hashes
and ref counts, and prefill tokens and TTFT are measured with caching on and off.

    Send                  Q1 alone, then Q2 … Qn together (compute.py): they share Q1's blocks
    Change an early word  one word near the start of the system prompt swapped, then sent: the cache
                          still holds the old blocks (sent first if nothing was), yet every block from
                          the edit on misses
    Empty the cache       a fresh private engine: the next send starts cold

The private engine (and its cache) lasts for the reader's visit and is released when the page closes
(compute.py); view.py draws the blocks and the totals.
"""
from __future__ import annotations

import re
import time
from statistics import median

import panel as pn
import param

from widgets.common import Widget, clip, example, html_pane, measured, register
from widgets.prefix_cache.compute import (MAX_QUESTION_TOKENS, MAX_QUESTIONS, MAX_SYSTEM_TOKENS, PrefixLab,
                                          cut_to_tokens)
from widgets.prefix_cache.view import blocks_html, progress_text, summary_html

DEFAULT_SYSTEM = ("You are a patient tutor for people learning how large language models run on real hardware. "
                  "Answer in two or three short sentences, in plain words, and give one concrete number when it "
                  "helps. If a question mixes up prefill and decode, say which is which before you answer it.")
DEFAULT_QUESTIONS = ("What is a KV cache?", "Why is decode memory-bound?", "What does a block table hold?")
MAX_SYSTEM_CHARS = 800
MAX_QUESTION_CHARS = 200
SWAP = ("patient", "cheerful")                # "Change an early word" toggles between these ...


def early_word_changed(system: str) -> str:
    """The system prompt with one early word changed: a SWAP word, or else its first long word."""
    for old, new in (SWAP, SWAP[::-1]):
        if re.search(rf"\b{old}\b", system):
            return re.sub(rf"\b{old}\b", new, system, count=1)
    match = re.search(r"\b[A-Za-z]{4,}\b", system)        # ... or its first word of four letters or more
    return system[:match.start()] + "curious" + system[match.end():] if match else "Curious " + system


def parse_questions(text: str) -> tuple[list[str], list[str]]:
    """The non-empty lines, at most MAX_QUESTIONS of them, and notes for what was dropped or cut."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    notes = [f"Only the first {MAX_QUESTIONS} questions are sent."] if len(lines) > MAX_QUESTIONS else []
    kept = []
    for line in lines[:MAX_QUESTIONS]:
        line, note = clip(line, MAX_QUESTION_CHARS)
        kept.append(line)
        if note:
            notes.append(f"A question was cut to {MAX_QUESTION_CHARS} characters.")
    return kept, notes


@example
def prefix_cache_example(llm) -> dict:
    lab = PrefixLab(llm)
    data = lab.send(DEFAULT_SYSTEM, list(DEFAULT_QUESTIONS))
    lab.close()
    return data


@register
class PrefixCacheWidget(Widget):
    css = "pc"
    live_text = "{model} on {device}: press Send to run them in a private engine whose cache is yours alone"
    own_thread = True
    system = param.String(default=DEFAULT_SYSTEM, doc="the system prompt every request starts with")
    questions = param.List(default=list(DEFAULT_QUESTIONS), item_type=str, allow_None=True,
                           doc="the questions (the reader's sentence replaces the first)")

    def __init__(self, engine, **params):
        super().__init__(engine, **params)
        first = list(self.questions or DEFAULT_QUESTIONS)
        first[0] = self.reader_sentence(first[0])
        self._system = pn.widgets.TextAreaInput(label="System prompt (the start every request shares)",
                                                value=self.system[:MAX_SYSTEM_CHARS], rows=3,
                                                max_length=MAX_SYSTEM_CHARS, sizing_mode="stretch_width",
                                                css_classes=["pc-system"])
        self._questions = pn.widgets.TextAreaInput(label=f"Questions, one per line (up to {MAX_QUESTIONS})",
                                                   value="\n".join(first), rows=3, sizing_mode="stretch_width",
                                                   max_length=MAX_QUESTIONS * (MAX_QUESTION_CHARS + 1) + 40,
                                                   css_classes=["pc-questions"])
        self._send = pn.widgets.Button(label="Send", color="primary", disabled=True, width=110,
                                       css_classes=["pc-send"])
        self._edit = pn.widgets.Button(label="Change an early word", disabled=True, width=190,
                                       css_classes=["pc-edit"])
        self._clear = pn.widgets.Button(label="Empty the cache", disabled=True, width=150, css_classes=["pc-clear"])
        self._send.on_click(lambda e: self._submit())
        self._edit.on_click(lambda e: self._change_word())
        self._clear.on_click(lambda e: self._submit(clear=True))
        self._blocks = html_pane("", ["pc-out"])
        self._summary = html_pane("", ["pc-summary"])
        self._lab: PrefixLab | None = None
        self.on_page_close(self._close_lab)
        self.layout = pn.Column(
            self.title("<b>Live demo · the prefix cache</b> — requests that start with the same system prompt "
                       "share its KV blocks instead of computing them again."),
            self.gate.pane, self._system, self._questions,
            pn.FlexBox(self._send, self._edit, self._clear, flex_wrap="wrap"), self.notes, self._blocks,
            self._summary, sizing_mode="stretch_width", css_classes=["pc-widget"])
        if self.example is not None:
            self._paint(self.example.data, self.example.label)
        self.gate.start()

    # -- jobs -------------------------------------------------------------------------------------
    def on_live(self, llm) -> None:
        self._enable(True)

    def on_busy(self, busy: bool) -> None:
        super().on_busy(busy)
        self._enable(not busy and self.gate.live)

    def _enable(self, on: bool) -> None:
        for b in (self._send, self._edit, self._clear):
            b.disabled = not on

    def _change_word(self) -> None:
        before = self._system.value or DEFAULT_SYSTEM
        self._system.value = early_word_changed(before)
        self._submit(warm=before)

    def _submit(self, clear: bool = False, warm: str | None = None) -> None:
        """Send the prompts. ``warm``: on a cache that holds nothing yet, send this system prompt first
        (the unedited one), so the edited send has blocks to miss against."""
        if not self.gate.live:
            return
        llm = self.gate.llm
        system, note = clip((self._system.value or "").strip(), MAX_SYSTEM_CHARS)
        questions, notes = parse_questions(self._questions.value)
        if not system or not questions:
            self.say("Type a system prompt and at least one question.")
            return
        notes = [note] + notes

        def work(job):
            if self._lab is None:
                self._lab = PrefixLab(llm)
            elif clear:
                self._lab.clear()
            if warm and self._lab.previous is None:
                self._lab.send(cut_to_tokens(llm, clip(warm.strip(), MAX_SYSTEM_CHARS)[0], MAX_SYSTEM_TOKENS)[0],
                               [cut_to_tokens(llm, q, MAX_QUESTION_TOKENS)[0] for q in questions], check=job.check,
                               progress=lambda p: job.post({**p, "warm": True}))
            sys_text, cut = cut_to_tokens(llm, system, MAX_SYSTEM_TOKENS)
            if cut:
                notes.append(f"The system prompt was cut to its first {MAX_SYSTEM_TOKENS} tokens.")
            qs = []
            for q in questions:
                q, cut = cut_to_tokens(llm, q, MAX_QUESTION_TOKENS)
                qs.append(q)
                if cut:
                    notes.append(f"A question was cut to its first {MAX_QUESTION_TOKENS} tokens.")
            return self._lab.send(sys_text, qs, check=job.check, progress=job.post)

        label = measured(llm.device_name)
        # A send is several seconds on a CPU (two engines, each a few steps): the notes say which engine,
        # step and stage it is at (ux review #4), and the blocks keep the previous send until it is done.
        self.say(*notes, progress="Sending…")
        self.jobs.submit(work, on_done=lambda d: (self._paint(d, label), self.say(*notes)),
                         on_progress=lambda p: self.say(*notes, progress=progress_text(p)),
                         on_error=lambda m: (self.say(*notes), self.gate.error(m)))

    def _close_lab(self) -> None:
        lab, self._lab = self._lab, None
        if lab is not None:
            lab.close()

    # -- view -------------------------------------------------------------------------------------
    def _paint(self, data: dict, label: str) -> None:
        self._blocks.object = blocks_html(data)
        self._summary.object = summary_html(data, label)


def bench(llm, repeat: int = 3) -> dict:
    """Server milliseconds (median of `repeat`): one send of the default system prompt and three
    questions (caching on, then the same send on a fresh caching-off engine), warm and after an edit."""
    runs = {"send_ms": [], "send_after_an_early_edit_ms": []}
    for _ in range(repeat):
        lab = PrefixLab(llm)
        lab.send(DEFAULT_SYSTEM, list(DEFAULT_QUESTIONS))
        t = time.perf_counter()
        lab.send(DEFAULT_SYSTEM, list(DEFAULT_QUESTIONS))
        runs["send_ms"].append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        lab.send(early_word_changed(DEFAULT_SYSTEM), list(DEFAULT_QUESTIONS))
        runs["send_after_an_early_edit_ms"].append((time.perf_counter() - t) * 1e3)
        lab.close()
    return {k: round(median(v), 1) for k, v in runs.items()}

