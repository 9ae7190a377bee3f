"""reference.layouts: packing, the element-offset formulas, and gathering through block tables."""

import pytest
import torch

from reference import layouts

DTYPES = (torch.uint8, torch.bfloat16)


def random_logical(shape, dtype, seed=0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.uint8:
        return torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8)
    return (torch.randn(shape, generator=gen) * 3).to(dtype)


def test_vector_width():
    assert layouts.vector_width(torch.uint8) == 16
    assert layouts.vector_width(torch.float8_e4m3fn) == 16
    assert layouts.vector_width(torch.float8_e4m3fnuz) == 16
    assert layouts.vector_width(torch.bfloat16) == 8
    assert layouts.vector_width(torch.float16) == 8


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", layouts.LAYOUTS)
def test_pack_unpack_round_trip(layout, dtype):
    nb, bs, hkv, d = 3, 32, 2, 32
    x = layouts.vector_width(dtype)
    logical = random_logical((nb, bs, hkv, d), dtype)
    k, v = layouts.pack_k(logical, layout), layouts.pack_v(logical, layout)
    assert k.is_contiguous() and v.is_contiguous()
    assert k.data_ptr() != logical.data_ptr() and v.data_ptr() != logical.data_ptr()
    if layout == "shuffled":
        assert k.shape == (nb, hkv, d // x, bs, x)
        assert v.shape == (nb, hkv, bs // x, d, x)
    else:
        assert k.shape == v.shape == logical.shape
        assert torch.equal(k, logical) and torch.equal(v, logical)
    assert torch.equal(layouts.unpack_k(k, layout), logical)
    assert torch.equal(layouts.unpack_v(v, layout), logical)


@pytest.mark.parametrize("dtype", DTYPES)
def test_shuffled_offsets_match_storage(dtype):
    nb, bs, hkv, d = 3, 32, 2, 48
    x = layouts.vector_width(dtype)
    logical = random_logical((nb, bs, hkv, d), dtype, seed=1)
    k, v = layouts.pack_k(logical, "shuffled"), layouts.pack_v(logical, "shuffled")
    b, s, h, dd = torch.meshgrid(
        torch.arange(nb), torch.arange(bs), torch.arange(hkv), torch.arange(d), indexing="ij"
    )
    k_off = b * k.stride(0) + h * k.stride(1) + (dd // x) * bs * x + s * x + dd % x
    v_off = b * v.stride(0) + h * v.stride(1) + (s // x) * d * x + dd * x + s % x
    assert torch.equal(k.reshape(-1)[k_off], logical)
    assert torch.equal(v.reshape(-1)[v_off], logical)
    gen = torch.Generator().manual_seed(2)
    for _ in range(50):
        bi, si, hi, di = (int(torch.randint(0, n, (), generator=gen)) for n in (nb, bs, hkv, d))
        assert k.reshape(-1)[bi * k.stride(0) + hi * k.stride(1) + (di // x) * bs * x + si * x + di % x] == (
            logical[bi, si, hi, di]
        )
        assert v.reshape(-1)[bi * v.stride(0) + hi * v.stride(1) + (si // x) * d * x + di * x + si % x] == (
            logical[bi, si, hi, di]
        )


def test_layout_errors():
    logical = torch.zeros(2, 16, 1, 32, dtype=torch.uint8)
    with pytest.raises(ValueError, match="layout: expected one of 'shuffled', 'plain', got 'asm'"):
        layouts.pack_k(logical, "asm")
    with pytest.raises(ValueError, match="layout"):
        layouts.unpack_v(logical, "blocked")
    with pytest.raises(ValueError, match="shuffled V needs block_size % x == 0"):
        layouts.pack_v(torch.zeros(2, 8, 1, 32, dtype=torch.uint8), "shuffled")
    with pytest.raises(ValueError, match="shuffled K needs D % x == 0"):
        layouts.pack_k(torch.zeros(2, 16, 1, 24, dtype=torch.uint8), "shuffled")
    with pytest.raises(ValueError, match=r"cache: expected shuffled layout \[nb, Hkv, D//x, bs, x\] with x = 8"):
        layouts.unpack_k(torch.zeros(2, 1, 2, 16, 16, dtype=torch.bfloat16), "shuffled")
    with pytest.raises(ValueError, match="cache: expected plain layout"):
        layouts.unpack_k(torch.zeros(2, 1, 2, 16, 16, dtype=torch.uint8), "plain")
    with pytest.raises(ValueError, match="logical: expected a tensor"):
        layouts.pack_v(torch.zeros(2, 16, 32, dtype=torch.uint8), "plain")


def make_tables(lens, bs, num_blocks, seed):
    """Block tables over a shuffled set of blocks; columns past each sequence hold junk ids."""
    gen = torch.Generator().manual_seed(seed)
    need = [-(-n // bs) for n in lens]
    cols = max(need) + 1
    ids = torch.randperm(num_blocks, generator=gen)
    tables = torch.randint(-3, num_blocks + 5, (len(lens), cols), generator=gen)
    start = 0
    for i, n in enumerate(need):
        tables[i, :n] = ids[start : start + n]
        start += n
    return tables


def test_gather_tokens_and_sequences():
    nb, bs, hkv, d = 12, 16, 2, 8
    logical = torch.randn(nb, bs, hkv, d)
    lens = [0, 1, 15, 16, 17, 40]
    tables = make_tables(lens, bs, nb, seed=3)
    max_len = max(lens)
    gathered = layouts.gather_sequences(logical, tables, max_len)
    assert gathered.shape == (len(lens), max_len, hkv, d)
    for i, n in enumerate(lens):
        tokens = layouts.gather_tokens(logical, tables[i], n)
        assert tokens.shape == (n, hkv, d)
        for t in range(n):
            assert torch.equal(tokens[t], logical[tables[i, t // bs], t % bs])
        assert torch.equal(gathered[i, :n], tokens)


def test_gather_errors():
    logical = torch.zeros(4, 16, 1, 8)
    with pytest.raises(ValueError, match="n_tokens: expected 0..32"):
        layouts.gather_tokens(logical, torch.tensor([0, 1]), 33)
    with pytest.raises(ValueError, match=r"block_table_row: expected block ids in \[0, 4\)"):
        layouts.gather_tokens(logical, torch.tensor([0, 7]), 20)
    with pytest.raises(ValueError, match="block_table_row: expected a 1-d integer tensor"):
        layouts.gather_tokens(logical, torch.tensor([0.0, 1.0]), 3)
    with pytest.raises(ValueError, match="max_len: expected 0..32"):
        layouts.gather_sequences(logical, torch.zeros(3, 2, dtype=torch.int32), 40)
