"""What the target can do: interpreter or compiled, arch name, CU count, fp8 support.

Kernels take these answers as constexprs chosen on the host, so one kernel body
serves a compiled GPU (AMD or NVIDIA) and the Triton interpreter on CPU.

A tensor on torch's meta device (shapes, strides and dtype, no data) stands for
a tensor on the arch that `planned` names: inside `with planned("gfx942", 304)`,
an entry called on meta tensors decides every launch as it would on that arch
with that many CUs (kernels.launch records them instead of running them).
"""

import collections.abc
import contextlib
import contextvars
import functools
import inspect
import os

import torch
from triton.runtime import driver

# Codes of the fp8 decode modes the decode kernels understand (a constexpr).
FP8_NONE = 0  # the cache is bf16/fp16: load and upcast
FP8_NATIVE = 1  # the target converts this fp8 format in hardware
FP8_BITS_E4M3FN = 2  # decode e4m3fn from its bits (bias 7, NaN 0x7F/0xFF)
FP8_BITS_E4M3FNUZ = 3  # decode e4m3fnuz from its bits (bias 8, NaN 0x80)
FP8_PTX_E4M3FNUZ = 4  # e4m3fnuz from its bits, four codes at a time in PTX (NVIDIA; else as FP8_BITS_E4M3FNUZ)
# The modes that read a cache as its codes: those from FP8_BITS_E4M3FN up (the kernels test FP8_MODE >= it).
FP8_BITS = (FP8_BITS_E4M3FN, FP8_BITS_E4M3FNUZ, FP8_PTX_E4M3FNUZ)

_FP8_FORMATS = {
    torch.float8_e4m3fn: "e4m3fn",
    torch.float8_e4m3fnuz: "e4m3fnuz",
}

# Which fp8 formats each arch family converts natively.
_NATIVE_FP8 = {
    "sm89": {"e4m3fn"},
    "sm90": {"e4m3fn"},
    "sm100": {"e4m3fn"},
    "gfx942": {"e4m3fnuz"},
    "gfx950": {"e4m3fn"},
    "gfx1250": {"e4m3fn"},
}
# Formats an arch has no conversion for that the kernels decode from the bits in its own assembly, four
# codes a 32-bit register (kernels.paged_decode.partition.fp8_bits_to_f16): 10 integer and half-precision
# instructions per four codes on sm90, where the same fields moved code by code took about 9 per code.
_PTX_FP8 = {
    "sm89": {"e4m3fnuz"},
    "sm90": {"e4m3fnuz"},
    "sm100": {"e4m3fnuz"},
}


# (arch name, CU count) that meta tensors stand for, inside `planned`.
_PLANNED: contextvars.ContextVar = contextvars.ContextVar("planned", default=None)


@contextlib.contextmanager
def planned(name: str, cus: int):
    """Within the block, meta-device tensors stand for tensors on arch `name` with `cus` CUs."""
    if not isinstance(cus, int) or isinstance(cus, bool) or cus < 1:
        raise ValueError(f"cus: expected a positive int, got {cus!r}")
    token = _PLANNED.set((name, cus))
    try:
        yield
    finally:
        _PLANNED.reset(token)


def planned_target() -> tuple[str, int] | None:
    """(arch, CUs) that meta tensors stand for here, None outside `planned`."""
    return _PLANNED.get()


def _planned_target() -> tuple[str, int]:
    target = _PLANNED.get()
    if target is None:
        raise ValueError("device: a meta tensor stands for a target only inside kernels.arch.planned(arch, cus)")
    return target


def environment(names: tuple) -> collections.abc.Callable[[], tuple]:
    """A function that returns the values of the environment variables `names` (None where
    unset) as of its call, in a form fit for a cache key. It reads os.environ's own table where
    it has one (bytes values; a tenth of the time of os.environ.get, which encodes and decodes)."""
    table = getattr(os.environ, "_data", None)
    encode = getattr(os.environ, "encodekey", None)
    if not isinstance(table, dict) or encode is None:
        return lambda: tuple(map(os.environ.get, names))
    keys = tuple(map(encode, names))
    return lambda: tuple(map(table.get, keys))


