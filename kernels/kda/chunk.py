"""K2 of the KDA forward: the chunk walk, the state in fp32 registers as a [K, BV] tile.

Per chunk (tiles from K1, see kernels.kda.prepare), with S the state entering it:

    U  = u - w S                       [C, BV]
    o  = qg S + Aqk U                  [C, BV]   (scale folded into qg and Aqk)
    S <- diag(decay) S + kg^T U        [K, BV]

The map S -> S' is affine, S' = (diag(decay) - kg^T w) S + kg^T u, so a run of
chunks (a segment) is S_out = M S_in + b with M [K, K] and b [K, V].

Kernels (grid axis 1 = head; the column block of BV on axis 2, or for the walk and pass A within axis 0):
  kda_walk_kernel       unsegmented: one program per sequence walks all its chunks
                        from the initial state; segmented (pass C): one program per
                        segment walks its chunks from the incoming state of pass B.
                        Writes o, and the final state on a sequence's last unit.
  kda_transition_kernel pass A, per segment: walks the augmented [K, K + V] state,
                        columns < K seeded with the identity and without u (-> M),
                        columns >= K seeded with zeros (-> b); stores [M | b].
  kda_scan_kernel       pass B, per sequence: S_in[s] for each segment s in order,
                        S_in[s + 1] = M_s S_in[s] + b_s from the initial state.

Precision: the state stays fp32; walk products take DOT operands (bf16 on a
GPU) with fp32 accumulation; pass B's M S_in keeps about fp32 (PRECISION:
tf32x3 on NVIDIA, ieee on AMD; kernels.kda.tuning).

Unit metadata [NU, 4] int32 (sequence, first chunk, chunks, is last unit of its
sequence); chunk metadata [NC, 4] int32 (sequence, batch row, first token, length).
Dense states carry (n, h, k, v) strides; the paged cache is [slots, H, V, K] with
K contiguous and any other strides.
"""

import triton
import triton.language as tl

INIT_ZERO = 0
INIT_DENSE = 1
INIT_PAGED = 2


@triton.jit
def _slot(idx_ptr, n, n_slots):
    """Sequence n's state slot, clamped to [0, n_slots): a bad index (the host checks them) reads
    or writes a wrong slot of the cache, never memory outside it."""
    return tl.minimum(tl.maximum(tl.load(idx_ptr + n).to(tl.int64), 0), n_slots - 1)


@triton.jit
def _load_state(init_ptr, si_n, si_h, si_k, si_v, cache_ptr, cs0, cs1, cs2, idx_ptr, has_ptr, n_slots,
                n, h, v0, K: tl.constexpr, BV: tl.constexpr, INIT: tl.constexpr):
    """The [K, BV] block of sequence n's initial state (zeros when it has none)."""
    rk = tl.arange(0, K)
    cv = v0 + tl.arange(0, BV)
    if INIT == 1:
        S = tl.load(init_ptr + n.to(tl.int64) * si_n + h * si_h + rk[:, None] * si_k + cv[None, :] * si_v)
    elif INIT == 2:
        slot = _slot(idx_ptr, n, n_slots)
        S = tl.load(cache_ptr + slot * cs0 + h * cs1 + cv[None, :] * cs2 + rk[:, None])
        S = tl.where(tl.load(has_ptr + n) != 0, S, 0.0)
    else:
        S = tl.zeros([K, BV], dtype=tl.float32)
    return S.to(tl.float32)


@triton.jit
def _chunk_tiles(tiles_ptr, u_ptr, aqk_ptr, decay_ptr, cid, h, H, u_col,
                 K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BV: tl.constexpr):
    """K1's tiles of chunk `cid`, head h: qg, kg, w [C, K], Aqk, decay, and u [C, BV]
    at columns u_col + [0, BV) (zero where negative)."""
    rc = tl.arange(0, C)
    rk = tl.arange(0, K)
    wsc = cid.to(tl.int64) * H + h
    tile = tiles_ptr + wsc * (3 * C * K) + rc[:, None] * K + rk[None, :]
    qg = tl.load(tile)
    kg = tl.load(tile + C * K)
    w = tl.load(tile + 2 * C * K)
    ucols = u_col + tl.arange(0, BV)
    u = tl.load(u_ptr + wsc * (C * V) + rc[:, None] * V + ucols[None, :], mask=(ucols >= 0)[None, :],
                other=0.0).to(tl.float32)
    aqk = tl.load(aqk_ptr + wsc * (C * C) + rc[:, None] * C + rc[None, :])
    decay = tl.load(decay_ptr + wsc * K + rk)
    return qg, kg, w, u, aqk, decay


