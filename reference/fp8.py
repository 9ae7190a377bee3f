"""fp8 E4M3 formats from their bits, and the quantizers that make fp8 caches.

A code is one byte `s eeee mmm`: sign s, exponent field e, mantissa field m.

    e > 0 :  value = (-1)^s * (1 + m/8) * 2^(e - bias)      (normal)
    e = 0 :  value = (-1)^s * (m/8)     * 2^(1 - bias)      (subnormal)

e4m3fn   : bias 7, largest finite 448 (0x7E), NaN at 0x7F and 0xFF, -0 is 0x80.
e4m3fnuz : bias 8, largest finite 240 (0x7F), NaN only at 0x80, so there is no -0.

Everything here is integer bit arithmetic and float64, never torch's float8
casts, so the reference does not share its rounding with what it judges.

Quantized caches use the logical layout [num_blocks, block_size, Hkv, D]:
per-tensor scale: one fp32, value = decode(code) * scale;
per-token scale : [num_blocks, Hkv, block_size] fp32, one per (block, kv head, slot),
                  value[b, s, h, d] = decode(code[b, s, h, d]) * scale[b, h, s].
"""

from dataclasses import dataclass

import torch

MANTISSA_BITS = 3


@dataclass(frozen=True)
class Fp8Format:
    """One E4M3 variant: exponent bias, largest finite value, the NaN code encode writes."""

    name: str
    bias: int
    max: float
    nan_code: int

    @property
    def has_negative_zero(self) -> bool:
        """e4m3fn keeps 0x80 as -0; e4m3fnuz spends it on its only NaN."""
        return self.nan_code != 0x80

    @property
    def min_normal_exponent(self) -> int:
        """Unbiased exponent of the smallest normal value, also the subnormals' exponent."""
        return 1 - self.bias


FORMATS = {
    "e4m3fn": Fp8Format("e4m3fn", bias=7, max=448.0, nan_code=0x7F),
    "e4m3fnuz": Fp8Format("e4m3fnuz", bias=8, max=240.0, nan_code=0x80),
}

_DTYPE_NAMES = {
    torch.float8_e4m3fn: "e4m3fn",
    torch.float8_e4m3fnuz: "e4m3fnuz",
}


def format_of(dtype_or_name) -> Fp8Format:
    """The Fp8Format of torch.float8_e4m3fn/fnuz, of "e4m3fn"/"e4m3fnuz", or of an Fp8Format."""
    if isinstance(dtype_or_name, Fp8Format):
        return dtype_or_name
    if isinstance(dtype_or_name, torch.dtype) and dtype_or_name in _DTYPE_NAMES:
        return FORMATS[_DTYPE_NAMES[dtype_or_name]]
    if isinstance(dtype_or_name, str) and dtype_or_name in FORMATS:
        return FORMATS[dtype_or_name]
    raise ValueError(
        "dtype_or_name: expected torch.float8_e4m3fn, torch.float8_e4m3fnuz, "
        f"'e4m3fn' or 'e4m3fnuz', got {dtype_or_name!r}"
    )


def _require_uint8(codes, name: str) -> None:
    if not isinstance(codes, torch.Tensor) or codes.dtype != torch.uint8:
        got = codes.dtype if isinstance(codes, torch.Tensor) else type(codes).__name__
        raise TypeError(f"{name}: expected a torch.uint8 tensor of fp8 codes, got {got}")


def _require_float_values(x, name: str) -> None:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dtype in _DTYPE_NAMES:
        got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"{name}: expected a floating-point tensor of values (not fp8), got {got}")


def is_nan_code(codes: torch.Tensor, fmt) -> torch.Tensor:
    """Boolean mask of the codes that are NaN in `fmt`."""
    fmt = format_of(fmt)
    _require_uint8(codes, "codes")
    c = codes.to(torch.int64)
    if fmt.has_negative_zero:
        return (c & 0x7F) == fmt.nan_code
    return c == fmt.nan_code


