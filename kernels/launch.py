"""Triton launches without the JIT's dispatch on every call.

`fn[grid](*args)` binds, specializes and hashes every argument and builds a
cache key on each call: tens of microseconds of host time for a kernel with
forty arguments. `launch` keys the compiled kernel on what Triton itself
specializes on, and after the first launch of a specialization (which goes
through the JIT and compiles it) calls that kernel's launcher directly.

What Triton specializes an argument on: a tensor's dtype and whether its
address is a multiple of 16; an int's width (32 or 64 bits) and whether it
is 1 or a multiple of 16; a bool's value; a float not at all. Constexprs,
warps and stages are part of the key. The key also holds the kernel object
itself, so a mutated copy of a kernel (verify.mutants) never borrows the
real one's binary, and the device, whose loaded module the launcher uses.
Under the interpreter every launch goes through the JIT.
"""

import torch

from kernels import arch

_COMPILED: dict = {}
_I32 = (-(1 << 31), (1 << 31) - 1)


def _spec(value):
    if isinstance(value, torch.Tensor):
        return value.dtype, value.data_ptr() % 16 == 0
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return _I32[0] <= value <= _I32[1], value == 1, value % 16 == 0
    if isinstance(value, float):
        return float
    return type(value), value


def launch(fn, grid: tuple, args: tuple, constexprs: dict, **options) -> None:
    """fn[grid](*args, **constexprs, **options), on the current device and stream.

    `args` are fn's leading parameters in order; `constexprs` name all the others; `options` are
    Triton's launch options (num_warps, num_stages, maxnreg).
    """
    if arch.interpreting():
        fn[grid](*args, **constexprs, **options)
        return
    key = (fn, torch.cuda.current_device(), *options.items(), *constexprs.values(), *map(_spec, args))
    compiled = _COMPILED.get(key)
    if compiled is None:
        compiled = fn[grid](*args, **constexprs, **options)
        if len(_COMPILED) > 4096:
            _COMPILED.clear()
        _COMPILED[key] = compiled
        return
    names = fn.arg_names[len(args):]
    compiled[(*grid, 1, 1)[:3]](*args, *(constexprs[name] for name in names))