_interpret_env = environment(("TRITON_INTERPRET",))


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter."""
    return _interpret_env()[0] not in (None, b"", b"0", "", "0")


@functools.lru_cache(maxsize=None)
def _gpu(index: int) -> tuple[str, int]:
    """(arch name, multiprocessor count) of GPU `index`: read once, they cannot change."""
    props = torch.cuda.get_device_properties(index)
    gcn = getattr(props, "gcnArchName", "")
    name = gcn.split(":")[0] if torch.version.hip and gcn else f"sm{props.major}{props.minor}"
    return name, props.multi_processor_count


def _index(device: torch.device) -> int:
    return torch.cuda.current_device() if device.index is None else device.index


def on_device(device: torch.device):
    """A context in which `device` is the current one. Triton launches on the current device
    and its current stream, so a kernel given tensors on cuda:1 while cuda:0 is current must
    be launched inside this (elsewhere it does nothing; entering it then costs nothing)."""
    if device.type != "cuda" or device.index == torch.cuda.current_device():
        return _NOTHING
    return torch.cuda.device(device)


_NOTHING = contextlib.nullcontext()


def raw_stream(device: torch.device) -> int:
    """The handle of `device`'s current stream as Triton's launcher takes it (0 off CUDA); cheaper
    than torch.cuda.current_stream, which builds a Stream object."""
    if device.type != "cuda" or interpreting():
        return 0
    return driver.active.get_current_stream(_index(device))


def on_first_tensors_device(entry):
    """Decorator: `entry(x, ...)` runs with x's device current when x, its first parameter (passed by
    position or by name), is a tensor (see on_device)."""
    name = next(iter(inspect.signature(entry).parameters))

    @functools.wraps(entry)
    def run(*args, **kwargs):
        first = args[0] if args else kwargs.get(name)
        with on_device(first.device) if isinstance(first, torch.Tensor) else contextlib.nullcontext():
            return entry(*args, **kwargs)
    return run


def data_checks(validate) -> bool:
    """Whether an entry checks the indices it finds in device tensors (a device sync): always
    under the interpreter, else `validate` (None, True or False), else the QUANTFLOOR_VALIDATE
    environment variable ("1" turns them on for every call)."""
    if validate not in (None, True, False):
        raise TypeError(f"validate: expected None, True or False, got {validate!r}")
    if interpreting():
        return True
    if validate is not None:
        return validate
    return os.environ.get("QUANTFLOOR_VALIDATE", "0") == "1"


def arch_name(device: torch.device) -> str:
    """'gfx942', 'sm90', ... for a GPU device; 'cpu' for the interpreter; the planned arch for meta."""
    device = torch.device(device)
    if device.type == "meta":
        return _planned_target()[0]
    if device.type != "cuda" or interpreting():
        return "cpu"
    return _gpu(_index(device))[0]


def cu_count(device: torch.device) -> int:
    """Compute units (SMs) to size grids for.

    `CU_NUM` in the environment wins, so a decision made for a 256-CU part can
    be replayed on any device. Without it: the device's count, or 1 on CPU.
    """
    env = os.environ.get("CU_NUM")
    if env:
        try:
            value = int(env)
        except ValueError:
            raise ValueError(f"CU_NUM: expected a positive integer, got {env!r}") from None
        if value < 1:
            raise ValueError(f"CU_NUM: expected a positive integer, got {env!r}")
        return value
    device = torch.device(device)
    if device.type == "meta":
        return _planned_target()[1]
    if device.type == "cuda" and not interpreting():
        return _gpu(_index(device))[1]
    return 1


def fp8_format(dtype: torch.dtype) -> str | None:
    """'e4m3fn' / 'e4m3fnuz' for the torch fp8 dtypes, None otherwise."""
    return _FP8_FORMATS.get(dtype)


def fp8_mode(dtype: torch.dtype, device: torch.device) -> int:
    """How a kernel on `device` turns a cache of `dtype` into fp32.

    The interpreter always decodes bits: its own conversion turns the e4m3fn
    NaN codes into +-480, which would hide NaN leaks that real hardware shows.
    """
    fmt = fp8_format(dtype)
    if fmt is None:
        return FP8_NONE
    name = arch_name(device)
    if fmt in _NATIVE_FP8.get(name, set()):
        return FP8_NATIVE
    if fmt in _PTX_FP8.get(name, set()):
        return FP8_PTX_E4M3FNUZ
    return FP8_BITS_E4M3FN if fmt == "e4m3fn" else FP8_BITS_E4M3FNUZ


def dot_dtype(dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """Operand dtype for tl.dot on `device`: `dtype` compiled, fp32 under the interpreter.

    The interpreter stores bf16 as raw uint16 and multiplies the bit patterns,
    so every bf16 operand is upcast there before arithmetic; its dots then run
    in fp32 whatever input_precision asks for.
    """
    return torch.float32 if arch_name(device) == "cpu" else dtype