def decode(codes: torch.Tensor, fmt) -> torch.Tensor:
    """fp8 codes (uint8) -> float64 values of the same shape and device."""
    fmt = format_of(fmt)
    _require_uint8(codes, "codes")
    c = codes.to(torch.int64)
    sign = c >> 7
    exponent = (c >> MANTISSA_BITS) & 0xF
    mantissa = c & ((1 << MANTISSA_BITS) - 1)
    normal = exponent > 0
    significand = torch.where(normal, mantissa + (1 << MANTISSA_BITS), mantissa)
    power = torch.where(normal, exponent - fmt.bias, torch.full_like(exponent, fmt.min_normal_exponent))
    magnitude = significand.to(torch.float64) * _pow2(power - MANTISSA_BITS)
    value = torch.where(sign == 1, -magnitude, magnitude)
    return torch.where(is_nan_code(codes, fmt), torch.full_like(value, float("nan")), value)


def _pow2(exponent: torch.Tensor) -> torch.Tensor:
    """2^e as float64, exactly, for int64 e in [-1022, 1023]: e written into a float64's exponent field.

    Not torch.ldexp: with a tensor exponent it takes 2^e from a scalar-base pow, which on a
    tensor of a GPU other than the current one faults with an illegal memory access
    (torch 2.11, two H200s: building inputs on cuda:1 while cuda:0 was current).
    """
    return ((exponent + 1023) << 52).view(torch.float64)


# Elements encode and the quantizers take a step: their float64 and int64 temporaries stay near
# 1 GiB whatever the cache's size (a whole 64 x 8192-token cache at once took tens of GB).
CHUNK_ELEMENTS = 1 << 24


def encode(x: torch.Tensor, fmt) -> torch.Tensor:
    """float values -> fp8 codes (uint8): nearest, ties to even, saturating.

    |x| > max (inf included) becomes +-max, NaN becomes fmt.nan_code, and values
    that round to zero keep their sign where the format has -0 (e4m3fnuz: 0x00).
    With the binade exponent k = max(floor(log2|x|) + bias, 1) the grid step is
    q = 2^(k - bias - 3) and n = round_half_even(|x| / q) in [0, 16]; the code's
    magnitude bits are (k - 1) * 8 + n, which carries n = 16 into the next binade
    and reads subnormals (k = 1, n < 8) right. Element by element, so large
    tensors go CHUNK_ELEMENTS at a time.
    """
    fmt = format_of(fmt)
    _require_float_values(x, "x")
    return _chunked(x.reshape(-1), lambda part: _encode(part, fmt)).view(x.shape)


def _chunked(flat: torch.Tensor, codes_of) -> torch.Tensor:
    """codes_of applied to `flat` (1-D) CHUNK_ELEMENTS at a time, into one uint8 tensor."""
    if flat.numel() <= CHUNK_ELEMENTS:
        return codes_of(flat)
    out = torch.empty(flat.shape, dtype=torch.uint8, device=flat.device)
    for lo in range(0, flat.numel(), CHUNK_ELEMENTS):
        out[lo:lo + CHUNK_ELEMENTS] = codes_of(flat[lo:lo + CHUNK_ELEMENTS])
    return out


def _encode(x: torch.Tensor, fmt: "Fp8Format") -> torch.Tensor:
    """encode's arithmetic on a tensor of values."""
    x = x.to(torch.float64)
    nan = torch.isnan(x)
    magnitude = torch.nan_to_num(x.abs(), nan=0.0).clamp(max=fmt.max)
    _, frexp_exponent = torch.frexp(magnitude)
    binade = (frexp_exponent.to(torch.int64) - 1 + fmt.bias).clamp(min=1)
    binade = torch.where(magnitude > 0, binade, torch.ones_like(binade))
    steps = torch.round(magnitude * _pow2(fmt.bias + MANTISSA_BITS - binade)).to(torch.int64)
    bits = (binade - 1) * (1 << MANTISSA_BITS) + steps
    negative = torch.signbit(x)
    if not fmt.has_negative_zero:
        negative = negative & (bits > 0)
    code = torch.where(negative, bits | 0x80, bits)
    code = torch.where(nan, torch.full_like(code, fmt.nan_code), code)
    return code.to(torch.uint8)


