"""The split-K reduce kernel: merge per-partition softmax states.

One program per (sequence, kv head, tile of at most M_PAD query rows) folds the n_part
partitions of its rows:

    m   = max_j m_j                       over partitions with l_j > 0
    l   = sum_j exp(m_j - m) * l_j
    out = sum_j exp(m_j - m) * acc_j / l  (0 where no partition saw a key)

Grid axis 2 cuts the head's dims into D_BLOCK-wide slices, so a few sequences
still give the device programs enough. acc rows are D_REAL wide in the
workspace; D is that rounded up to a power of two. m_j is in log2 units (the
partition kernel scores with exp2). A partition with l_j == 0 saw no key; its
acc was never written, so the acc load is masked by l_j > 0 (stale or NaN
scratch is never read, nor memory that nothing wrote) and its m_j is dropped.
The loop takes UNROLL partitions a step as one [UNROLL, M_PAD, D_BLOCK] block:
their loads depend on nothing loaded in an earlier step, so they are in flight
together (a partition a step waited for memory once per partition). n_part is
a runtime argument, so a changing partition count reuses one compiled kernel.
"""

import triton
import triton.language as tl


@triton.jit
def decode_reduce_kernel(
    out_ptr, m_ws_ptr, l_ws_ptr, acc_ws_ptr, n_part,
    s_oi, s_op, s_oh,
    ws_seq, ws_head, ws_part,
    G: tl.constexpr, Q: tl.constexpr, M_PAD: tl.constexpr, ROW_TILES: tl.constexpr, D: tl.constexpr,
    D_REAL: tl.constexpr, D_BLOCK: tl.constexpr, UNROLL: tl.constexpr,
):
    seq = tl.program_id(0)
    kvh = tl.program_id(1) // ROW_TILES
    rows = (tl.program_id(1) % ROW_TILES) * M_PAD + tl.arange(0, M_PAD)
    row_ok = rows < G * Q
    dims = tl.program_id(2) * D_BLOCK + tl.arange(0, D_BLOCK)
    cell_ok = row_ok[:, None]  # the rows and dims that exist
    if D_REAL != D:
        cell_ok = cell_ok & (dims < D_REAL)[None, :]
    ws_base = seq.to(tl.int64) * ws_seq + kvh * ws_head

    m_run = tl.full([M_PAD], float("-inf"), tl.float32)
    l_run = tl.zeros([M_PAD], tl.float32)
    acc = tl.zeros([M_PAD, D_BLOCK], tl.float32)
    for j0 in range(0, n_part, UNROLL):
        parts = j0 + tl.arange(0, UNROLL)
        ws = ws_base + parts[:, None] * ws_part + rows[None, :]  # [UNROLL, M_PAD]
        in_part = (parts < n_part)[:, None] & row_ok[None, :]
        l_j = tl.load(l_ws_ptr + ws, mask=in_part, other=0.0)
        m_j = tl.load(m_ws_ptr + ws, mask=in_part, other=float("-inf"))
        seen = l_j > 0
        acc_j = tl.load(acc_ws_ptr + ws[:, :, None] * D_REAL + dims[None, None, :],
                        mask=(in_part & seen)[:, :, None] & cell_ok[None, :, :], other=0.0)
        m_j = tl.where(seen, m_j, float("-inf"))
        m_new = tl.maximum(m_run, tl.max(m_j, axis=0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_run - m_safe)
        beta = tl.where(seen, tl.exp2(m_j - m_safe[None, :]), 0.0)
        l_run = l_run * alpha + tl.sum(beta * tl.where(seen, l_j, 0.0), axis=0)
        acc = acc * alpha[:, None] + tl.sum(beta[:, :, None] * acc_j, axis=0)
        m_run = m_new

    out = tl.where(l_run[:, None] > 0, acc / tl.where(l_run > 0, l_run, 1.0)[:, None], 0.0)
    tok = rows // G
    head = kvh * G + rows % G
    o_off = seq.to(tl.int64) * s_oi + tok[:, None] * s_op + head[:, None] * s_oh + dims[None, :]
    tl.store(out_ptr + o_off, out.to(out_ptr.dtype.element_ty), mask=cell_ok)
