"""Console progress for long work (download, unpack, dequantize, load), on stderr so stdout stays clean."""
from __future__ import annotations

import sys
import time
from contextlib import contextmanager


def log(msg: str) -> None:
    print(f"[engine] {msg}", file=sys.stderr, flush=True)


class _Bar:
    def __init__(self, total: int, label: str):
        self.total, self.label, self.done = max(total, 1), label, 0
        self.start = self.last = time.monotonic()
        self.tty = sys.stderr.isatty()

    def update(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        # Redraw at most 10x a second on a terminal; in a log file, a line every 25%.
        if self.tty and now - self.last > 0.1:
            self.last = now
            sys.stderr.write(f"\r[engine] {self.label}: {100 * self.done / self.total:5.1f}%")
            sys.stderr.flush()
        elif not self.tty and (self.done * 4) // self.total > ((self.done - n) * 4) // self.total:
            log(f"{self.label}: {100 * self.done // self.total}%")

    def close(self) -> None:
        if self.tty:
            sys.stderr.write(f"\r[engine] {self.label}: done in {time.monotonic() - self.start:.1f}s\n")
            sys.stderr.flush()


@contextmanager
def progress_bar(total: int, label: str):
    bar = _Bar(total, label)
    try:
        yield bar
    finally:
        bar.close()
