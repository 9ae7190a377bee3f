"""The value distributions of the decode cases hold what cases.decode_values says they hold.

Each property is checked on what the kernel sees: the stored cache decoded and
scaled (fp8 from its bits), the bf16 query, the visible keys of every row.
"""

import math

import pytest
import torch

from cases import decode_values
from cases.decode import DecodeCase, build
from reference import fp8, layouts
from verify import floors
from verify.device import seed_of

CACHES = ("e4m3fn", "e4m3fnuz", "bf16")
GRID = [(cache, scales) for cache in CACHES for scales in ("tensor", "token")]


def _case(dist, cache, scales, **kw):
    base = dict(block=16, hq=8, hkv=2, d=64, window=0, lens=(70, 24), q=2, layout="shuffled", path="onepass")
    base.update(kw)
    return DecodeCase(cache=cache, scales=scales, dist=dist, **base)


def _built(case, device):
    return build(case, device, seed_of(case.id))


def _logical(inputs, which):
    """Stored logical [nb, bs, Hkv, D] elements of K or V: uint8 codes for fp8, float64 for bf16."""
    case = inputs.case
    if which == "k":
        stored = layouts.unpack_k(inputs.key_cache, case.layout)
    else:
        stored = layouts.unpack_v(inputs.value_cache, case.layout)
    return stored.view(torch.uint8) if case.cache != "bf16" else stored.double()


def _scale(inputs, which):
    """The scale of K or V broadcast onto the logical layout, float64."""
    s = (inputs.k_scale if which == "k" else inputs.v_scale).double()
    return s.reshape(()) if s.numel() == 1 else s.permute(0, 2, 1)[..., None]


def _dequantized(inputs, which):
    stored = _logical(inputs, which)
    values = stored if inputs.case.cache == "bf16" else fp8.decode(stored, inputs.case.cache)
    return values * _scale(inputs, which)


