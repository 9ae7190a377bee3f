"""reference.paged_decode against a plain loop over sequences, heads and query rows.

The loop reads every cache element through the element-offset formulas of the
layout, decodes fp8 with torch's own float8 cast, and does softmax one row at
a time, so it shares no code path with the vectorized reference.
"""

import math

import pytest
import torch

from reference import fp8, layouts
from reference.paged_decode import paged_decode

D = 32
LENS = (0, 1, 15, 16, 17, 40)
WINDOWS = (0, 1, 5, 100)
CACHE_DTYPES = {"e4m3fn": torch.float8_e4m3fn, "e4m3fnuz": torch.float8_e4m3fnuz, "bf16": torch.bfloat16}
HEADS = {"gqa": (8, 2), "mqa": (4, 1)}
NAN_BYTE = {torch.float8_e4m3fn: 0x7F, torch.float8_e4m3fnuz: 0x80}


def signed_outliers(shape, gen) -> torch.Tensor:
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    return torch.where(torch.rand(shape, generator=gen) < 0.02, x * 20, x)


def make_inputs(cache, layout, scale_kind, heads, bs, q_len, seed, lens=LENS):
    """Random query, caches, block tables (junk past each sequence), seq_lens and scales.

    Returns (kwargs for paged_decode, live) where live [nb, bs] marks the
    (block, slot) pairs that hold a token of some sequence.
    """
    gen = torch.Generator().manual_seed(seed)
    hq, hkv = heads
    dtype = CACHE_DTYPES[cache]
    need = [-(-n // bs) for n in lens]
    nb = sum(need) + 2
    ids = torch.randperm(nb, generator=gen)
    tables = torch.randint(-2, nb + 3, (len(lens), max(need) + 1), generator=gen)
    live = torch.zeros(nb, bs, dtype=torch.bool)
    start = 0
    for i, n in enumerate(lens):
        tables[i, : need[i]] = ids[start : start + need[i]]
        start += need[i]
        for t in range(n):
            live[tables[i, t // bs], t % bs] = True
    caches, scales = [], []
    for _ in range(2):  # K, then V
        values = signed_outliers((nb, bs, hkv, D), gen)
        if dtype == torch.bfloat16:
            stored = values.to(torch.bfloat16)
            scale = torch.rand((nb, hkv, bs), generator=gen, dtype=torch.float64).float() + 0.5
            if scale_kind == "tensor":
                scale = scale[0, 0, 0].clone()
        elif scale_kind == "tensor":
            codes, scale = fp8.quantize_per_tensor(values, cache)
            stored = codes.view(dtype)
        else:
            codes, scale = fp8.quantize_per_token(values, cache)
            stored = codes.view(dtype)
        if scale_kind == "token":  # per-token scales with other strides: a view of [nb, bs, Hkv]
            scale = scale.permute(0, 2, 1).contiguous().permute(0, 2, 1)
        caches.append(stored)
        scales.append(scale)
    query_shape = (len(lens), q_len, hq, D) if q_len > 1 else (len(lens), hq, D)
    kwargs = dict(
        query=signed_outliers(query_shape, gen).to(torch.float32),
        key_cache=layouts.pack_k(caches[0], layout),
        value_cache=layouts.pack_v(caches[1], layout),
        block_tables=tables.to(torch.int32),
        seq_lens=torch.tensor(lens, dtype=torch.int32),
        scale=1 / math.sqrt(D),
        k_scale=scales[0],
        v_scale=scales[1],
        layout=layout,
    )
    return kwargs, live


def token_reader(cache, layout, which):
    """(block, slot, kv head) -> that token's D elements as float64, read from flat storage
    through the layout's element-offset formula."""
    flat = cache.reshape(-1)
    d = torch.arange(D)
    if layout == "plain":
        return lambda b, s, h: flat[b * cache.stride(0) + s * cache.stride(1) + h * cache.stride(2) + d].double()
    x = cache.shape[-1]
    if which == "k":
        bs = cache.shape[3]
        inner = (d // x) * bs * x + d % x
        return lambda b, s, h: flat[b * cache.stride(0) + h * cache.stride(1) + s * x + inner].double()
    inner = d * x
    return lambda b, s, h: flat[b * cache.stride(0) + h * cache.stride(1) + (s // x) * D * x + s % x + inner].double()


def scale_lookup(scale):
    """(block, kv head, slot) -> the scale of that token as a python float."""
    if scale is None:
        return lambda b, h, s: 1.0
    if isinstance(scale, (int, float)) or scale.numel() == 1:
        return lambda b, h, s: float(scale)
    table = scale.tolist()
    return lambda b, h, s: table[b][h][s]


def loop_reference(query, key_cache, value_cache, block_tables, seq_lens, *, scale, k_scale, v_scale,
                   sliding_window, layout):
    """Per sequence, per head, per query row: the visible keys, their softmax, the weighted values."""
    q4 = query.to(torch.float64)
    if q4.dim() == 3:
        q4 = q4.unsqueeze(1)
    num_seqs, q_len, hq, _ = q4.shape
    hkv = key_cache.shape[1] if layout == "shuffled" else key_cache.shape[2]
    bs = key_cache.shape[3] if layout == "shuffled" else key_cache.shape[1]
    group = hq // hkv
    read_k, read_v = token_reader(key_cache, layout, "k"), token_reader(value_cache, layout, "v")
    k_scale_at, v_scale_at = scale_lookup(k_scale), scale_lookup(v_scale)
    out = torch.zeros_like(q4)
    for i in range(num_seqs):
        length = int(seq_lens[i])
        for kv in range(hkv):
            keys, vals = torch.zeros(length, D, dtype=torch.float64), torch.zeros(length, D, dtype=torch.float64)
            for t in range(length):
                b, s = int(block_tables[i, t // bs]), t % bs
                keys[t] = read_k(b, s, kv) * k_scale_at(b, kv, s)
                vals[t] = read_v(b, s, kv) * v_scale_at(b, kv, s)
            for h in range(kv * group, (kv + 1) * group):
                for p in range(q_len):
                    position = length - q_len + p
                    first = max(0, position + 1 - sliding_window) if sliding_window > 0 else 0
                    if first > position:
                        continue
                    scores = scale * (keys[first : position + 1] @ q4[i, p, h])
                    weights = torch.exp(scores - scores.max())
                    out[i, p, h] = (weights / weights.sum()) @ vals[first : position + 1]
    return out if query.dim() == 4 else out.squeeze(1)


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("scale_kind", ["tensor", "token"])
@pytest.mark.parametrize("layout", layouts.LAYOUTS)
@pytest.mark.parametrize("cache", list(CACHE_DTYPES))
def test_matches_loop_reference(cache, layout, scale_kind, window):
    # Each heads x block size x Q combination runs at two windows, (0, 5) or (1, 100):
    # one that covers the whole of the longest sequence and one that slides.
    grid = [(h, bs, q) for h in HEADS.values() for bs in (16, 32) for q in (1, 2, 4)]
    for n, (heads, bs, q_len) in enumerate(grid):
        if (n + WINDOWS.index(window)) % 2:
            continue
        kwargs, _ = make_inputs(cache, layout, scale_kind, heads, bs, q_len, seed=1000 * window + n)
        out = paged_decode(**kwargs, sliding_window=window)
        expected = loop_reference(**kwargs, sliding_window=window)
        assert out.dtype == torch.float64 and out.shape == kwargs["query"].shape
        torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)
        assert out.abs().sum() > 0
        out4 = out if q_len > 1 else out.unsqueeze(1)
        for i, length in enumerate(LENS):  # rows at negative positions (Q > L) see nothing
            blind = max(0, q_len - length)
            assert not out4[i, :blind].any()
            assert out4[i, blind:].abs().sum(dim=-1).gt(0).all()


@pytest.mark.parametrize("layout", layouts.LAYOUTS)
@pytest.mark.parametrize("cache", list(CACHE_DTYPES))
def test_default_scales_and_window_minus_one(cache, layout):
    kwargs, _ = make_inputs(cache, layout, "tensor", HEADS["gqa"], 16, 2, seed=5)
    kwargs.update(k_scale=None, v_scale=None)
    out = paged_decode(**kwargs, sliding_window=-1)
    torch.testing.assert_close(out, loop_reference(**kwargs, sliding_window=0), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(out, paged_decode(**kwargs, sliding_window=0), rtol=0, atol=0)
    as_float = paged_decode(**{**kwargs, "k_scale": 1.0, "v_scale": 1}, sliding_window=0)
    torch.testing.assert_close(out, as_float, rtol=0, atol=0)
    one_element = paged_decode(**{**kwargs, "k_scale": torch.tensor([0.5]), "v_scale": torch.tensor(2.0)})
    zero_d = paged_decode(**{**kwargs, "k_scale": 0.5, "v_scale": torch.tensor([[2.0]], dtype=torch.float64)})
    assert torch.equal(one_element, zero_d) and not torch.equal(one_element, out)


@pytest.mark.parametrize("scale_kind", ["tensor", "token"])
@pytest.mark.parametrize("layout", layouts.LAYOUTS)
@pytest.mark.parametrize("cache", list(CACHE_DTYPES))
def test_window_one_returns_own_value(cache, layout, scale_kind):
    kwargs, _ = make_inputs(cache, layout, scale_kind, HEADS["gqa"], 16, 1, seed=6)
    out = paged_decode(**kwargs, sliding_window=1)
    v_logical = layouts.unpack_v(kwargs["value_cache"], layout)
    read_v, v_scale_at = token_reader(kwargs["value_cache"], layout, "v"), scale_lookup(kwargs["v_scale"])
    hq, hkv = HEADS["gqa"]
    group = hq // hkv
    for i, length in enumerate(LENS):
        if length == 0:
            assert not out[i].any()
            continue
        b, s = int(kwargs["block_tables"][i, (length - 1) // 16]), (length - 1) % 16
        for h in range(hq):
            value = read_v(b, s, h // group)
            own = value * v_scale_at(b, h // group, s)
            assert torch.equal(out[i, h], own)
            assert torch.equal(value, v_logical[b, s, h // group].to(torch.float64))


def poison(kwargs, live):
    """A copy of the inputs with NaN in every dead cache slot and NaN/inf in every dead per-token scale."""
    poisoned = dict(kwargs)
    for name, unpack, pack in (("key_cache", layouts.unpack_k, layouts.pack_k),
                               ("value_cache", layouts.unpack_v, layouts.pack_v)):
        logical = unpack(kwargs[name], kwargs["layout"]).clone()
        dead = ~live
        if logical.dtype in NAN_BYTE:
            raw = logical.view(torch.uint8)
            raw[dead] = NAN_BYTE[logical.dtype]
        else:
            logical[dead] = float("nan")
        poisoned[name] = pack(logical, kwargs["layout"])
    for name, bad in (("k_scale", float("nan")), ("v_scale", float("inf"))):
        scale = kwargs[name]
        if scale.dim() == 3:
            scale = scale.clone()
            scale[(~live)[:, None, :].expand_as(scale)] = bad
            poisoned[name] = scale
    return poisoned


@pytest.mark.parametrize("window", [0, 5])
@pytest.mark.parametrize("scale_kind", ["tensor", "token"])
@pytest.mark.parametrize("layout", layouts.LAYOUTS)
@pytest.mark.parametrize("cache", list(CACHE_DTYPES))
def test_dead_slots_never_leak(cache, layout, scale_kind, window):
    for q_len in (1, 4):
        kwargs, live = make_inputs(cache, layout, scale_kind, HEADS["gqa"], 16, q_len, seed=7 + q_len)
        clean = paged_decode(**kwargs, sliding_window=window)
        poisoned = poison(kwargs, live)
        assert not torch.equal(poisoned["key_cache"].view(torch.uint8), kwargs["key_cache"].view(torch.uint8))
        assert not torch.equal(poisoned["value_cache"].view(torch.uint8), kwargs["value_cache"].view(torch.uint8))
        if scale_kind == "token":
            assert torch.isnan(poisoned["k_scale"]).any() and torch.isinf(poisoned["v_scale"]).any()
        out = paged_decode(**poisoned, sliding_window=window)
        assert torch.equal(out, clean)


def test_tokens_before_the_window_are_never_read():
    kwargs, _ = make_inputs("e4m3fn", "shuffled", "tensor", HEADS["gqa"], 16, 2, seed=11, lens=(40,))
    clean = paged_decode(**kwargs, sliding_window=5)
    tables = kwargs["block_tables"].clone()
    tables[0, 0] = -1  # tokens 0..15: a block the window has released
    key_cache = kwargs["key_cache"].clone()
    key_cache.view(torch.uint8)[int(kwargs["block_tables"][0, 1])] = 0x7F  # tokens 16..31, all before the window
    out = paged_decode(**{**kwargs, "block_tables": tables, "key_cache": key_cache}, sliding_window=5)
    assert torch.equal(out, clean)
    with pytest.raises(ValueError, match="block_tables: expected block ids"):
        paged_decode(**{**kwargs, "block_tables": tables}, sliding_window=0)
    assert torch.isnan(paged_decode(**{**kwargs, "key_cache": key_cache}, sliding_window=0)).all()


def test_query_forms_and_dtypes():
    kwargs, _ = make_inputs("e4m3fnuz", "plain", "token", HEADS["mqa"], 32, 1, seed=12)
    out = paged_decode(**kwargs, sliding_window=0)
    as_double = paged_decode(**{**kwargs, "query": kwargs["query"].double()}, sliding_window=0)
    assert torch.equal(out, as_double) and out.device == kwargs["query"].device
    four_d = paged_decode(**{**kwargs, "query": kwargs["query"].unsqueeze(1)}, sliding_window=0)
    assert four_d.shape == (len(LENS), 1, 4, D) and torch.equal(four_d.squeeze(1), out)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu():
    kwargs, _ = make_inputs("e4m3fnuz", "shuffled", "token", HEADS["gqa"], 16, 2, seed=13)
    expected = paged_decode(**kwargs, sliding_window=5)
    on_gpu = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    out = paged_decode(**on_gpu, sliding_window=5)
    assert out.is_cuda
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-12, atol=1e-14)


def test_bad_arguments():
    kwargs, _ = make_inputs("e4m3fn", "shuffled", "token", HEADS["gqa"], 16, 1, seed=14)

    def call(**changes):
        paged_decode(**{**kwargs, **changes})

    with pytest.raises(TypeError, match="key_cache: expected dtype float8_e4m3fn, float8_e4m3fnuz, bfloat16.* "
                                         "got torch.float8_e5m2"):
        call(key_cache=kwargs["key_cache"].view(torch.float8_e5m2))
    with pytest.raises(TypeError, match="value_cache: expected dtype .* got torch.uint8"):
        call(value_cache=kwargs["value_cache"].view(torch.uint8))
    with pytest.raises(ValueError, match="layout: expected one of"):
        call(layout="nhd")
    with pytest.raises(ValueError, match="query: expected Hq to be a multiple of the caches' Hkv = 2, got Hq = 3"):
        call(query=kwargs["query"][:, :3])
    with pytest.raises(ValueError, match="query: expected head dim D = 32"):
        call(query=kwargs["query"][..., :16])
    with pytest.raises(ValueError, match="query: expected"):
        call(query=kwargs["query"][0, 0])
    with pytest.raises(ValueError, match=r"k_scale: expected one element \(per-tensor\) or shape"):
        call(k_scale=kwargs["k_scale"][:, :1])
    with pytest.raises(TypeError, match="v_scale: expected None, a number or a floating-point tensor"):
        call(v_scale="1.0")
    with pytest.raises(ValueError, match=r"seq_lens: expected shape \[num_seqs\]"):
        call(seq_lens=kwargs["seq_lens"][:3])
    with pytest.raises(TypeError, match="block_tables: expected an integer tensor"):
        call(block_tables=kwargs["block_tables"].float())
    with pytest.raises(ValueError, match="seq_lens: expected lengths >= 0"):
        call(seq_lens=kwargs["seq_lens"] - 1)
    with pytest.raises(ValueError, match="seq_lens: expected lengths <= max_blocks"):
        call(seq_lens=kwargs["seq_lens"] * 10)
    with pytest.raises(ValueError, match="value_cache: expected the key cache's logical shape"):
        call(value_cache=kwargs["value_cache"][:, :1].contiguous())
    with pytest.raises(TypeError, match="sliding_window: expected an int"):
        call(sliding_window=2.0)
    with pytest.raises(TypeError, match="scale: expected a python number"):
        call(scale=torch.tensor(0.1))
    with pytest.raises(TypeError, match="operand_dtype: expected one of"):
        call(operand_dtype=torch.int8)


def test_operand_rounding():
    kwargs, _ = make_inputs("bf16", "plain", "token", HEADS["gqa"], 16, 2, seed=15)
    exact = paged_decode(**kwargs)
    assert torch.equal(paged_decode(**kwargs, operand_dtype=torch.float64), exact)
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 5e-2)):
        rounded = paged_decode(**kwargs, operand_dtype=dtype)
        assert rounded.dtype == torch.float64 and not torch.equal(rounded, exact)
        torch.testing.assert_close(rounded, exact, rtol=tol, atol=tol)
