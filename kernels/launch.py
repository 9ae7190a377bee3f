"""Triton launches without the JIT's dispatch on every call.

`fn[grid](*args)` binds, specializes and hashes every argument and builds a
cache key on each call: tens of microseconds of host time for a kernel with
forty arguments. A `Bound` launch keys the compiled kernel on what Triton
itself specializes on, computes the part of that key its fixed arguments
decide once, and after the first launch of a specialization (which goes
through the JIT and compiles it) calls that kernel's launcher directly.

What Triton specializes an argument on: a tensor's dtype and whether its
address is a multiple of 16 (on AMD, also whether its storage lies within
2 GiB, for buffer loads); an int's width (32 or 64 bits) and whether it
is 1 or a multiple of 16; a bool's value; a float not at all. Constexprs,
warps and stages are part of the key. The key also holds the kernel object
itself, so a mutated copy of a kernel (verify.mutants) never borrows the
real one's binary, and the device, whose loaded module the launcher uses.
Under the interpreter every launch goes through the JIT.

A Bound's leading arguments are fixed values and `SLOT`s: each call passes,
in order, the values of the slots (the tensors that change from call to
call), wherever they stand among the fixed ones (strides between pointers).

Inside `recorded()` a launch is not run but kept, with everything that decides
its binary (kernel, constexprs, options, arguments): an entry called on meta
tensors within `kernels.arch.planned` thereby lists the launches it would make
on that arch, through the same code that makes them for real.
"""

import math
import operator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from triton import knobs

from kernels import arch

_COMPILED: dict = {}
_I32 = (-(1 << 31), (1 << 31) - 1)
_RECORDING: list[list] = []
# AMD's backend also specializes a tensor on whether its storage lies within 2 GiB (buffer loads).
_HIP_2GB = (1 << 31) - 1 if torch.version.hip else None
_ADDRESS = torch.Tensor.data_ptr  # raises TypeError on what is not a tensor


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
    """Within the block, a Bound launch appends a Launch to the yielded list instead of running it."""
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


_HOST_VALUES = (int, float, str)


def signatures(values) -> tuple:
    """Each argument's part of the key an entry keeps a signature's checks and launches by: None for
    None; a tensor's dtype, shape, strides and device; else its type and its value (a number or a
    string) or its identity. One comprehension for all (a function call an argument cost an entry
    about a microsecond a call), None first (most of an entry's optional arguments are None)."""
    return tuple([None if v is None else (v.dtype, v.shape, v.stride(), v.device) if isinstance(v, torch.Tensor)
                  else (type(v), v if isinstance(v, _HOST_VALUES) else id(v)) for v in values])


def _launcher(compiled, grid: tuple) -> tuple:
    """What a launch of a compiled kernel on `grid` (compiled[grid]) needs, for a Bound to call it
    without what Triton's runner does for launch hooks while none is registered (it builds the hooks'
    launch metadata, and its launcher calls both hook chains, empty or not, on every launch):
    (launcher, its arguments before the stream, those after it up to the kernel's, the runner). With
    a hook registered the runner launches, so profilers that hook launches still see ours."""
    return compiled.run, tuple(grid), (compiled.function, compiled.packed_metadata, None, None, None), compiled[grid]


class _Slot:
    """Stands in a Bound's arguments where each call passes a value."""

    def __repr__(self):
        return "SLOT"


SLOT = _Slot()


def slots(count: int) -> tuple:
    """`count` SLOTs: the leading arguments of a Bound that every call passes."""
    return (SLOT,) * count


