"""Triton launches without the JIT's dispatch on every call.

`fn[grid](*args)` binds, specializes and hashes every argument and builds a
cache key on each call: tens of microseconds of host time for a kernel with
forty arguments. `launch` keys the compiled kernel on what Triton itself
specializes on, and after the first launch of a specialization (which goes
through the JIT and compiles it) calls that kernel's launcher directly. A
`Bound` launch computes the part of that key its fixed arguments decide once.

What Triton specializes an argument on: a tensor's dtype and whether its
address is a multiple of 16 (on AMD, also whether its storage lies within
2 GiB, for buffer loads); an int's width (32 or 64 bits) and whether it
is 1 or a multiple of 16; a bool's value; a float not at all. Constexprs,
warps and stages are part of the key. The key also holds the kernel object
itself, so a mutated copy of a kernel (verify.mutants) never borrows the
real one's binary, and the device, whose loaded module the launcher uses.
Under the interpreter every launch goes through the JIT.

Inside `recorded()` a launch is not run but kept, with everything that decides
its binary (kernel, constexprs, options, arguments): an entry called on meta
tensors within `kernels.arch.planned` thereby lists the launches it would make
on that arch, through the same code that makes them for real.
"""

from contextlib import contextmanager
from dataclasses import dataclass

import torch

from kernels import arch

_COMPILED: dict = {}
_I32 = (-(1 << 31), (1 << 31) - 1)
_RECORDING: list[list] = []
# AMD's backend also specializes a tensor on whether its storage lies within 2 GiB (buffer loads).
_HIP_2GB = (1 << 31) - 1 if torch.version.hip else None


@dataclass(frozen=True)
class Launch:
    """One kernel launch as decided on the host: fn[grid](*args, **constexprs, **options)."""

    fn: object
    grid: tuple
    args: tuple
    constexprs: dict
    options: dict


@contextmanager
def recorded():
    """Within the block, `launch` appends a Launch to the yielded list instead of running it."""
    calls: list = []
    _RECORDING.append(calls)
    try:
        yield calls
    finally:
        _RECORDING.pop()


def _spec(value):
    if isinstance(value, torch.Tensor):
        if _HIP_2GB is not None:
            return value.dtype, value.data_ptr() % 16 == 0, value.untyped_storage().nbytes() <= _HIP_2GB
        return value.dtype, value.data_ptr() % 16 == 0
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return _I32[0] <= value <= _I32[1], value == 1, value % 16 == 0
    if isinstance(value, float):
        return float
    return type(value), value


class Bound:
    """A launch whose grid, trailing host arguments, constexprs and options are fixed: calling it
    with the leading (tensor) arguments launches fn[grid](*tensors, *tail, **constexprs, **options).

    Everything of the key but the leading arguments' specializations is computed once, here.
    A Bound serves one argument signature on one device (an entry keeps one per signature):
    after its first launches it keeps each compiled specialization's launcher by the leading
    tensors' alignments alone (their dtypes, and the device, are the signature's; leading
    arguments that are not all tensors are keyed by what Triton specializes on), so a call
    pays for those alignments and Triton's launcher; `stream`, the raw handle of the current
    stream where the caller has it (kernels.arch.raw_stream), spares the launcher asking.
    """

    __slots__ = ("fn", "grid", "tail", "constexprs", "options", "_head", "_grid3", "_interpreted", "_runners",
                 "_trailing")

    def __init__(self, fn, grid: tuple, tail: tuple, constexprs: dict, options: dict):
        self.fn, self.grid, self.tail = fn, tuple(grid), tuple(tail)
        self.constexprs, self.options = dict(constexprs), dict(options)
        self._head = (fn, *self.options.items(), *self.constexprs.values(), *map(_spec, self.tail))
        self._grid3 = (*self.grid, 1, 1)[:3]
        self._interpreted = arch.interpreting()
        self._runners: dict = {}  # the leading tensors' alignments -> the compiled kernel's launcher
        self._trailing = None  # tail, then the constexpr values in fn's parameter order (first launch)

    def __call__(self, *tensors, stream: int | None = None) -> None:
        if _RECORDING:
            _RECORDING[-1].append(Launch(self.fn, self.grid, (*tensors, *self.tail), dict(self.constexprs),
                                         dict(self.options)))
            return
        if self._interpreted:
            self.fn[self.grid](*tensors, *self.tail, **self.constexprs, **self.options)
            return
        try:
            aligned = tuple([t.data_ptr() % 16 == 0 for t in tensors]) if _HIP_2GB is None else None
        except AttributeError:  # a leading argument that is not a tensor (the KDA launches pass ints)
            aligned = None
        if aligned is None:
            aligned = tuple(map(_spec, tensors))
        runner = self._runners.get(aligned)
        if runner is not None:
            runner(*tensors, *self._trailing, stream=stream)
            return
        args = (*tensors, *self.tail)
        key = (self._head, torch.cuda.current_device(), *map(_spec, tensors))
        compiled = _COMPILED.get(key)
        if compiled is None:
            compiled = self.fn[self.grid](*args, **self.constexprs, **self.options)
            if len(_COMPILED) > 4096:
                _COMPILED.clear()
            _COMPILED[key] = compiled
            return
        if self._trailing is None:
            self._trailing = (*self.tail, *(self.constexprs[name] for name in self.fn.arg_names[len(args):]))
        runner = self._runners[aligned] = compiled[self._grid3]
        runner(*tensors, *self._trailing, stream=stream)


def launch(fn, grid: tuple, args: tuple, constexprs: dict, **options) -> None:
    """fn[grid](*args, **constexprs, **options), on the current device and stream.

    `args` are fn's leading parameters in order; `constexprs` name all the others; `options` are
    Triton's launch options (num_warps, num_stages, maxnreg, waves_per_eu).
    """
    Bound(fn, grid, (), constexprs, options)(*args)
