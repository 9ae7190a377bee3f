"""Value distributions of the decode cases: what keys, values and queries hold, and the scales.

`DecodeCase.dist` names one. `gauss` (the default, written in no id) is the
draw `cases.decode.build` has always made: `gauss_values` below, quantized
with the amax scale. Every other distribution is drawn by `draw` (over the
blocks the batch uses, then placed in the pool as a `Placed`): the original
keys and values in the logical layout [pool, bs, Hkv, D] (zero in slots no
sequence uses), the query, and the scales the cache is stored with. Each is defined for every cache, scale granularity, layout, head
configuration, length and Q, and keeps the floor meaningful: where fp8
rounding of keys would move the scores by as much as the output is worth, the
keys are built from exact fp8 codes times a power-of-two scale with a +-max
code in each token (per-token) or the tensor (per-tensor), so the quantizer
reproduces them and the floor comes from V alone.

With the softmax scale D^-0.5, a query of std sq against keys of std sk
scores with std about sq * sk, which is how the query magnitudes below are set.

subnormal   fp8 only: nearly every code the batch reads is subnormal under its
            scale (|x| / scale < 2^(1 - bias); about 2 subnormal steps of std).
            Per-tensor: one outlier token (1.0 = max * scale) in a cache block the
            batch does not read (another request's token) sets the scale.
            Per-token: one outlier channel per kv head holds each token's amax,
            and the query is zero on the keys' outlier channel, so the scores
            come from subnormal codes alone (the values' outlier channel shows
            in the output and sets the gate's epsilon, which bounds how finely
            V's subnormals are judged there). bf16 has no codes subnormal under
            a scale, and the Triton interpreter loads its own subnormals
            (< 2^-126) as zero, so bf16 with subnormal is not defined (the
            matrix leaves the pair out: cases.decode_matrix.defined).
saturate    plain gaussian values. fp8: the scale is a static (calibrated) one
            below amax / max, so the largest values reach and pass +-max and
            clip: per-token amax / (max * f) with f in [1, 1.25) drawn per token,
            per-tensor amax / (1.25 * max). bf16 holds such values without
            clipping, so its analogue is the 16-bit limit a kernel could meet:
            stored values at and past fp16's max 65504 (f * 65504 at each
            token's or the tensor's amax), the query scaled down to keep the
            scores ordinary.
peaked      in every query row one visible key leads every other visible key by
            36 to 300 (natural-log units; at least 30 after quantization). Row r
            of a kv head owns channel r: its query holds the lead there, its
            leader key holds 8, every other key 0; the remaining channels carry
            scores of std 0.5. Leaders sit at the window's first key, the current
            token, a block boundary, a tile or partition boundary (multiples of
            256, 64, 32) or anywhere, in turn.
flat        every key of a kv head is the same vector, so every visible key scores
            the same and the softmax is uniform. V has a per-channel mean (as
            real value caches do) under its noise, so the output, V's mean over
            the window, does not shrink towards the noise as windows grow.
hugelogit   scores around +-1e4: one bias channel per kv head holds max * 2^-4 in
            every key, the query holds an integer +-B there with scale * B * max *
            2^-4 log-uniform in [5e3, 2e4] and a sign per row (some rows all
            strongly negative, some all positive); the other channels, integer
            fp8 codes times 2^-4 against small integer queries, spread a row's
            scores by about 2. Every q . k is then an integer times 2^-4 below
            2^24 of them, exact in an fp32 dot whatever its order.
scalespread per-token: each token's scale is 2^e with e uniform in [-20, 13]
            (about 1e-6 to 1e4), drawn separately for K and V. Keys are exact
            codes with a +-max code in every token, so their scores are exact;
            the query is small enough that the largest keys score about +-20.
            Values are gauss draws stretched to amax = max * 2^e (inexact
            below it, so V carries the floor). Per-tensor: K's and V's single
            scales sit at either end of that range (2^-20 or 2^13, drawn), the
            query scaled to K's. bf16: the same scales, given as its per-token
            or per-tensor scale, the stored elements being the codes and draws.

bf16 caches store `values / scale` rounded to bf16. Where a distribution does not
say otherwise their per-token scales are powers of two in [1/2, 2] and the
per-tensor scale is 1, so dequantizing is exact.
"""