def _scale_of(amax: torch.Tensor, fmt: Fp8Format) -> torch.Tensor:
    """amax / fmt.max rounded to fp32; 1.0 where that is 0 (all-zero input)."""
    scale = (amax / fmt.max).to(torch.float32)
    return torch.where(scale > 0, scale, torch.ones_like(scale))


def _require_finite_values(x, name: str) -> None:
    _require_float_values(x, name)
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name}: expected finite values to quantize, got NaN or inf")


def quantize_per_tensor(x: torch.Tensor, fmt) -> tuple[torch.Tensor, torch.Tensor]:
    """codes = encode(x / scale) with scale = fp32(amax|x| / fmt.max) (1.0 if that is 0).

    Returns (codes uint8 of x's shape, scale as a 0-d float32 tensor).
    """
    fmt = format_of(fmt)
    _require_finite_values(x, "x")
    # |x| and its max are exact in x's dtype, and so is their float64 value
    scale = _scale_of(x.abs().max().to(torch.float64) if x.numel() else x.new_zeros((), dtype=torch.float64), fmt)
    scale64 = scale.to(torch.float64)
    return _chunked(x.reshape(-1), lambda part: _encode(part.to(torch.float64) / scale64, fmt)).view(x.shape), scale


def quantize_per_token(x: torch.Tensor, fmt) -> tuple[torch.Tensor, torch.Tensor]:
    """Logical cache x [nb, bs, Hkv, D] -> (codes [nb, bs, Hkv, D] uint8, scale [nb, Hkv, bs] fp32).

    scale[b, h, s] = fp32(max_d |x[b, s, h, d]| / fmt.max), 1.0 for an all-zero row;
    codes[b, s, h, :] = encode(x[b, s, h, :] / scale[b, h, s]).
    """
    fmt = format_of(fmt)
    _require_finite_values(x, "x")
    if x.dim() != 4 or x.shape[-1] == 0:
        raise ValueError(f"x: expected shape [num_blocks, block_size, Hkv, D] with D > 0, got {list(x.shape)}")
    scale = _scale_of(x.abs().amax(dim=-1).to(torch.float64), fmt).permute(0, 2, 1).contiguous()
    per_elem = scale.permute(0, 2, 1).unsqueeze(-1)
    codes = torch.empty(x.shape, dtype=torch.uint8, device=x.device)
    step = max(1, CHUNK_ELEMENTS // max(1, x[:1].numel()))  # whole blocks a step
    for lo in range(0, x.shape[0], step):
        part = x[lo:lo + step].to(torch.float64) / per_elem[lo:lo + step].to(torch.float64)
        codes[lo:lo + step] = _encode(part, fmt)
    return codes, scale


def dequantize(codes: torch.Tensor, scale, fmt) -> torch.Tensor:
    """decode(codes) * scale in float64.

    scale: a python number or a tensor with one element (per-tensor), or a
    [nb, Hkv, bs] tensor for logical codes [nb, bs, Hkv, D] (per-token).
    """
    values = decode(codes, fmt)
    if isinstance(scale, (int, float)):
        return values * float(scale)
    if not isinstance(scale, torch.Tensor):
        raise TypeError(f"scale: expected a number or a tensor, got {type(scale).__name__}")
    scale = scale.to(device=values.device, dtype=torch.float64)
    if scale.numel() == 1:
        return values * scale.reshape(())
    if codes.dim() == 4:
        nb, bs, hkv, _ = codes.shape
        if tuple(scale.shape) == (nb, hkv, bs):
            return values * scale.permute(0, 2, 1).unsqueeze(-1)
    raise ValueError(
        "scale: expected one element or shape [num_blocks, Hkv, block_size] matching codes "
        f"[num_blocks, block_size, Hkv, D] = {list(codes.shape)}, got {list(scale.shape)}"
    )