@triton.jit
def kda_walk_kernel(
    o_ptr, so_b, so_t, so_h, chunk_meta_ptr, unit_meta_ptr,
    tiles_ptr, u_ptr, aqk_ptr, decay_ptr, sin_ptr,
    init_ptr, si_n, si_h, si_k, si_v, final_ptr, sf_n, sf_h, sf_k, sf_v,
    cache_ptr, cs0, cs1, cs2, idx_ptr, has_ptr, n_slots, H,
    K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BV: tl.constexpr,
    SEGMENTED: tl.constexpr, INIT: tl.constexpr, DENSE_OUT: tl.constexpr, PAGED: tl.constexpr,
    DOT: tl.constexpr,
):
    # program_id(0) = unit * (V // BV) + column block: a unit's column blocks are neighbours in launch
    # order, so they run together and the second reads the chunk's tiles from the L2.
    unit = (tl.program_id(0) // (V // BV)).to(tl.int64)
    h = tl.program_id(1)
    v0 = (tl.program_id(0) % (V // BV)) * BV
    n = tl.load(unit_meta_ptr + unit * 4)
    c0 = tl.load(unit_meta_ptr + unit * 4 + 1)
    nch = tl.load(unit_meta_ptr + unit * 4 + 2)
    last = tl.load(unit_meta_ptr + unit * 4 + 3)
    rk = tl.arange(0, K)
    rc = tl.arange(0, C)
    cv = v0 + tl.arange(0, BV)

    if SEGMENTED:
        S = tl.load(sin_ptr + ((unit * H + h) * K + rk[:, None]) * V + cv[None, :])
    else:
        S = _load_state(init_ptr, si_n, si_h, si_k, si_v, cache_ptr, cs0, cs1, cs2, idx_ptr, has_ptr, n_slots,
                        n, h, v0, K, BV, INIT)

    for i in range(nch):
        cid = c0 + i
        qg, kg, w, u, aqk, decay = _chunk_tiles(tiles_ptr, u_ptr, aqk_ptr, decay_ptr, cid, h, H, v0,
                                                K, V, C, BV)
        sd = S.to(DOT)
        U = u - tl.dot(w.to(DOT), sd)
        ud = U.to(DOT)
        o = tl.dot(qg.to(DOT), sd) + tl.dot(aqk.to(DOT), ud)
        S = S * decay[:, None] + tl.dot(tl.trans(kg.to(DOT)), ud)

        meta = chunk_meta_ptr + cid.to(tl.int64) * 4
        bidx = tl.load(meta + 1).to(tl.int64)
        tok = tl.load(meta + 2).to(tl.int64) + rc
        length = tl.load(meta + 3)
        tl.store(o_ptr + bidx * so_b + tok[:, None] * so_t + h * so_h + cv[None, :],
                 o.to(o_ptr.dtype.element_ty), mask=(rc < length)[:, None])

    if last != 0:
        nn = n.to(tl.int64)
        if DENSE_OUT:
            tl.store(final_ptr + nn * sf_n + h * sf_h + rk[:, None] * sf_k + cv[None, :] * sf_v, S)
        if PAGED:
            slot = _slot(idx_ptr, nn, n_slots)
            tl.store(cache_ptr + slot * cs0 + h * cs1 + rk[:, None] + cv[None, :] * cs2, S)


@triton.jit
def kda_transition_kernel(
    unit_meta_ptr, tiles_ptr, u_ptr, aqk_ptr, decay_ptr, ms_ptr, H,
    K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BV: tl.constexpr, DOT: tl.constexpr,
):
    # program_id(0) = segment * ((K + V) // BV) + column block, neighbours in launch order as in the walk.
    seg = (tl.program_id(0) // ((K + V) // BV)).to(tl.int64)
    h = tl.program_id(1)
    col0 = (tl.program_id(0) % ((K + V) // BV)) * BV
    c0 = tl.load(unit_meta_ptr + seg * 4 + 1)
    nch = tl.load(unit_meta_ptr + seg * 4 + 2)
    rk = tl.arange(0, K)
    cb = tl.arange(0, BV)

    # Identity seed on the columns of M, zero seed on the columns of b.
    S = tl.where(rk[:, None] == col0 + cb[None, :], 1.0, 0.0)
    for i in range(nch):
        qg, kg, w, u, aqk, decay = _chunk_tiles(tiles_ptr, u_ptr, aqk_ptr, decay_ptr, c0 + i, h, H,
                                                col0 - K, K, V, C, BV)
        U = u - tl.dot(w.to(DOT), S.to(DOT))
        S = S * decay[:, None] + tl.dot(tl.trans(kg.to(DOT)), U.to(DOT))
    tl.store(ms_ptr + ((seg * H + h) * K + rk[:, None]) * (K + V) + col0 + cb[None, :], S)


@triton.jit
def kda_scan_kernel(
    seg_off_ptr, ms_ptr, sin_ptr,
    init_ptr, si_n, si_h, si_k, si_v, cache_ptr, cs0, cs1, cs2, idx_ptr, has_ptr, n_slots, H,
    K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr, INIT: tl.constexpr, PRECISION: tl.constexpr,
):
    n = tl.program_id(0)
    h = tl.program_id(1)
    v0 = tl.program_id(2) * BV
    rk = tl.arange(0, K)
    cv = v0 + tl.arange(0, BV)
    s0 = tl.load(seg_off_ptr + n)
    s1 = tl.load(seg_off_ptr + n + 1)
    S = _load_state(init_ptr, si_n, si_h, si_k, si_v, cache_ptr, cs0, cs1, cs2, idx_ptr, has_ptr, n_slots,
                    n, h, v0, K, BV, INIT)
    for i in range(s1 - s0):
        row = ((s0.to(tl.int64) + i) * H + h) * K + rk[:, None]
        tl.store(sin_ptr + row * V + cv[None, :], S)
        M = tl.load(ms_ptr + row * (K + V) + rk[None, :])
        b = tl.load(ms_ptr + row * (K + V) + K + cv[None, :])
        S = tl.dot(M, S, input_precision=PRECISION) + b