def _used(inputs):
    """bool [nb, bs]: the slots some sequence holds."""
    case = inputs.case
    used = torch.zeros(inputs.key_cache.shape[0], case.block, dtype=torch.bool)
    for i, length in enumerate(case.lens):
        pos = torch.arange(length)
        used[inputs.block_tables[i, pos // case.block].long(), pos % case.block] = True
    return used


def _rows(inputs):
    """(seq, token, head, visible positions, their scores) for every query row that sees a key,
    scored in float64 on the kernel's operands (bf16 query, dequantized keys)."""
    case = inputs.case
    keys = _dequantized(inputs, "k")
    q = inputs.query.double().reshape(len(case.lens), case.q, case.hq, case.d)
    group = case.hq // case.hkv
    for i, length in enumerate(case.lens):
        for p in range(case.q):
            hi = length - case.q + 1 + p
            lo = max(0, hi - case.window) if case.window > 0 else 0
            if hi <= lo:
                continue
            pos = torch.arange(lo, hi)
            k = keys[inputs.block_tables[i, pos // case.block].long(), pos % case.block]
            for h in range(case.hq):
                yield i, p, h, pos, inputs.scale * (k[:, h // group] @ q[i, p, h])


def test_every_distribution_is_named():
    assert decode_values.DISTS[0] == "gauss"
    assert set(decode_values.DISTS) == {"gauss", "subnormal", "saturate", "peaked", "flat", "hugelogit",
                                        "scalespread"}


@pytest.mark.parametrize("cache", ["e4m3fn", "e4m3fnuz"])
@pytest.mark.parametrize("scales", ["tensor", "token"])
def test_subnormal_makes_most_codes_subnormal(cache, scales, device):
    inputs = _built(_case("subnormal", cache, scales), device)
    used = _used(inputs)
    for which in ("k", "v"):
        codes = _logical(inputs, which)[used].to(torch.int64)  # [tokens, Hkv, D]
        exponent = (codes >> 3) & 0xF
        nonzero_sub = (exponent == 0) & ((codes & 0x7) != 0)
        # one outlier per token and kv head (per-token) is normal; almost all the rest is subnormal
        assert (exponent == 0).float().mean() > 0.9
        assert nonzero_sub.float().mean() > 0.6
    if scales == "tensor":
        fmt = fp8.FORMATS[cache]
        # the scale comes from an outlier the batch never reads: every read value is far below it
        assert torch.equal(inputs.k_scale, torch.tensor([1.0 / fmt.max], dtype=torch.float32))
        assert inputs.original_k[used].abs().max() < 0.05 * fmt.max * float(inputs.k_scale)


def test_subnormal_is_refused_for_bf16(device):
    with pytest.raises(ValueError, match="subnormal needs an fp8 cache"):
        _built(_case("subnormal", "bf16", "tensor"), device)


@pytest.mark.parametrize("cache, scales", GRID)
def test_saturate_reaches_past_the_format_max(cache, scales, device):
    inputs = _built(_case("saturate", cache, scales), device)
    used = _used(inputs)
    tokens = int(used.sum()) * inputs.case.hkv
    for which in ("k", "v"):
        original = (inputs.original_k if which == "k" else inputs.original_v).double()
        if cache == "bf16":
            stored = _logical(inputs, which)[used]
            assert torch.isfinite(stored).all()
            assert int((stored.abs() > decode_values.FP16_MAX).sum()) >= tokens if scales == "token" \
                else bool((stored.abs() > decode_values.FP16_MAX).any())
            continue
        fmt = fp8.FORMATS[cache]
        codes = _logical(inputs, which)[used]
        at_max = fp8.decode(codes, fmt).abs() == fmt.max
        past = (original / _scale(inputs, which))[used].abs() > fmt.max
        # more +-max codes than the amax scale makes (one per token, or one per tensor), and clipping
        assert int(at_max.sum()) > (tokens if scales == "token" else 1)
        assert bool(past.any())


@pytest.mark.parametrize("cache, scales", GRID)
@pytest.mark.parametrize("window, lens, q", [(0, (300, 101), 2), (40, (130, 3), 4), (1, (5, 1), 2)])
def test_peaked_rows_have_one_leader_far_ahead(cache, scales, window, lens, q, device):
    inputs = _built(_case("peaked", cache, scales, window=window, lens=lens, q=q), device)
    leads, places = [], set()
    for i, p, h, pos, scores in _rows(inputs):
        # the lead over the runner-up; a row that sees one key: that key's own score, the designed lead
        top2 = torch.cat([scores.topk(min(2, len(pos))).values, scores.new_zeros(1)])
        leads.append(float(top2[0] - top2[1]))
        where = int(pos[scores.argmax()])
        places.add("first" if where == pos[0] else "current" if where == pos[-1] else
                   "block" if where % 16 in (0, 15) else "inside")
    assert leads and min(leads) >= 30.0
    if window != 1:
        assert max(leads) > 89.0, "some rows lead by more than exp can bridge in fp32"
        assert places == {"first", "current", "block", "inside"}


@pytest.mark.parametrize("cache, scales", GRID)
def test_flat_keys_are_all_equal(cache, scales, device):
    inputs = _built(_case("flat", cache, scales), device)
    for i, p, h, pos, scores in _rows(inputs):
        assert bool((scores == scores[0]).all())
    v = _dequantized(inputs, "v")[_used(inputs)]
    # V's mean is not buried in its noise, so the flat average stays at V's scale
    assert float(v.mean(0).abs().mean()) > 2 * float(v.std(0).mean()) / math.sqrt(v.shape[0])


@pytest.mark.parametrize("cache, scales", GRID)
def test_hugelogit_scores_are_huge_and_exact(cache, scales, device):
    inputs = _built(_case("hugelogit", cache, scales), device)
    used = _used(inputs)
    # keys and query are exactly what the kernel sees, so quantization leaves the scores alone
    assert torch.equal(_dequantized(inputs, "k")[used], inputs.original_k[used].double())
    assert torch.equal(inputs.query.float(), inputs.query_original)
    signs = set()
    for i, p, h, pos, scores in _rows(inputs):
        assert float(scores.abs().min()) > 0.5 * decode_values.HUGE_RANGE[0]
        assert bool((scores > 0).all()) or bool((scores < 0).all())
        signs.add(bool(scores[0] > 0))
        assert float(scores.max() - scores.min()) < 50.0
    assert signs == {True, False}


@pytest.mark.parametrize("cache, scales", GRID)
def test_scalespread_spans_ten_decades_with_exact_keys(cache, scales, device):
    inputs = _built(_case("scalespread", cache, scales, lens=(300, 101)), device)
    used = _used(inputs)
    assert torch.equal(_dequantized(inputs, "k")[used], inputs.original_k[used].double())
    lo, hi = decode_values.SPREAD_EXPONENTS
    for scale in (inputs.k_scale, inputs.v_scale):
        live = scale.permute(0, 2, 1)[used] if scales == "token" else scale
        exponents = torch.log2(live.double())
        assert torch.equal(exponents, exponents.round()), "every scale is a power of two"
        if scales == "token":
            assert float(exponents.min()) <= lo + 3 and float(exponents.max()) >= hi - 3
        else:
            assert float(exponents) in (lo, hi)


@pytest.mark.parametrize("dist", decode_values.DISTS)
@pytest.mark.parametrize("cache", CACHES)
def test_floors_stay_below_the_output(dist, cache, device):
    if dist == "subnormal" and cache == "bf16":
        pytest.skip("undefined pair (cases.decode_matrix.defined)")
    for scales in ("tensor", "token"):
        inputs = _built(_case(dist, cache, scales), device)
        judged = floors.decode(inputs)
        ref_max = float(judged.ref8.abs().max())
        assert judged.floor < 0.5 * ref_max, f"{inputs.case.id}: floor {judged.floor:.3g}, max {ref_max:.3g}"
        if cache != "bf16":  # fp8 rounding of V always shows
            assert judged.floor > 0.0