import math
from dataclasses import dataclass

import torch

from reference import fp8

DISTS = ("gauss", "subnormal", "saturate", "peaked", "flat", "hugelogit", "scalespread")
FP16_MAX = 65504.0
LEAD_RANGE = (36.0, 300.0)  # peaked: a row's leader over its other keys, natural-log units
HUGE_RANGE = (5e3, 2e4)  # hugelogit: magnitude of a row's scores
HUGE_UNIT = 2.0 ** -4  # hugelogit: the keys' scale
SPREAD_EXPONENTS = (-20, 13)  # scalespread: per-token scale 2^e, e in this range
SATURATION = 1.25  # saturate: how far past max the largest value of a token (or the tensor) goes, at most
_LEADER_TILES = (256, 64, 32)  # tile and partition sizes a leader is put next to


@dataclass
class Drawn:
    """One distribution's draw over the blocks that hold the batch's tokens ("live" blocks; `draw`
    places them in the pool). k, v: float32 [live, bs, Hkv, D] originals (zero in slots no
    sequence uses); query: float32 [S, Q, Hq, D]; k_scale, v_scale: the scales to store with
    ([1] per tensor, [live, Hkv, bs] per token), or None for the amax scale (fp8 only);
    outlier: a per-tensor scale-setting value to put in a block the batch does not read (0: none)."""

    k: torch.Tensor
    v: torch.Tensor
    query: torch.Tensor
    k_scale: torch.Tensor | None
    v_scale: torch.Tensor | None
    outlier: float = 0.0