class Bound:
    """A launch whose grid, fixed arguments, constexprs and options are decided: calling it with
    the values of its SLOTs, in order, launches fn[grid](*args, **constexprs, **options) with
    them put in their places among the fixed arguments.

    Everything of the key but the slots' specializations is computed once, here.
    A Bound serves one argument signature on one device (an entry keeps one per signature):
    after its first launches it keeps each compiled specialization's launcher by the slot
    tensors' alignments alone (their dtypes, and the device, are the signature's; slots
    that are not all tensors are keyed by what Triton specializes on), so a call pays for
    those alignments and Triton's launcher; `stream`, the raw handle of the current stream
    where the caller has it (kernels.arch.raw_stream), spares the launcher asking. The
    launcher gets every tensor by its address (an int): given a tensor, it would call its
    data_ptr and ask the driver whether the address is device memory, a check the entries'
    device checks have made once for the signature. `views` (slot index -> dtype): the kernel
    takes that slot's tensor as a view of that dtype (the same bytes: an fp8 cache as its uint8
    codes); the view is made only where a launch takes the tensor itself (the first launch of a
    specialization, a recorded one, the interpreter's), not on a launch by address.
    """

    __slots__ = ("fn", "grid", "args", "constexprs", "options", "_places", "_prefix", "_head", "_grid3",
                 "_interpreted", "_runners", "_fixed", "_order", "_views")

    def __init__(self, fn, grid: tuple, args: tuple, constexprs: dict, options: dict, views: dict | None = None):
        self.fn, self.grid, self.args = fn, tuple(grid), tuple(args)
        self.constexprs, self.options = dict(constexprs), dict(options)
        self._places = tuple(i for i, a in enumerate(self.args) if a is SLOT)
        self._prefix = self._places == tuple(range(len(self._places)))  # the slots lead: no merge a call
        fixed = [_spec(a) for a in self.args if a is not SLOT]
        self._head = (fn, *self.options.items(), *self.constexprs.values(), self._places, *fixed)
        self._grid3 = (*self.grid, 1, 1)[:3]
        self._interpreted = arch.interpreting()
        self._runners: dict = {}  # the slot tensors' alignments -> the compiled kernel's launcher
        # What a launcher takes (set at the first launch by address): the leading arguments but the
        # SLOTs, then the constexpr values in fn's parameter order, tensors by address; and, unless the
        # slots lead, which of (*slot values, *fixed) goes where.
        self._fixed = self._order = None
        self._views = tuple((views or {}).items())

    def _placed(self, template: tuple, values: tuple) -> list:
        """`template` (starting with the leading arguments) with `values` in the slots."""
        args = list(template)
        for place, value in zip(self._places, values):
            args[place] = value
        return args

    def _viewed(self, values: tuple) -> tuple:
        """`values` with the slots of `views` as their views."""
        if len(values) != len(self._places):
            raise TypeError(f"{getattr(self.fn, '__name__', self.fn)}: expected {len(self._places)} slot "
                            f"values, got {len(values)}")
        if not self._views:
            return values
        viewed = list(values)
        for index, dtype in self._views:
            viewed[index] = viewed[index].view(dtype)
        return tuple(viewed)

    def _merged(self, values: tuple) -> tuple:
        """The leading arguments with `values` (viewed) in the slots."""
        return tuple(self._placed(self.args, self._viewed(values)))

    def __call__(self, *values, stream: int | None = None) -> None:
        if _RECORDING:
            _RECORDING[-1].append(Launch(self.fn, self.grid, self._merged(values), dict(self.constexprs),
                                         dict(self.options)))
            return
        if self._interpreted:
            self.fn[self.grid](*self._merged(values), **self.constexprs, **self.options)
            return
        try:
            addresses = list(map(_ADDRESS, values))
        except TypeError:  # a slot that is not a tensor
            addresses = [v.data_ptr() if isinstance(v, torch.Tensor) else v for v in values]
            aligned = tuple(map(_spec, values))
        else:
            # all 16-byte aligned (their gcd is; the common case): one key; else each tensor's alignment
            aligned = (tuple(map(_spec, values)) if _HIP_2GB is not None else
                       tuple([a % 16 == 0 for a in addresses]) if math.gcd(*addresses) % 16 else True)
        runner = self._runners.get(aligned)
        if runner is None:
            args = self._merged(values)
            key = (self._head, torch.cuda.current_device(), *map(_spec, self._viewed(values)))
            compiled = _COMPILED.get(key)
            if compiled is None:
                compiled = self.fn[self.grid](*args, **self.constexprs, **self.options)
                if len(_COMPILED) > 4096:
                    _COMPILED.clear()
                _COMPILED[key] = compiled
                return
            if self._fixed is None:
                self._arrange(len(args))
            runner = self._runners[aligned] = _launcher(compiled, self._grid3)
        if self._order is None:
            addresses.extend(self._fixed)
        else:
            addresses = self._order((*addresses, *self._fixed))
        run, grid, middle, runner = runner
        hooks = knobs.runtime
        enter, leave = hooks.launch_enter_hook, hooks.launch_exit_hook
        if (stream is None or (enter is not None and getattr(enter, "calls", True))
                or (leave is not None and getattr(leave, "calls", True))):
            runner(*addresses, stream=stream)
        else:
            run(*grid, stream, *middle, *addresses)

    def _arrange(self, leading: int) -> None:
        """The launcher's fixed arguments (the leading ones but the SLOTs, then the constexprs a
        launch passes by position; tensors by address, which self.args keeps alive) and, unless the
        slots lead, the order that puts (*slot values, *fixed) in place."""
        rest = tuple(self.constexprs[name] for name in self.fn.arg_names[leading:])
        template = (*self.args, *rest)
        self._fixed = [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in template if a is not SLOT]
        if not self._prefix:
            slots, fixed, order = iter(range(len(self._places))), iter(range(len(self._places), len(template))), []
            for a in template:
                order.append(next(slots) if a is SLOT else next(fixed))
            pick = operator.itemgetter(*order)
            self._order = pick if len(order) > 1 else (lambda values: (pick(values),))
