"""bench.paged_read reads exactly the window's blocks of each (sequence, kv head): its per-program sums
equal the same words summed from the inputs on the host, for every launch config it offers; inputs it
cannot read within their buffers are refused by name."""

import dataclasses

import pytest
import torch

from bench import paged_read
from cases.decode import DecodeCase, build
from verify.device import seed_of


def _fold(words: torch.Tensor) -> int:
    w = words.reshape(-1).to(torch.int32)
    return int(((w ^ (w >> 12) ^ (w >> 24)) & 0xFFF).sum())


def _expected(inputs, pages: int, parts: int) -> torch.Tensor:
    """The per-program sums, from the cases' tensors on the host."""
    case = inputs.case
    k = inputs.key_cache.cpu().view(torch.int32)
    v = inputs.value_cache.cpu().view(torch.int32)
    ks, vs = inputs.k_scale.cpu().view(torch.int32), inputs.v_scale.cpu().view(torch.int32)
    tables = inputs.block_tables.cpu()
    sums = torch.zeros(len(case.lens), case.hkv, parts, dtype=torch.int32)
    for i, n in enumerate(case.lens):
        lo = max(n - case.q + 1 - case.window, 0) if case.window > 0 else 0
        end = -(-n // case.block)
        for h in range(case.hkv):
            for p in range(parts):
                first = lo // case.block + p * pages
                total = 0
                for page in range(first, min(first + pages, end)):
                    b = int(tables[i, page])
                    total += _fold(k[b, h]) + _fold(v[b, h])
                    if case.scales == "token":
                        total += _fold(ks[b, h]) + _fold(vs[b, h])
                sums[i, h, p] = total
    return sums


@pytest.mark.parametrize("cache, scales, window", [("e4m3fn", "token", 40), ("bf16", "tensor", 0)])
def test_each_config_sums_the_windows_blocks(cache, scales, window, device):
    """Two sequences of 70 and 24 keys, MTP 2, two kv heads: the window (40 keys, or the whole
    sequence) decides the first block, the length the last; the table's padding ids past it and
    the blocks before the window are never read."""
    case = DecodeCase(cache=cache, scales=scales, block=16, hq=4, hkv=2, d=64, window=window, lens=(70, 24), q=2,
                      layout="shuffled", path="onepass")
    inputs = build(case, device, seed_of(case.id))
    tried = paged_read.configs(inputs)
    assert sorted({pages for pages, _ in tried}) == [1, 2, 4, 8, 16] and len(tried) > 5
    for pages, warps in tried:
        sums = paged_read.launch(inputs, pages, warps)
        assert torch.equal(sums.cpu(), _expected(inputs, pages, sums.shape[2])), (pages, warps)


def test_plain_caches_are_refused_by_name(device):
    case = DecodeCase(cache="e4m3fn", scales="token", block=16, hq=4, hkv=2, d=64, window=0, lens=(20,), q=1,
                      layout="plain", path="onepass")
    inputs = build(case, device, seed_of(case.id))
    with pytest.raises(ValueError, match="key_cache: expected a shuffled cache"):
        paged_read.launch(inputs, 1, 4)


def test_inputs_it_would_read_past_are_refused_by_name(device):
    """A negative length, a length past max_seq_len (the grid would miss its keys), a used block id past
    the caches, a step that is not a power of two, and given sums of another shape: each refused,
    naming its argument; an id past a sequence's last block is never read."""
    case = DecodeCase(cache="e4m3fn", scales="token", block=16, hq=4, hkv=2, d=64, window=0, lens=(70, 24), q=1,
                      layout="shuffled", path="onepass")
    inputs = build(case, device, seed_of(case.id))
    sums = paged_read.launch(inputs, 2, 1)
    negative = inputs.seq_lens.clone()
    negative[1] = -1
    with pytest.raises(ValueError, match=r"seq_lens: expected lengths >= 0; seq_lens\[1\] = -1"):
        paged_read.launch(dataclasses.replace(inputs, seq_lens=negative), 2, 1)
    with pytest.raises(ValueError, match=r"max_seq_len: expected a bound >= every seq_lens entry, got 69 below"):
        paged_read.launch(dataclasses.replace(inputs, max_seq_len=69), 2, 1)
    tables = inputs.block_tables.clone()
    tables[1, 1] = inputs.key_cache.shape[0]
    with pytest.raises(ValueError, match=r"block_tables: expected block ids in \[0, \d+\) in the columns"):
        paged_read.launch(dataclasses.replace(inputs, block_tables=tables), 2, 1)
    tables = inputs.block_tables.clone()
    tables[1, 2] = -1  # past sequence 1's two blocks: never read
    paged_read.launch(dataclasses.replace(inputs, block_tables=tables), 2, 1)
    with pytest.raises(ValueError, match="pages: expected a power of two, got 3"):
        paged_read.launch(inputs, 3, 1)
    with pytest.raises(ValueError, match="sums: expected a contiguous int32 tensor of shape"):
        paged_read.launch(inputs, 1, 1, sums)
    assert paged_read.launch(inputs, 2, 1, sums) is sums