def gauss_values(gen, shape, token_dims: int) -> torch.Tensor:
    """Gaussian values with a few outlier channels and a per-token magnitude spread."""
    x = torch.randn(shape, generator=gen)
    d = shape[-1]
    channel = torch.ones(d)
    channel[torch.randperm(d, generator=gen)[: max(1, d // 32)]] = 6.0
    token_shape = shape[:token_dims] + (1,) * (len(shape) - token_dims)
    x *= torch.exp(0.5 * torch.randn(token_shape, generator=gen)) * channel
    return x


def _live(used: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """x [pool, bs, Hkv, D] with the slots no sequence uses set to zero."""
    return torch.where(used[:, :, None, None], x, torch.zeros_like(x))


def _live_gauss(gen, used, shape) -> torch.Tensor:
    """gauss_values per token, zero in unused slots."""
    return _live(used, gauss_values(gen, shape, 3))


def _format(cache: str) -> fp8.Fp8Format:
    """The fp8 format whose codes a cache holds; bf16 holds every e4m3fn code exactly."""
    return fp8.FORMATS["e4m3fn" if cache == "bf16" else cache]


def _codes(x: torch.Tensor, fmt: fp8.Fp8Format) -> torch.Tensor:
    """x rounded onto the fp8 grid (saturating at +-max): exact fp8 values, float32."""
    return fp8.decode(fp8.encode(x, fmt), fmt).float()


def _pow2(gen, shape, lo: int, hi: int) -> torch.Tensor:
    """2^e with integer e uniform in [lo, hi], float32."""
    return torch.ldexp(torch.ones(shape), torch.randint(lo, hi + 1, shape, generator=gen))


def _bf16_scales(gen, case, shape):
    """(k_scale, v_scale) of a bf16 cache: per-token 2^e with e uniform in {-1, 0, 1}; per-tensor 1."""
    pool, bs, hkv, _ = shape
    if case.scales == "tensor":
        return torch.tensor([1.0]), torch.tensor([1.0])
    return _pow2(gen, (pool, hkv, bs), -1, 1), _pow2(gen, (pool, hkv, bs), -1, 1)


def _per_token(scale: torch.Tensor) -> torch.Tensor:
    """A [pool, Hkv, bs] per-token scale broadcast onto [pool, bs, Hkv, 1]."""
    return scale.permute(0, 2, 1)[..., None]


def _bf16_query(x: torch.Tensor) -> torch.Tensor:
    """x rounded to bf16 and back: a query the kernel sees exactly."""
    return x.to(torch.bfloat16).float()


def _subnormal(gen, case, used, shape, q_shape) -> Drawn:
    if case.cache == "bf16":
        raise ValueError("case: subnormal needs an fp8 cache (see cases.decode_values), got bf16")
    pool, bs, hkv, d = shape
    fmt = _format(case.cache)
    sub = 2.0 * math.ldexp(1.0, fmt.min_normal_exponent - fp8.MANTISSA_BITS)  # two subnormal steps
    unit = 1.0 / fmt.max  # scale of a token whose amax is 1
    query = torch.randn(q_shape, generator=gen) * (1.5 / (sub * unit))
    if case.scales == "tensor":
        k = _live(used, torch.randn(shape, generator=gen) * (sub * unit))
        v = _live(used, torch.randn(shape, generator=gen) * (sub * unit))
        return Drawn(k, v, _bf16_query(query), None, None, outlier=1.0)
    heads = case.hq // case.hkv
    out = []
    for _ in range(2):  # keys, then values
        amax = torch.exp(0.5 * torch.randn(pool, bs, hkv, 1, generator=gen))
        x = torch.randn(shape, generator=gen) * (sub * unit) * amax
        outlier = torch.randint(0, d, (hkv,), generator=gen)
        sign = torch.where(torch.rand(pool, bs, hkv, generator=gen) < 0.5, -1.0, 1.0)
        x[:, :, torch.arange(hkv), outlier] = sign * amax[..., 0]
        out.append((_live(used, x), outlier))
    (k, k_outlier), (v, _) = out
    q_heads = torch.arange(case.hq)
    query[..., q_heads, k_outlier[q_heads // heads]] = 0.0
    return Drawn(k, v, _bf16_query(query), None, None)


def _saturate(gen, case, used, shape, q_shape) -> Drawn:
    pool, bs, hkv, _ = shape
    k = _live(used, torch.randn(shape, generator=gen))
    v = _live(used, torch.randn(shape, generator=gen))
    query = torch.randn(q_shape, generator=gen)
    if case.scales == "token":
        over = [SATURATION ** torch.rand(pool, hkv, bs, generator=gen) for _ in range(2)]
    else:
        over = [torch.tensor([SATURATION])] * 2

    def amax(x):
        if case.scales == "token":
            a = x.abs().amax(dim=-1).permute(0, 2, 1)
        else:
            a = x.abs().amax().reshape(1) if x.numel() else torch.ones(1)
        return torch.where(a > 0, a, torch.ones_like(a))

    if case.cache == "bf16":
        k_scale, v_scale = _bf16_scales(gen, case, shape)
        stretch = [FP16_MAX * f / amax(x) for f, x in zip(over, (k, v))]  # stored amax = f * 65504
        if case.scales == "token":
            k = k * _per_token(stretch[0] * k_scale)
            v = v * _per_token(stretch[1] * v_scale)
        else:
            k, v = k * stretch[0], v * stretch[1]
        typical = stretch[0].permute(0, 2, 1)[used] if case.scales == "token" else stretch[0]
        query = query / (typical.median() if typical.numel() else 1.0)
        return Drawn(k, v, query, k_scale, v_scale)
    fmt = _format(case.cache)
    k_scale, v_scale = ((amax(x) / (fmt.max * f)).float() for x, f in zip((k, v), over))
    return Drawn(k, v, query, k_scale, v_scale)


def _leader(gen, lo: int, hi: int, block: int, kind: int) -> int:
    """A key in [lo, hi) at an adversarial place: kind 0 the first, 1 the last (the current token),
    2 next to a block boundary, 3 next to a tile or partition boundary, 4 anywhere."""
    if kind == 0:
        return lo
    if kind == 1:
        return hi - 1
    sides = torch.randint(0, 2, (1,), generator=gen).item()  # the boundary's first key or the one before
    for size in ((block,) if kind == 2 else _LEADER_TILES if kind == 3 else ()):
        edge = (lo // size + 1) * size
        if edge < hi:
            return edge - sides if edge - sides >= lo else edge
    return lo + int(torch.randint(0, hi - lo, (1,), generator=gen))


def _peaked(gen, case, used, shape, q_shape, blocks) -> Drawn:
    pool, bs, hkv, d = shape
    heads = case.hq // case.hkv
    rows = heads * case.q
    if rows > d:
        raise ValueError(f"case: peaked needs (Hq/Hkv) * Q <= D channels, one per query row, got {rows} > {d}")
    scale = d ** -0.5
    free = d - rows
    k = _live(used, torch.cat([torch.zeros(pool, bs, hkv, rows),
                               torch.randn(pool, bs, hkv, free, generator=gen).clamp(-4, 4)], dim=-1))
    v = _live_gauss(gen, used, shape)
    noise = 0.5 * math.sqrt(d / free) if free else 0.0
    query = torch.cat([torch.zeros(q_shape[:-1] + (rows,)),
                       torch.randn(q_shape[:-1] + (free,), generator=gen) * noise], dim=-1)
    lo_lead, hi_lead = (math.log(x) for x in LEAD_RANGE)
    value = 8.0
    for i, length in enumerate(case.lens):
        for p in range(case.q):
            hi = length - case.q + 1 + p
            lo = max(0, hi - case.window) if case.window > 0 else 0
            if hi <= lo:
                continue
            for h in range(hkv):
                for g in range(heads):
                    r = p * heads + g
                    t = _leader(gen, lo, hi, case.block, (r + i + h) % 5)
                    k[int(blocks[i, t // case.block]), t % case.block, h, r] = value
                    lead = math.exp(lo_lead + (hi_lead - lo_lead) * torch.rand(1, generator=gen).item())
                    query[i, p, h * heads + g, r] = lead / (scale * value)
    return Drawn(k, v, _bf16_query(query), *_default_scales(gen, case, shape))


def _flat(gen, case, used, shape, q_shape) -> Drawn:
    pool, bs, hkv, d = shape
    key = gauss_values(gen, (hkv, d), 1)
    k = _live(used, key.expand(pool, bs, hkv, d).clone())
    mean = torch.randn(hkv, d, generator=gen)
    v = _live(used, mean + 0.25 * torch.randn(shape, generator=gen))
    query = gauss_values(gen, q_shape, 3) * 0.5
    return Drawn(k, v, query, *_default_scales(gen, case, shape))


def _hugelogit(gen, case, used, shape, q_shape) -> Drawn:
    pool, bs, hkv, d = shape
    fmt = _format(case.cache)
    heads = case.hq // case.hkv
    scale = d ** -0.5
    k = torch.round(_codes(torch.randn(shape, generator=gen) * 24.0, fmt)).clamp(-fmt.max / 2, fmt.max / 2)
    bias = torch.randint(0, d, (hkv,), generator=gen)
    k[:, :, torch.arange(hkv), bias] = fmt.max
    k = _live(used, k * HUGE_UNIT)
    v = _live_gauss(gen, used, shape)
    query = torch.round(torch.randn(q_shape, generator=gen) * (2.0 / (24.0 * HUGE_UNIT)))
    lo, hi = (math.log(x) for x in HUGE_RANGE)
    size = torch.exp(lo + (hi - lo) * torch.rand(q_shape[:-1], generator=gen))
    sign = torch.where(torch.rand(q_shape[:-1], generator=gen) < 0.5, -1.0, 1.0)
    q_heads = torch.arange(case.hq)
    query[..., q_heads, bias[q_heads // heads]] = torch.round(sign * size / (scale * fmt.max * HUGE_UNIT))
    return Drawn(k, v, _bf16_query(query), *_default_scales(gen, case, shape))


def _scalespread(gen, case, used, shape, q_shape) -> Drawn:
    pool, bs, hkv, d = shape
    fmt = _format(case.cache)
    lo, hi = SPREAD_EXPONENTS
    if case.scales == "token":
        k_scale, v_scale = _pow2(gen, (pool, hkv, bs), lo, hi), _pow2(gen, (pool, hkv, bs), lo, hi)
        k_unit, v_unit = _per_token(k_scale), _per_token(v_scale)
        loudest = math.ldexp(1.0, hi)
    else:
        ends = [math.ldexp(1.0, lo if torch.rand(1, generator=gen).item() < 0.5 else hi) for _ in range(2)]
        k_scale, v_scale = torch.tensor([ends[0]]), torch.tensor([ends[1]])
        k_unit, v_unit = k_scale, v_scale
        loudest = ends[0]
    codes = _codes(torch.randn(shape, generator=gen) * 64.0, fmt)
    top = torch.randint(0, d, (pool, bs, hkv, 1), generator=gen)
    sign = torch.where(torch.rand(pool, bs, hkv, 1, generator=gen) < 0.5, -fmt.max, fmt.max)
    codes.scatter_(-1, top, sign)
    k = _live(used, codes * k_unit)
    g = _live(used, gauss_values(gen, shape, 3))
    g_max = g.abs().amax(dim=-1, keepdim=True) if case.scales == "token" else g.abs().amax()
    v = g / g_max.clamp(min=1e-30) * (fmt.max * v_unit)  # amax = max * scale: the scale is 2^e
    target = 20.0 if case.scales == "token" else 1.5  # score std of the loudest keys
    query = torch.randn(q_shape, generator=gen) * (target / (64.0 * loudest))
    if case.cache != "bf16":
        k_scale = v_scale = None
    return Drawn(k, v, _bf16_query(query), k_scale, v_scale)


def _default_scales(gen, case, shape):
    """(k_scale, v_scale): the amax scale for fp8, `_bf16_scales` for bf16."""
    if case.cache == "bf16":
        return _bf16_scales(gen, case, shape)
    return None, None


@dataclass
class Placed:
    """A draw placed in the block pool: k, v [pool, bs, Hkv, D]; query; k_scale, v_scale
    ([1], [pool, Hkv, bs] or None for the amax scale); keep: bool [pool, bs], the slots that
    hold data (the used ones, plus a scale-setting outlier's)."""

    k: torch.Tensor
    v: torch.Tensor
    query: torch.Tensor
    k_scale: torch.Tensor | None
    v_scale: torch.Tensor | None
    keep: torch.Tensor


def draw(case, gen, tables: torch.Tensor, used: torch.Tensor, shape, q_shape) -> Placed:
    """The values of a non-gauss case over the block pool `shape` ([pool, bs, Hkv, D]; `used`
    [pool, bs] marks the slots its sequences hold, through `tables`), its query of `q_shape`
    [S, Q, Hq, D] and its scales, drawn from `gen` for the live blocks only."""
    makers = {"subnormal": _subnormal, "saturate": _saturate, "flat": _flat, "hugelogit": _hugelogit,
              "scalespread": _scalespread}
    if case.dist != "peaked" and case.dist not in makers:
        raise ValueError(f"case.dist: expected one of {DISTS[1:]} (gauss is drawn by cases.decode), got {case.dist!r}")
    pool = shape[0]
    live = used.any(1).nonzero()[:, 0]
    live_shape = (len(live),) + tuple(shape[1:])
    if case.dist == "peaked":
        where = torch.full((pool,), -1, dtype=torch.int64)
        where[live] = torch.arange(len(live))
        drawn = _peaked(gen, case, used[live], live_shape, q_shape, where[tables.long()])
    else:
        drawn = makers[case.dist](gen, case, used[live], live_shape, q_shape)
    keep = used.clone()

    def pooled(x):
        out = torch.zeros(shape)
        out[live] = x
        return out

    def pooled_scale(s):
        if s is None or s.numel() == 1:
            return s
        out = torch.ones(pool, shape[2], shape[1])
        out[live] = s
        return out

    k, v = pooled(drawn.k), pooled(drawn.v)
    if drawn.outlier:
        spare = int((~used.any(1)).nonzero()[0, 0])  # the pool always holds a block no sequence reads
        k[spare, 0, 0, 0] = v[spare, 0, 0, 0] = drawn.outlier
        keep[spare, 0] = True
    return Placed(k, v, drawn.query, pooled_scale(drawn.k_scale), pooled_scale(drawn.v_scale), keep)
