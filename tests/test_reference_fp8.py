"""reference.fp8 against torch's float8 casts, hand-computed codes and the fp8 grid itself."""

import pytest
import torch

from reference import fp8

TORCH_DTYPES = {"e4m3fn": torch.float8_e4m3fn, "e4m3fnuz": torch.float8_e4m3fnuz}
NAMES = tuple(TORCH_DTYPES)
ALL_CODES = torch.arange(256, dtype=torch.uint8)


def finite_grid(name: str) -> torch.Tensor:
    """Every finite value of the format, sorted, from torch's own cast (an independent decoder)."""
    values = ALL_CODES.view(TORCH_DTYPES[name]).to(torch.float64)
    return torch.unique(values[~torch.isnan(values)])


def rounding_bound(y: torch.Tensor, name: str) -> torch.Tensor:
    """Largest error a saturating round-to-nearest may make on y.

    Half the distance between the two grid values that bracket y, plus how far
    y lies beyond +-max (saturation).
    """
    grid = finite_grid(name)
    inside = y.clamp(grid[0], grid[-1])
    hi = torch.searchsorted(grid, inside).clamp(min=1)
    return (grid[hi] - grid[hi - 1]) / 2 + (y - inside).abs()


def signed_outliers(shape, generator) -> torch.Tensor:
    """Signed normal values spread over many binades, with a few large outliers."""
    x = torch.randn(shape, generator=generator, dtype=torch.float64)
    x = x * torch.exp2(torch.randint(-6, 4, shape, generator=generator).to(torch.float64))
    outliers = torch.rand(shape, generator=generator) < 0.01
    return torch.where(outliers, x * 50, x)


@pytest.mark.parametrize("name", NAMES)
def test_decode_matches_torch_on_all_codes(name):
    ours = fp8.decode(ALL_CODES, name)
    theirs = ALL_CODES.view(TORCH_DTYPES[name]).to(torch.float64)
    assert ours.dtype == torch.float64 and ours.shape == (256,)
    nan = torch.isnan(theirs)
    assert torch.equal(torch.isnan(ours), nan)
    assert torch.equal(ours[~nan], theirs[~nan])
    assert torch.equal(torch.signbit(ours[~nan]), torch.signbit(theirs[~nan]))


@pytest.mark.parametrize(
    "name, code, value",
    [
        ("e4m3fn", 0x00, 0.0),
        ("e4m3fn", 0x01, 2.0**-9),
        ("e4m3fn", 0x07, 7 * 2.0**-9),
        ("e4m3fn", 0x08, 2.0**-6),
        ("e4m3fn", 0x38, 1.0),
        ("e4m3fn", 0x7E, 448.0),
        ("e4m3fn", 0xFE, -448.0),
        ("e4m3fn", 0xB9, -1.125),
        ("e4m3fnuz", 0x01, 2.0**-10),
        ("e4m3fnuz", 0x08, 2.0**-7),
        ("e4m3fnuz", 0x40, 1.0),
        ("e4m3fnuz", 0x7F, 240.0),
        ("e4m3fnuz", 0xFF, -240.0),
        ("e4m3fnuz", 0x81, -(2.0**-10)),
    ],
)
def test_decode_known_codes(name, code, value):
    assert fp8.decode(torch.tensor([code], dtype=torch.uint8), name).item() == value


def test_decode_nan_codes_and_negative_zero():
    fn = fp8.decode(torch.tensor([0x7F, 0xFF, 0x80], dtype=torch.uint8), "e4m3fn")
    assert torch.isnan(fn[:2]).all() and fn[2].item() == 0.0 and torch.signbit(fn[2])
    fnuz = fp8.decode(ALL_CODES, "e4m3fnuz")
    assert torch.isnan(fnuz).nonzero().flatten().tolist() == [0x80]
    assert fp8.FORMATS["e4m3fn"].has_negative_zero and not fp8.FORMATS["e4m3fnuz"].has_negative_zero


