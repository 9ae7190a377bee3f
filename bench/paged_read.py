"""A paged decode's window read and nothing else: what any kernel walking the same cache must spend.

A program of `_read` takes PAGES cache blocks of one (sequence, kv head) in the order a paged
walk has to: the sequence's length first (it places the window: keys [n - Q + 1 - window, n),
from 0 without a window), then the window's block ids from the table, then every byte of K and V
in those blocks and their per-token scales. It folds each 32-bit word so that all its bits count,
and sums the words into one number a program: no load can be dropped, and nothing else is
computed (no scores, no softmax, no fold of partitions). Blocks are read whole, so up to one
block a window edge more than the window's keys.

`configs` gives the launches tried (blocks a program, warps); `bench.decode --floor` times them
all and keeps the fastest: a bound on one launch of the shape's inputs, for our kernels and for
anyone's. The caches must be in the shuffled layout (DESIGN.md), where each (block, kv head)
holds its block_size x D elements of K, and of V, contiguously.
"""

import torch
import triton
import triton.language as tl

from kernels.paged_decode import validate

MOST_WORDS = 16384  # the most 32-bit words of K (and as many of V) one program takes at once


@triton.jit
def _fold_word(w):
    """12 bits that depend on every bit of the 32-bit word w (so the whole word must be loaded)."""
    return (w ^ (w >> 12) ^ (w >> 24)) & 0xFFF


@triton.jit
def _read(sums_ptr, k_ptr, v_ptr, ks_ptr, vs_ptr, bt_ptr, lens_ptr, window, q_rows, s_bt,
          k_blk, k_head, v_blk, v_head, ks_blk, ks_head, ks_slot, vs_blk, vs_head, vs_slot,
          SLAB: tl.constexpr, BLOCK_SIZE: tl.constexpr, PAGES: tl.constexpr, SCALES: tl.constexpr):
    """sums[seq, kvh, part] = the folded words of K and V (and the per-token scales) in the
    program's PAGES blocks of the window; SLAB: 32-bit words of one (block, kv head) of a cache."""
    seq = tl.program_id(0)
    kvh = tl.program_id(1)
    part = tl.program_id(2)
    n = tl.load(lens_ptr + seq)
    lo = n * 0
    if window > 0:
        lo = tl.maximum(n - q_rows + 1 - window, 0)
    pages = lo // BLOCK_SIZE + part * PAGES + tl.arange(0, PAGES)
    ok = pages < tl.cdiv(n, BLOCK_SIZE)
    ids = tl.load(bt_ptr + seq.to(tl.int64) * s_bt + pages, mask=ok, other=0).to(tl.int64)
    words = tl.arange(0, SLAB)
    k = tl.load(k_ptr + ids[:, None] * k_blk + kvh * k_head + words[None, :], mask=ok[:, None], other=0)
    v = tl.load(v_ptr + ids[:, None] * v_blk + kvh * v_head + words[None, :], mask=ok[:, None], other=0)
    total = tl.sum(tl.sum(_fold_word(k) + _fold_word(v), axis=1), axis=0)
    if SCALES:
        slots = tl.arange(0, BLOCK_SIZE)
        ks = tl.load(ks_ptr + ids[:, None] * ks_blk + kvh * ks_head + slots[None, :] * ks_slot, mask=ok[:, None],
                     other=0)
        vs = tl.load(vs_ptr + ids[:, None] * vs_blk + kvh * vs_head + slots[None, :] * vs_slot, mask=ok[:, None],
                     other=0)
        total += tl.sum(tl.sum(_fold_word(ks) + _fold_word(vs), axis=1), axis=0)
    tl.store(sums_ptr + (seq * tl.num_programs(1) + kvh) * tl.num_programs(2) + part, total)


def _words(cache: torch.Tensor, name: str) -> torch.Tensor:
    """The cache as 32-bit words, its (block, kv head) slabs checked contiguous."""
    if cache.dim() != 5 or not cache[0, 0].is_contiguous():
        raise ValueError(f"{name}: expected a shuffled cache [num_blocks, Hkv, ...] with each (block, kv head) "
                         f"contiguous, got shape {tuple(cache.shape)}, strides {cache.stride()}")
    return cache.view(torch.int32)


def slab_words(inputs) -> int:
    """32-bit words of one (block, kv head) of K (as many of V)."""
    return inputs.key_cache[0, 0].numel() * inputs.key_cache.element_size() // 4


def configs(inputs) -> list:
    """(blocks a program, warps) tried for `inputs`: 1 to 16 blocks, each program at most MOST_WORDS
    words of K, on 1, 4 or 8 warps where a lane then holds 4 to 128 words of each cache."""
    slab = slab_words(inputs)
    return [(pages, warps) for pages in (1, 2, 4, 8, 16) for warps in (1, 4, 8)
            if pages * slab <= MOST_WORDS and 4 <= pages * slab // (32 * warps) <= 128]


def launch(inputs, pages: int, warps: int, sums: torch.Tensor | None = None) -> torch.Tensor:
    """One read of `inputs` (cases.decode.DecodeInputs) with `pages` blocks a program on `warps` warps;
    the per-program sums [seqs, Hkv, programs a (sequence, kv head)]. Without `sums` the call makes
    them and first checks the lengths and the block ids it reads as the decode entry does
    (kernels.paged_decode.validate, a sync); given `sums` (the timed, captured calls) it checks only
    their shape, dtype and layout."""
    case = inputs.case
    if pages < 1 or pages & (pages - 1):
        raise ValueError(f"pages: expected a power of two, got {pages}")
    k, v = _words(inputs.key_cache, "key_cache"), _words(inputs.value_cache, "value_cache")
    window_keys = min(inputs.max_seq_len, case.window + case.q - 1) if case.window > 0 else inputs.max_seq_len
    parts = triton.cdiv(triton.cdiv(window_keys, case.block) + 1, pages)
    grid = (inputs.seq_lens.shape[0], case.hkv, parts)
    if sums is None:
        validate.check_tables(inputs.block_tables, inputs.seq_lens, num_blocks=inputs.key_cache.shape[0],
                              block_size=case.block, max_seq_len=inputs.max_seq_len, window=case.window,
                              num_queries=case.q)
        sums = torch.empty(grid, dtype=torch.int32, device=k.device)
    elif tuple(sums.shape) != grid or sums.dtype != torch.int32 or not sums.is_contiguous():
        raise ValueError(f"sums: expected a contiguous int32 tensor of shape {grid}, got {sums.dtype} "
                         f"{tuple(sums.shape)}")
    scales = case.scales == "token"
    ks = inputs.k_scale.view(torch.int32)
    vs = inputs.v_scale.view(torch.int32)
    scale_strides = (*ks.stride(), *vs.stride()) if scales else (0,) * 6
    _read[grid](sums, k, v, ks, vs, inputs.block_tables, inputs.seq_lens, case.window, case.q,
                inputs.block_tables.stride(0), k.stride(0), k.stride(1), v.stride(0), v.stride(1), *scale_strides,
                SLAB=slab_words(inputs), BLOCK_SIZE=case.block, PAGES=pages, SCALES=scales, num_warps=warps)
    return sums
