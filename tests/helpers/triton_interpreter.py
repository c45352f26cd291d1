"""Running the Triton kernels on CPU under triton's interpreter, for the kernel test modules.

TRITON_INTERPRET=1 must be set *before triton is first imported* (triton's own helpers such as tl.cdiv
are decorated at import). Importing this module sets it when triton is not imported yet and there is
no GPU (where compiled triton could not run anyway), so a test module imports it before `kernels`.
If another test module imported triton earlier, the interpreted tests skip and `rerun_if_not_interpreted`
runs the module again in a subprocess with the variable set, so the kernels are checked whatever the
collection order. A kernel test module has two pieces:

    @pytest.fixture(scope="module")
    def interpreted():
        yield from triton_interpreter.kernels_or_skip(<triton imported?>, <probe: a @triton.jit>, name=fn, ...)

    def test_interpreted_tests_in_a_fresh_process():
        triton_interpreter.rerun_if_not_interpreted(<triton imported?>, <probe>, __file__)
"""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace
from typing import Callable

import numpy as np
import pytest
import torch

if "triton" not in sys.modules and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"


def patch_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three bugs of triton 3.6's interpreter, fixed for the duration of a test module only.

    1. triton-lang/triton#9171: a loop bound is a 1-element numpy array, and numpy >= 2.4 refuses
       int() on it; take the element explicitly.
    2. tl.dot on bfloat16 multiplies the raw uint16 bit patterns (the interpreter stores bf16 as
       uint16); widen bf16 operands to float32 first, which is exact, as the tensor cores' products are.
    3. float32 -> bfloat16 casts truncate the mantissa; GPUs (and torch) round to nearest even. Cast
       through torch, so an interpreted kernel rounds where the compiled one does.
    """
    import triton.language as tl
    import triton.runtime.interpreter as interp

    patch_tensor = interp._patch_lang_tensor

    def patched_tensor(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    create_dot = interp.InterpreterBuilder.create_dot

    def patched_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.dtype.scalar == tl.bfloat16:
            a = self.cast_impl(a, tl.float32)
        if b.dtype.scalar == tl.bfloat16:
            b = self.cast_impl(b, tl.float32)
        return create_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    cast_impl = interp.InterpreterBuilder.cast_impl

    def patched_cast(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            rounded = torch.from_numpy(np.ascontiguousarray(src.data)).to(torch.bfloat16)
            return interp.TensorHandle(rounded.view(torch.uint16).numpy(), tl.bfloat16)
        return cast_impl(self, src, dst_type)

    monkeypatch.setattr(interp, "_patch_lang_tensor", patched_tensor)
    monkeypatch.setattr(interp.InterpreterBuilder, "create_dot", patched_dot)
    monkeypatch.setattr(interp.InterpreterBuilder, "cast_impl", patched_cast)


def is_interpreted(jit_function) -> bool:
    """Whether this @triton.jit function was built by the interpreter (TRITON_INTERPRET=1 at import)."""
    from triton.runtime.interpreter import InterpretedFunction
    return isinstance(jit_function, InterpretedFunction)


def kernels_or_skip(have_triton: bool, probe: Callable[[], object], **kernels):
    """For a module-scoped fixture: the given kernels with the interpreter patched, or a skip saying why."""
    if not have_triton:
        pytest.skip("triton is not installed")
    if not is_interpreted(probe()):
        pytest.skip("triton was imported without TRITON_INTERPRET=1; "
                    "test_interpreted_tests_in_a_fresh_process runs these instead")
    with pytest.MonkeyPatch.context() as mp:
        patch_interpreter(mp)
        yield SimpleNamespace(**kernels)


def rerun_if_not_interpreted(have_triton: bool, probe: Callable[[], object], test_file: str) -> None:
    """Run test_file's interpreted tests in a fresh process when they had to skip in this one."""
    if not have_triton or torch.cuda.is_available():
        pytest.skip("no triton, or a GPU: tests/gpu checks the compiled kernels")
    if is_interpreted(probe()):
        pytest.skip("the interpreted tests ran in this process")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file],
                         env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