def test_decode_keeps_shape():
    codes = torch.randint(0, 256, (3, 4, 5), dtype=torch.uint8)
    out = fp8.decode(codes, torch.float8_e4m3fn)
    assert out.shape == codes.shape and out.device == codes.device
    torch.testing.assert_close(out.flatten(), fp8.decode(codes.flatten(), "e4m3fn"), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("name", NAMES)
def test_encode_inverts_decode(name):
    values = fp8.decode(ALL_CODES, name)
    finite = ~torch.isnan(values)
    assert torch.equal(fp8.encode(values[finite], name), ALL_CODES[finite])


def test_encode_negative_zero():
    minus_zero = torch.tensor([-0.0, -1e-30])
    assert fp8.encode(minus_zero, "e4m3fn").tolist() == [0x80, 0x80]
    assert fp8.encode(minus_zero, "e4m3fnuz").tolist() == [0x00, 0x00]


@pytest.mark.parametrize("name", NAMES)
def test_encode_matches_torch_cast_in_range(name):
    gen = torch.Generator().manual_seed(7)
    x = signed_outliers((20000,), gen).to(torch.float32)
    x = torch.cat([x, torch.randn(2000, generator=gen) * 2.0**-9])  # the subnormal range
    x = x[x.abs() <= fp8.FORMATS[name].max]
    assert torch.equal(fp8.encode(x, name), x.to(TORCH_DTYPES[name]).view(torch.uint8))


@pytest.mark.parametrize("name", NAMES)
def test_encode_picks_the_nearest_grid_value(name):
    gen = torch.Generator().manual_seed(8)
    y = signed_outliers((5000,), gen).clamp(-fp8.FORMATS[name].max, fp8.FORMATS[name].max)
    grid = finite_grid(name)
    nearest = (y[:, None] - grid[None, :]).abs().min(dim=1).values
    assert torch.equal((fp8.decode(fp8.encode(y, name), name) - y).abs(), nearest)


@pytest.mark.parametrize("name", NAMES)
def test_encode_ties_go_to_the_even_code(name):
    fmt = fp8.FORMATS[name]
    codes = torch.arange(0, 0x7F if name == "e4m3fn" else 0x80)  # 0 .. max code
    values = fp8.decode(codes.to(torch.uint8), name)
    lower, upper = codes[:-1], codes[1:]
    mid = (values[:-1] + values[1:]) / 2
    even = torch.where(lower % 2 == 0, lower, upper)
    assert torch.equal(fp8.encode(mid, name).long(), even)
    neg_even = torch.where(even == 0, 0 if name == "e4m3fnuz" else 0x80, even | 0x80)
    assert torch.equal(fp8.encode(-mid, name).long(), neg_even)
    nudge = (values[1:] - values[:-1]) * 1e-6
    assert torch.equal(fp8.encode(mid - nudge, name).long(), lower)
    assert torch.equal(fp8.encode(mid + nudge, name).long(), upper)
    assert values[-1].item() == fmt.max


@pytest.mark.parametrize("name", NAMES)
def test_encode_subnormals(name):
    tiny = 2.0 ** (1 - fp8.FORMATS[name].bias - 3)
    k = torch.arange(8, dtype=torch.float64)
    assert fp8.encode(k * tiny, name).tolist() == list(range(8))
    assert fp8.encode(-k[1:] * tiny, name).tolist() == [0x80 | c for c in range(1, 8)]
    assert fp8.encode(torch.tensor([0.49 * tiny, 0.5 * tiny, 0.51 * tiny, 1.5 * tiny]), name).tolist() == [0, 0, 1, 2]


@pytest.mark.parametrize("name, max_code", [("e4m3fn", 0x7E), ("e4m3fnuz", 0x7F)])
def test_encode_saturates_overflow_and_inf(name, max_code):
    fmt = fp8.FORMATS[name]
    big = torch.tensor([fmt.max * 1.01, fmt.max * 1.2, 1e30, float("inf"), torch.finfo(torch.float64).max])
    assert fp8.encode(big, name).tolist() == [max_code] * 5
    assert fp8.encode(-big, name).tolist() == [max_code | 0x80] * 5
    assert fp8.encode(big.to(torch.float32), name).tolist() == [max_code] * 5


@pytest.mark.parametrize("name", NAMES)
def test_encode_nan(name):
    nan = torch.tensor([float("nan"), -float("nan"), 1.0])
    out = fp8.encode(nan, name)
    assert out[:2].tolist() == [fp8.FORMATS[name].nan_code] * 2
    assert torch.isnan(fp8.decode(out, name)[:2]).all()
    assert fp8.FORMATS["e4m3fn"].nan_code == 0x7F and fp8.FORMATS["e4m3fnuz"].nan_code == 0x80


def test_format_of():
    assert fp8.format_of(torch.float8_e4m3fn) is fp8.FORMATS["e4m3fn"]
    assert fp8.format_of(torch.float8_e4m3fnuz) is fp8.FORMATS["e4m3fnuz"]
    assert fp8.format_of("e4m3fnuz").bias == 8 and fp8.format_of("e4m3fn").max == 448.0
    assert fp8.format_of(fp8.FORMATS["e4m3fn"]).name == "e4m3fn"
    for bad in (torch.bfloat16, "e5m2", torch.float8_e5m2, 3):
        with pytest.raises(ValueError, match="dtype_or_name"):
            fp8.format_of(bad)


def test_bad_arguments():
    with pytest.raises(TypeError, match="codes: expected a torch.uint8"):
        fp8.decode(torch.zeros(3, dtype=torch.int32), "e4m3fn")
    with pytest.raises(TypeError, match="x: expected a floating-point"):
        fp8.encode(torch.zeros(3, dtype=torch.int64), "e4m3fn")
    with pytest.raises(ValueError, match="x: expected finite"):
        fp8.quantize_per_tensor(torch.tensor([1.0, float("inf")]), "e4m3fn")
    with pytest.raises(ValueError, match="x: expected shape"):
        fp8.quantize_per_token(torch.ones(2, 3, 4), "e4m3fn")
    with pytest.raises(ValueError, match="scale: expected one element"):
        fp8.dequantize(torch.zeros(2, 4, 3, 8, dtype=torch.uint8), torch.ones(2, 4, 3), "e4m3fn")


@pytest.mark.parametrize("name", NAMES)
def test_quantize_per_tensor(name):
    fmt = fp8.FORMATS[name]
    gen = torch.Generator().manual_seed(9)
    x = signed_outliers((3, 16, 2, 32), gen).to(torch.float32)
    codes, scale = fp8.quantize_per_tensor(x, name)
    assert codes.dtype == torch.uint8 and codes.shape == x.shape
    assert scale.dtype == torch.float32 and scale.dim() == 0
    assert scale.item() == torch.tensor(x.abs().max().double().item() / fmt.max, dtype=torch.float32).item()
    y = x.double() / scale.double()
    err = (fp8.dequantize(codes, scale, name) - x.double()).abs()
    assert bool((err <= rounding_bound(y, name) * scale.double() * (1 + 1e-12)).all())
    assert fp8.decode(codes, name).abs().max().item() == fmt.max
    assert torch.equal(fp8.dequantize(codes, scale.item(), name), fp8.dequantize(codes, scale, name))


@pytest.mark.parametrize("name", NAMES)
def test_quantize_all_zero_gives_scale_one(name):
    codes, scale = fp8.quantize_per_tensor(torch.zeros(4, 8), name)
    assert scale.item() == 1.0 and not codes.any()
    codes, scale = fp8.quantize_per_token(torch.zeros(2, 4, 3, 8), name)
    assert torch.equal(scale, torch.ones(2, 3, 4)) and not codes.any()


@pytest.mark.parametrize("name", NAMES)
def test_quantize_per_token(name):
    fmt = fp8.FORMATS[name]
    gen = torch.Generator().manual_seed(10)
    nb, bs, hkv, d = 3, 16, 2, 32
    x = signed_outliers((nb, bs, hkv, d), gen).to(torch.float32)
    x[1, 5, 0] = 0.0  # an all-zero row
    x[2, 7, 1] *= 1e-3  # a row far below the others
    codes, scale = fp8.quantize_per_token(x, name)
    assert codes.shape == x.shape and codes.dtype == torch.uint8
    assert scale.shape == (nb, hkv, bs) and scale.dtype == torch.float32
    assert scale[1, 0, 5].item() == 1.0 and not codes[1, 5, 0].any()
    expected = (x.double().abs().amax(dim=-1) / fmt.max).to(torch.float32).permute(0, 2, 1)
    nonzero = expected > 0
    assert torch.equal(scale[nonzero], expected[nonzero])
    row_scale = scale.double().permute(0, 2, 1).unsqueeze(-1)
    deq = fp8.dequantize(codes, scale, name)
    assert torch.equal(deq, fp8.decode(codes, name) * row_scale)
    err = (deq - x.double()).abs()
    assert bool((err <= rounding_bound(x.double() / row_scale, name) * row_scale * (1 + 1e-12)).all())
    row_peak = fp8.decode(codes, name).abs().amax(dim=-1)
    assert bool((row_peak[nonzero.permute(0, 2, 1)] == fmt.max).all())


@pytest.mark.parametrize("name", NAMES)
def test_chunked_quantization_gives_the_codes_of_one_pass(name, monkeypatch):
    """encode and both quantizers go CHUNK_ELEMENTS at a time on large tensors: a chunk that divides
    neither a block nor the whole (7 elements, blocks of 3 x 2 x 4) gives the same codes and scales."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(5, 3, 2, 4, generator=gen) * torch.exp(4 * torch.randn(5, 3, 2, 1, generator=gen))
    x[1, 2, 0, 3] = float("inf")
    whole = fp8.encode(x, name), fp8.quantize_per_token(x.nan_to_num(posinf=1.0), name), \
        fp8.quantize_per_tensor(x.nan_to_num(posinf=1.0), name)
    monkeypatch.setattr(fp8, "CHUNK_ELEMENTS", 7)
    parts = fp8.encode(x, name), fp8.quantize_per_token(x.nan_to_num(posinf=1.0), name), \
        fp8.quantize_per_tensor(x.nan_to_num(posinf=1.0), name)
    assert torch.equal(parts[0], whole[0]) and parts[0].shape == x.shape
    for (codes, scale), (want_codes, want_scale) in zip(parts[1:], whole[1:]):
        assert torch.equal(codes, want_codes) and torch.equal(scale, want_scale)
    transposed = x.transpose(1, 2)  # not contiguous: encode reads it as laid out
    assert torch.equal(fp8.encode(transposed, name), whole[0].transpose(1, 2))
