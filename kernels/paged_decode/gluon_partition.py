"""The decode partition kernel in Gluon (NVIDIA, sm80 and later: cp.async and mma.sync).

It computes what kernels.paged_decode.partition's kernel does, with the same
arguments (but the cache strides, below) and grid, the same online softmax in
fp32 and exp2, the same windows, tails, clamps and fp8 decoding (partition.py's
docstring is the contract):

    s_jr  = scale * k_scale_j * (k_j . q_r)      visible keys only
    m_r   = max_j s_jr,   l_r = sum_j exp(s_jr - m_r)
    acc_r = sum_j exp(s_jr - m_r) * v_scale_j * v_j

but it places the data itself. Keys are the M of the MMAs and query rows
their N (scores [keys, rows] = K q^T, acc [dims, rows] += V^T P^T; mma.sync on
warps stacked along M). A program walks its partition in tiles of BLOCK_N keys.
Each tile's K, V and per-token scales are copied by cp.async straight into a
ring of STAGES shared-memory buffers, STAGES - 1 tiles ahead of the one being
multiplied; the cache block ids of a tile are loaded a step before its copies
are issued. Every copy moves runs of 16 bytes (RUN elements): the dims of a key
for K and for a plain V, the keys of one dim for a shuffled V (CHUNK keys of
one cache block). A tile lies in shared memory in rows of one run (K as
[D / RUN, BLOCK_N, RUN], a shuffled V as [chunks, DV, CHUNK], a plain V as
[chunks, CHUNK, DV]), so the eight lanes that read one MMA fragment column
read rows 16 bytes apart, in eight different banks, and each lane reads 8
bytes of codes at once (the operands' K order, permuted alike in both, does
not change the product). The query, scaled and rounded to the dot dtype once,
lies in shared memory and is read SCORE_DIMS dims at a time.

The caches' strides arrive in runs (the host divides them by RUN; the run's own
stride, 1, stays): the kernel multiplies them back, so the compiler sees every
run start 16 bytes aligned whatever stride Triton's argument specialization
could show (a bf16 shuffled cache steps 8 elements a slot). The host checks the
layout this needs (kernels.paged_decode.api: stride 1 along a run, the other
strides multiples of RUN, 16-byte aligned caches).

Copies are masked by whole keys or chunks (past the table's last block; dims
past a head size D_REAL, which read as zeros), never within a run; the one
tail tile that reaches past the sequence end zeroes the codes of V there
(unused slots may hold NaN), and its V scales.

A split (SPLIT) writes m, l and acc to the workspace as the Triton kernel
does, and the last program of a row tile to arrive folds the partitions
(`fold`: kernels.paged_decode.reduce's fold in Gluon's layouts, the same
loads, masks and elementwise order; or, STAGED_FOLD, `fold_staged`: the same
sums from partials that cp.async brings into shared memory, where the walk's
ring was, several groups of partitions in flight before the first wait).

V_KEYS_INNER: the value cache keeps 16 bytes of keys of one dim together
(shuffled), else the dims of one key (plain).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2

from kernels.paged_decode.partition import f16_shift, key_dims, pow2_into, to_dot
from kernels.paged_decode.reduce import last_to_arrive

SCORE_DIMS = 256  # the most head dims one score product takes (wider heads: a product a slice)

# cp.async of a tensor of pointers into shared memory: `async_load` from triton 3.9 on, before it
# `async_copy_global_to_shared` (the same operation).
_copy = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared


@gluon.constexpr_function
def copy_layout(shape, elem_bytes, num_warps):
    """A blocked layout for a 3-D copy whose last axis is the contiguous run: 16 bytes of it a lane,
    lanes along it, then along the middle axis and the first; warps along the first."""
    vec = min(16 // elem_bytes, shape[2])
    t2 = min(32, max(1, shape[2] // vec))
    t1 = min(32 // t2, shape[1])
    t0 = 32 // (t2 * t1)
    return gl.BlockedLayout([1, 1, vec], [t0, t1, t2], [num_warps, 1, 1], [2, 1, 0])


@gluon.constexpr_function
def plain_layout(shape, num_warps):
    """A blocked layout for a small 2-D tile (the query, the fold), the last axis inner."""
    t1 = min(32, shape[1])
    return gl.BlockedLayout([1, 1], [32 // t1, t1], [num_warps, 1], [1, 0])


@gluon.jit
def _issue(kbuf, vbuf, ksbuf, vsbuf, k_pages, v_pages, start, kvh, table_hi, k_ptr, v_ptr,
           k_scale_ptr, v_scale_ptr, k_blk, k_head, k_dhi, k_dlo, k_slo, v_blk, v_head, v_dlo, v_shi, v_slo,
           ks_blk, ks_head, ks_slot, vs_blk, vs_head, vs_slot, dim_lo, live,
           D: gl.constexpr, D_REAL: gl.constexpr, DV: gl.constexpr, BLOCK_SIZE: gl.constexpr,
           BLOCK_N: gl.constexpr, CHUNK: gl.constexpr, K_DX: gl.constexpr, V_SX: gl.constexpr,
           PER_TOKEN_SCALE: gl.constexpr, V_KEYS_INNER: gl.constexpr, KL: gl.constexpr, VL: gl.constexpr):
    """cp.async of the tile of keys [start, start + BLOCK_N) into one stage of the ring (nothing
    where `live` is false: past the partition's last tile)."""
    NC: gl.constexpr = BLOCK_N // CHUNK
    RUN: gl.constexpr = 16 // (k_ptr.dtype.element_ty.primitive_bitwidth // 8)
    # K [D // RUN, BLOCK_N, RUN]: a run of dims of one key (k_pages: each key's block id)
    kj = gl.arange(0, D // RUN, layout=gl.SliceLayout(1, gl.SliceLayout(2, KL))) * RUN
    kn = start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, gl.SliceLayout(2, KL)))
    ke = gl.arange(0, RUN, layout=gl.SliceLayout(0, gl.SliceLayout(1, KL)))
    key_ok = ((kn >= 0) & (kn < table_hi)) & live
    slot = kn % BLOCK_SIZE
    k_base = k_pages * k_blk + kvh * k_head + slot * k_slo
    k_off = (gl.expand_dims(gl.expand_dims(key_dims(kj, k_dhi, k_dlo, K_DX), 1), 2)
             + gl.expand_dims(gl.expand_dims(k_base, 0), 2) + gl.expand_dims(gl.expand_dims(ke * k_dlo, 0), 1))
    k_ok = gl.expand_dims(gl.expand_dims(kj < D_REAL, 1), 2) & gl.expand_dims(gl.expand_dims(key_ok, 0), 2)
    _copy(kbuf, k_ptr + k_off, mask=k_ok)
    if PER_TOKEN_SCALE:  # [BLOCK_N]
        _copy(ksbuf, k_scale_ptr + (k_pages * ks_blk + kvh * ks_head + slot * ks_slot), mask=key_ok)
        _copy(vsbuf, v_scale_ptr + (k_pages * vs_blk + kvh * vs_head + slot * vs_slot), mask=key_ok)
    if V_KEYS_INNER:
        # V [NC, DV, CHUNK]: CHUNK keys of one dim are one run (v_pages: each chunk's block id)
        vc = gl.arange(0, NC, layout=gl.SliceLayout(1, gl.SliceLayout(2, VL)))
        vd = dim_lo + gl.arange(0, DV, layout=gl.SliceLayout(0, gl.SliceLayout(2, VL)))
        vl = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, gl.SliceLayout(1, VL)))
        v_first = start + vc * CHUNK
        v_ok = ((v_first >= 0) & (v_first < table_hi)) & live
        v_slot = gl.multiple_of(v_first % BLOCK_SIZE, CHUNK)
        v_base = v_pages * v_blk + kvh * v_head + (v_slot // V_SX) * v_shi + (v_slot % V_SX) * v_slo
        v_off = (gl.expand_dims(gl.expand_dims(v_base, 1), 2) + gl.expand_dims(gl.expand_dims(vd * v_dlo, 0), 2)
                 + gl.expand_dims(gl.expand_dims(vl * v_slo, 0), 1))
        v_mask = gl.expand_dims(gl.expand_dims(v_ok, 1), 2) & gl.expand_dims(gl.expand_dims(vd < D_REAL, 0), 2)
    else:
        # V [NC, CHUNK, DV]: the dims of one key are one run
        vc = gl.arange(0, NC, layout=gl.SliceLayout(1, gl.SliceLayout(2, VL)))
        vl = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, gl.SliceLayout(2, VL)))
        vd = dim_lo + gl.arange(0, DV, layout=gl.SliceLayout(0, gl.SliceLayout(1, VL)))
        v_first = start + vc * CHUNK
        v_ok = ((v_first >= 0) & (v_first < table_hi)) & live
        v_slot = gl.multiple_of(v_first % BLOCK_SIZE, CHUNK)
        v_base = v_pages * v_blk + kvh * v_head + (v_slot // V_SX) * v_shi + (v_slot % V_SX) * v_slo
        v_off = (gl.expand_dims(gl.expand_dims(v_base, 1), 2) + gl.expand_dims(gl.expand_dims(vl * v_slo, 0), 2)
                 + gl.expand_dims(gl.expand_dims(vd * v_dlo, 0), 1))
        v_mask = gl.expand_dims(gl.expand_dims(v_ok, 1), 2) & gl.expand_dims(gl.expand_dims(vd < D_REAL, 0), 1)
    _copy(vbuf, v_ptr + v_off, mask=v_mask)


@gluon.jit
def _pages(start, seq, table_hi, num_blocks, bt_ptr, s_bti, BLOCK_SIZE: gl.constexpr, CHUNK: gl.constexpr,
           NC: gl.constexpr, layout: gl.constexpr):
    """The cache block ids of the NC chunks of the tile at `start` (in `layout`), clamped to
    [0, num_blocks); 0 for chunks past the table's last block."""
    first = start + gl.arange(0, NC, layout=layout) * CHUNK
    page = gl.load(bt_ptr + seq.to(gl.int64) * s_bti + first // BLOCK_SIZE, mask=(first >= 0) & (first < table_hi),
                   other=0)
    return gl.minimum(gl.maximum(page, 0), num_blocks - 1).to(gl.int64)


@gluon.jit
def _merge(m_run, l_run, acc, m_j, l_j, acc_j):
    """The running (m, l, acc) of a fold with one partition's (m_j, l_j, acc_j) merged in
    (kernels.paged_decode.reduce.fold_partitions' elementwise order); a partition whose rows saw no key
    (m_j = -inf, l_j = 0, acc_j = 0) leaves them as they are."""
    m_new = gl.maximum(m_run, m_j)
    m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = gl.exp2(m_run - m_safe)
    beta = gl.exp2(m_j - m_safe)
    return m_new, l_run * alpha + beta * l_j, acc * gl.expand_dims(alpha, 1) + gl.expand_dims(beta, 1) * acc_j


@gluon.jit
def _fold_out(out_ptr, o_rows, dims, cell_ok, l_run, acc):
    """A fold's output cells: acc / l for the rows that saw a key (l > 0), else 0, where cell_ok."""
    l_at = gl.expand_dims(l_run, 1)
    out = gl.where(l_at > 0, acc / gl.where(l_at > 0, l_at, 1.0), 0.0)
    gl.store(out_ptr + gl.expand_dims(o_rows, 1) + gl.expand_dims(dims, 0), out.to(out_ptr.dtype.element_ty),
             mask=cell_ok)


@gluon.jit
def fold(out_ptr, m_ws_ptr, l_ws_ptr, acc_ws_ptr, ws_tile, ws_part, n_part, part_base, part_size, kv_hi,
         row0, G: gl.constexpr, Q: gl.constexpr, KVH_G, s_oi, s_op, s_oh, seq,
         ROWS: gl.constexpr, D: gl.constexpr, D_REAL: gl.constexpr, DB: gl.constexpr, UNROLL: gl.constexpr,
         num_warps: gl.constexpr):
    """out of the tile's ROWS rows from row0 (kernels.paged_decode.reduce.fold_partitions: the same
    loads, masks and elementwise order); KVH_G: the tile's first query head (kv head x G)."""
    FL: gl.constexpr = plain_layout([ROWS, DB], num_warps)
    rows = row0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, FL))
    row_ok = rows < G * Q
    o_rows = seq.to(gl.int64) * s_oi + (rows // G) * s_op + (KVH_G + rows % G) * s_oh
    for c in gl.static_range(D // DB):
        dims = c * DB + gl.arange(0, DB, layout=gl.SliceLayout(0, FL))
        cell_ok = gl.expand_dims(row_ok, 1) & gl.expand_dims(dims < D_REAL, 0)
        m_run = gl.full([ROWS], float("-inf"), gl.float32, layout=gl.SliceLayout(1, FL))
        l_run = gl.zeros([ROWS], gl.float32, layout=gl.SliceLayout(1, FL))
        acc = gl.zeros([ROWS, DB], gl.float32, layout=FL)
        for j0 in range(0, n_part, UNROLL):
            for u in gl.static_range(UNROLL):
                j = j0 + u + rows * 0
                at = ws_tile + j * ws_part + rows
                in_part = row_ok & (j < n_part)
                wrote = in_part & (part_base + j * part_size < kv_hi)
                l_j = gl.load(l_ws_ptr + at, mask=in_part, other=0.0)
                m_j = gl.load(m_ws_ptr + at, mask=in_part, other=float("-inf"))
                acc_j = gl.load(acc_ws_ptr + gl.expand_dims(at, 1) * D_REAL + gl.expand_dims(dims, 0),
                                mask=gl.expand_dims(wrote, 1) & cell_ok, other=0.0)
                m_run, l_run, acc = _merge(m_run, l_run, acc, m_j, l_j, acc_j)
        _fold_out(out_ptr, o_rows, dims, cell_ok, l_run, acc)


@gluon.constexpr_function
def fold_ring(ring_bytes, rows, dims):
    """(PB, NB) of the staged fold: NB groups of PB partitions (powers of two, NB from 2 to
    FOLD_GROUPS) whose m, l and acc (`rows` rows, `dims` dims) fit in `ring_bytes` where they can,
    with the most partitions in flight, (NB - 1) * PB; one partition in two groups where none fit."""
    fits = ring_bytes // ((rows * dims + 2 * rows) * 4)
    best = (1, 2)
    group = 1
    while 2 * group <= fits:
        groups = min(FOLD_GROUPS, 1 << ((fits // group).bit_length() - 1))
        if (groups - 1) * group > (best[1] - 1) * best[0]:
            best = (group, groups)
        group *= 2
    return best


FOLD_GROUPS = 8  # the most groups of the fold's ring: one cp.async group each, up to 6 waited past


@gluon.constexpr_function
def fold_group(ring_bytes, rows, dims):
    """PB of fold_ring: partitions a group."""
    return fold_ring(ring_bytes, rows, dims)[0]


@gluon.constexpr_function
def fold_groups(ring_bytes, rows, dims):
    """NB of fold_ring: groups in the ring."""
    return fold_ring(ring_bytes, rows, dims)[1]


@gluon.jit
def _stage(acc_buf, m_buf, l_buf, m_ws_ptr, l_ws_ptr, acc_ws_ptr, ws_tile, ws_part, n_part, part_base, part_size,
           kv_hi, row0, j0, dim0, ROW_HI: gl.constexpr, ROWS: gl.constexpr, DB: gl.constexpr,
           D_REAL: gl.constexpr, PB: gl.constexpr, num_warps: gl.constexpr):
    """cp.async of partitions j0 .. j0 + PB - 1's m, l and acc dims [dim0, dim0 + DB) of the tile's
    ROWS rows from row0 into one slot of the fold's ring (partition-major: [PB * ROWS, DB] and
    [PB * ROWS]); zeros where a partition is past n_part or a row past ROW_HI, and for the acc of a
    partition that holds no key (never written)."""
    AL: gl.constexpr = gl.BlockedLayout([1, 4], [32 // min(32, DB // 4), min(32, DB // 4)], [num_warps, 1], [1, 0])
    pr = gl.arange(0, PB * ROWS, layout=gl.SliceLayout(1, AL))
    j = j0 + pr // ROWS
    r = row0 + pr % ROWS
    d = dim0 + gl.arange(0, DB, layout=gl.SliceLayout(0, AL))
    wrote = (j < n_part) & (part_base + j * part_size < kv_hi) & (r < ROW_HI)
    _copy(acc_buf, acc_ws_ptr + gl.expand_dims((ws_tile + j * ws_part + r) * D_REAL, 1) + gl.expand_dims(d, 0),
          mask=gl.expand_dims(wrote, 1) & gl.expand_dims(d < D_REAL, 0))
    ML: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    pm = gl.arange(0, PB * ROWS, layout=ML)
    jm = j0 + pm // ROWS
    rm = row0 + pm % ROWS
    at_m = ws_tile + jm * ws_part + rm
    in_part = (jm < n_part) & (rm < ROW_HI)
    _copy(m_buf, m_ws_ptr + at_m, mask=in_part)
    _copy(l_buf, l_ws_ptr + at_m, mask=in_part)


@gluon.jit
def fold_staged(out_ptr, m_ws_ptr, l_ws_ptr, acc_ws_ptr, ws_tile, ws_part, n_part, part_base, part_size, kv_hi,
                row0, G: gl.constexpr, Q: gl.constexpr, KVH_G, s_oi, s_op, s_oh, seq,
                ROWS: gl.constexpr, D: gl.constexpr, D_REAL: gl.constexpr, DB: gl.constexpr,
                RING_BYTES: gl.constexpr, num_warps: gl.constexpr):
    """out of the tile's ROWS rows from row0 (kernels.paged_decode.reduce.fold_partitions: the same
    masks and elementwise order, so the same sums); KVH_G: the tile's first query head (kv head x G).

    The partials come through shared memory: groups of PB partitions (m, l and DB acc dims each)
    copied by cp.async into a ring of NB slots, NB - 1 groups ahead of the one being folded, where
    the walk's ring of RING_BYTES was (its copies are done by now), so a fold of up to (NB - 1) * PB
    partitions waits for its loads once."""
    PB: gl.constexpr = fold_group(RING_BYTES, ROWS, DB)
    NB: gl.constexpr = fold_groups(RING_BYTES, ROWS, DB)
    FL: gl.constexpr = plain_layout([ROWS, DB], num_warps)
    ROWL: gl.constexpr = gl.SliceLayout(1, FL)
    acc_bufs = gl.allocate_shared_memory(gl.float32, [NB, PB * ROWS, DB], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    m_bufs = gl.allocate_shared_memory(gl.float32, [NB, PB * ROWS], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    l_bufs = gl.allocate_shared_memory(gl.float32, [NB, PB * ROWS], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    rows = row0 + gl.arange(0, ROWS, layout=ROWL)
    row_ok = rows < G * Q
    o_rows = seq.to(gl.int64) * s_oi + (rows // G) * s_op + (KVH_G + rows % G) * s_oh
    stage_args = (m_ws_ptr, l_ws_ptr, acc_ws_ptr, ws_tile, ws_part, n_part, part_base, part_size, kv_hi, row0)
    for c in gl.static_range(D // DB):
        dims = c * DB + gl.arange(0, DB, layout=gl.SliceLayout(0, FL))
        cell_ok = gl.expand_dims(row_ok, 1) & gl.expand_dims(dims < D_REAL, 0)
        for g in gl.static_range(NB - 1):
            if g * PB < n_part:
                _stage(acc_bufs.index(g), m_bufs.index(g), l_bufs.index(g), *stage_args, g * PB, c * DB, G * Q, ROWS,
                       DB, D_REAL, PB, num_warps)
            async_copy.commit_group()  # empty past the last partition
        m_run = gl.full([ROWS], float("-inf"), gl.float32, layout=ROWL)
        l_run = gl.zeros([ROWS], gl.float32, layout=ROWL)
        acc = gl.zeros([ROWS, DB], gl.float32, layout=FL)
        for g in range(gl.cdiv(n_part, PB)):
            async_copy.wait_group(NB - 2)  # group g is in shared memory
            if (g + NB - 1) * PB < n_part:
                nxt = (g + NB - 1) % NB
                _stage(acc_bufs.index(nxt), m_bufs.index(nxt), l_bufs.index(nxt), *stage_args, (g + NB - 1) * PB,
                       c * DB, G * Q, ROWS, DB, D_REAL, PB, num_warps)
            async_copy.commit_group()
            slot = g % NB
            for u in gl.static_range(PB):
                in_part = row_ok & (g * PB + u < n_part)
                l_j = gl.where(in_part, l_bufs.index(slot).slice(u * ROWS, ROWS).load(ROWL), 0.0)
                m_j = gl.where(in_part, m_bufs.index(slot).slice(u * ROWS, ROWS).load(ROWL), float("-inf"))
                acc_j = acc_bufs.index(slot).slice(u * ROWS, ROWS).load(FL)
                m_run, l_run, acc = _merge(m_run, l_run, acc, m_j, l_j, acc_j)
        _fold_out(out_ptr, o_rows, dims, cell_ok, l_run, acc)


@gluon.jit
def decode_partition_gluon(
    out_ptr, q_ptr, k_ptr, v_ptr, bt_ptr, seq_lens_ptr, k_scale_ptr, v_scale_ptr,
    m_ws_ptr, l_ws_ptr, acc_ws_ptr, count_ptr,
    scale, window, part_size, num_blocks, table_keys,
    s_oi, s_op, s_oh,
    s_qi, s_qp, s_qh,
    s_bti,
    k_blk, k_head, k_dhi, k_dlo, k_slo,
    v_blk, v_head, v_dlo, v_shi, v_slo,
    ks_blk, ks_head, ks_slot,
    vs_blk, vs_head, vs_slot,
    ws_seq, ws_head, ws_part,
    G: gl.constexpr, Q: gl.constexpr, M_PAD: gl.constexpr, ROW_TILES: gl.constexpr,
    D: gl.constexpr, D_REAL: gl.constexpr, DV: gl.constexpr, BLOCK_SIZE: gl.constexpr, BLOCK_N: gl.constexpr,
    CHUNK: gl.constexpr, K_DX: gl.constexpr, V_SX: gl.constexpr,
    FP8_MODE: gl.constexpr, PER_TOKEN_SCALE: gl.constexpr, DOT: gl.constexpr, KEYS_M: gl.constexpr,
    SPLIT: gl.constexpr, MERGE_ROWS: gl.constexpr, MERGE_DIMS: gl.constexpr, MERGE_UNROLL: gl.constexpr,
    STAGED_FOLD: gl.constexpr, V_KEYS_INNER: gl.constexpr, STAGES: gl.constexpr, SCORE_DIMS: gl.constexpr,
    NUM_WARPS: gl.constexpr,
):
    gl.static_assert(KEYS_M, "the Gluon kernel puts the keys in the MMA's M")
    seq = gl.program_id(0)
    head_tile = gl.program_id(1)
    part = gl.program_id(2)
    SLICES: gl.constexpr = D // DV
    NC: gl.constexpr = BLOCK_N // CHUNK
    gl.static_assert(SLICES * DV == D and (SLICES == 1 or D_REAL == D), "DV: a power of two up to D; D_REAL = D")
    dim_lo = 0
    if SLICES > 1:
        dim_lo = (head_tile % SLICES) * DV
        head_tile = head_tile // SLICES
    kvh = head_tile // ROW_TILES
    LOG2E: gl.constexpr = 1.4426950408889634

    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[NUM_WARPS, 1],
                                                  instr_shape=[16, 8])
    ELEM: gl.constexpr = k_ptr.dtype.element_ty.primitive_bitwidth // 8
    # 8 bytes of the cache's codes a lane along K: one shared-memory load (the MMA's K order is the
    # same permutation in both operands, so the product is the same)
    OP_A: gl.constexpr = gl.DotOperandLayout(0, MMA, 8 // ELEM)
    OP_B: gl.constexpr = gl.DotOperandLayout(1, MMA, 8 // ELEM)
    KEYS: gl.constexpr = gl.SliceLayout(1, MMA)  # a vector along the keys (or dims) of an MMA tile
    ROWV: gl.constexpr = gl.SliceLayout(0, MMA)  # a vector along its rows
    RUN: gl.constexpr = 16 // ELEM
    KL: gl.constexpr = copy_layout([D // RUN, BLOCK_N, RUN], ELEM, NUM_WARPS)
    # The caches' strides arrive in 16-byte runs (RUN elements; the run's own stride, 1, as it is) and are
    # scaled back here, so the compiler sees every run start at a multiple of RUN (a bf16 shuffled cache
    # steps 8 elements a slot: not a multiple of 16, which is all Triton marks on an argument) and
    # copies each run as one 16-byte cp.async.
    k_blk = k_blk * RUN
    k_head = k_head * RUN
    k_dhi = k_dhi * RUN
    k_slo = k_slo * RUN
    v_blk = v_blk * RUN
    v_head = v_head * RUN
    v_shi = v_shi * RUN
    if V_KEYS_INNER:
        v_dlo = v_dlo * RUN
    else:
        v_slo = v_slo * RUN
    if V_KEYS_INNER:
        VL: gl.constexpr = copy_layout([NC, DV, CHUNK], ELEM, NUM_WARPS)
    else:
        VL: gl.constexpr = copy_layout([NC, CHUNK, DV], ELEM, NUM_WARPS)
    FLAT3: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [2, 1, 0])
    FLAT2: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    FLAT1: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    QL: gl.constexpr = plain_layout([M_PAD, D], NUM_WARPS)

    seq_len = gl.minimum(gl.maximum(gl.load(seq_lens_ptr + seq).to(gl.int32), 0), table_keys)
    row0 = (head_tile % ROW_TILES) * M_PAD
    rows = row0 + gl.arange(0, M_PAD, layout=ROWV)
    tok = rows // G
    row_hi = gl.maximum(seq_len - Q + 1 + tok, 0)
    if window > 0:
        row_lo = gl.maximum(row_hi - window, 0)
        kv_lo = gl.maximum(seq_len - Q + 1 - window, 0)
    else:
        row_lo = row_hi * 0
        kv_lo = seq_len * 0
    kv_hi = seq_len
    part_lo = (kv_lo // BLOCK_SIZE) * BLOCK_SIZE + part * part_size
    part_hi = gl.minimum(part_lo + part_size, kv_hi)
    table_hi = ((kv_hi + BLOCK_SIZE - 1) // BLOCK_SIZE) * BLOCK_SIZE

    # The query [M_PAD, D] in the dot dtype (scaled into fp16's range row by row), read transposed.
    q_rows_l = row0 + gl.arange(0, M_PAD, layout=gl.SliceLayout(1, QL))
    q_dims = gl.arange(0, D, layout=gl.SliceLayout(0, QL))
    q_row_ok = q_rows_l < G * Q
    q_off = (seq.to(gl.int64) * s_qi + gl.expand_dims((q_rows_l // G) * s_qp + (kvh * G + q_rows_l % G) * s_qh, 1)
             + gl.expand_dims(q_dims, 0))
    q = gl.load(q_ptr + q_off, mask=gl.expand_dims(q_row_ok, 1) & gl.expand_dims(q_dims < D_REAL, 0),
                other=0.0).to(gl.float32)
    if PER_TOKEN_SCALE:
        qk_scale = gl.full([M_PAD], scale * LOG2E, gl.float32, layout=gl.SliceLayout(1, QL))
    else:
        qk_scale = gl.full([M_PAD], scale * LOG2E, gl.float32, layout=gl.SliceLayout(1, QL)) * gl.load(
            k_scale_ptr).to(gl.float32)
    if DOT == gl.float16:
        q_shift = pow2_into(gl.max(gl.abs(q), axis=1), 15)
        q = q * gl.expand_dims(q_shift, 1)
        qk_scale = qk_scale / q_shift * f16_shift(FP8_MODE, DOT)
    qk_scale = gl.convert_layout(qk_scale, ROWV)
    q_smem = gl.allocate_shared_memory(DOT, [M_PAD, D], FLAT2, q.to(DOT))

    m_i = gl.full([M_PAD], float("-inf"), gl.float32, layout=ROWV)
    l_i = gl.zeros([M_PAD], gl.float32, layout=ROWV)
    acc = gl.zeros([DV, M_PAD], gl.float32, layout=MMA)

    raw_ty: gl.constexpr = k_ptr.dtype.element_ty
    # the ring's K, V and scales: the fold's after the walk
    RING_BYTES: gl.constexpr = STAGES * BLOCK_N * ((D + DV) * ELEM + 8 * PER_TOKEN_SCALE)
    # Tiles chunk-major (16-byte rows): the MMA's lanes read rows 16 bytes apart, no two in one bank
    kbufs = gl.allocate_shared_memory(raw_ty, [STAGES, D // RUN, BLOCK_N, RUN], FLAT3)
    if V_KEYS_INNER:
        vbufs = gl.allocate_shared_memory(raw_ty, [STAGES, NC, DV, CHUNK],
                                          FLAT3)
    else:
        vbufs = gl.allocate_shared_memory(raw_ty, [STAGES, NC, CHUNK, DV],
                                          FLAT3)
    if PER_TOKEN_SCALE:
        ksbufs = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_N], FLAT1)
        vsbufs = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_N], FLAT1)
    else:
        ksbufs = kbufs
        vsbufs = kbufs

    n_tiles = gl.maximum(gl.cdiv(part_hi - part_lo, BLOCK_N), 0)
    KPL: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(2, KL))  # a block id a key
    VPL: gl.constexpr = gl.SliceLayout(1, gl.SliceLayout(2, VL))  # a block id a chunk
    copy_args = (kvh, table_hi, k_ptr, v_ptr, k_scale_ptr, v_scale_ptr, k_blk, k_head, k_dhi, k_dlo, k_slo,
                 v_blk, v_head, v_dlo, v_shi, v_slo, ks_blk, ks_head, ks_slot, vs_blk, vs_head, vs_slot, dim_lo)
    # Prologue: tiles 0 .. STAGES - 2 in flight, one group each (empty past the last tile).
    for t in gl.static_range(STAGES - 1):
        start = part_lo + t * BLOCK_N
        k_pages = _pages(start, seq, table_hi, num_blocks, bt_ptr, s_bti, BLOCK_SIZE, 1, BLOCK_N, KPL)
        v_pages = _pages(start, seq, table_hi, num_blocks, bt_ptr, s_bti, BLOCK_SIZE, CHUNK, NC, VPL)
        _issue(kbufs.index(t), vbufs.index(t), ksbufs.index(t), vsbufs.index(t), k_pages, v_pages, start,
               *copy_args, t < n_tiles, D, D_REAL, DV, BLOCK_SIZE, BLOCK_N, CHUNK, K_DX, V_SX, PER_TOKEN_SCALE,
               V_KEYS_INNER, KL, VL)
        async_copy.commit_group()
    ahead = part_lo + (STAGES - 1) * BLOCK_N  # the next tile to issue; its block ids read a step early
    k_pages = _pages(ahead, seq, table_hi, num_blocks, bt_ptr, s_bti, BLOCK_SIZE, 1, BLOCK_N, KPL)
    v_pages = _pages(ahead, seq, table_hi, num_blocks, bt_ptr, s_bti, BLOCK_SIZE, CHUNK, NC, VPL)

    for t in range(n_tiles):
        start = part_lo + t * BLOCK_N
        stage = t % STAGES
        async_copy.wait_group(STAGES - 2)  # tile t is in shared memory
        nxt = (t + STAGES - 1) % STAGES
        _issue(kbufs.index(nxt), vbufs.index(nxt), ksbufs.index(nxt), vsbufs.index(nxt), k_pages, v_pages,
               ahead, *copy_args, t + STAGES - 1 < n_tiles, D, D_REAL, DV, BLOCK_SIZE, BLOCK_N, CHUNK, K_DX, V_SX,
               PER_TOKEN_SCALE, V_KEYS_INNER, KL, VL)
        async_copy.commit_group()
        ahead += BLOCK_N
        k_pages = _pages(ahead, seq, table_hi, num_blocks, bt_ptr, s_bti, BLOCK_SIZE, 1, BLOCK_N, KPL)
        v_pages = _pages(ahead, seq, table_hi, num_blocks, bt_ptr, s_bti, BLOCK_SIZE, CHUNK, NC, VPL)

        # scores [BLOCK_N, M_PAD] = K q^T, SCORE_DIMS dims at a time
        k_tile = kbufs.index(stage).permute([1, 0, 2]).reshape([BLOCK_N, D])
        s = gl.zeros([BLOCK_N, M_PAD], gl.float32, layout=MMA)
        for c in gl.static_range(D // SCORE_DIMS):
            k_op = to_dot(k_tile.slice(c * SCORE_DIMS, SCORE_DIMS, dim=1).load(OP_A), FP8_MODE, DOT)
            s = mma_v2(k_op, q_smem.slice(c * SCORE_DIMS, SCORE_DIMS, dim=1).permute([1, 0]).load(OP_B), s)
        s = s * gl.expand_dims(qk_scale, 0)
        keys = start + gl.arange(0, BLOCK_N, layout=KEYS)
        if PER_TOKEN_SCALE:
            s = s * gl.expand_dims(ksbufs.index(stage).load(KEYS), 1)
        key_at = gl.expand_dims(keys, 1)
        key_ok = (keys >= kv_lo) & (keys < part_hi)
        visible = (key_at >= gl.expand_dims(row_lo, 0)) & (key_at < gl.expand_dims(row_hi, 0))
        s = gl.where(visible & gl.expand_dims(key_ok, 1), s, float("-inf"))

        m_new = gl.maximum(m_i, gl.max(s, axis=0))
        m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
        p = gl.exp2(s - gl.expand_dims(m_safe, 0))
        alpha = gl.exp2(m_i - m_safe)
        l_i = l_i * alpha + gl.sum(p, axis=0)
        m_i = m_new

        if V_KEYS_INNER:
            v_raw = vbufs.index(stage).permute([1, 0, 2]).reshape([DV, BLOCK_N]).load(OP_A)
        else:
            v_raw = vbufs.index(stage).reshape([BLOCK_N, DV]).permute([1, 0]).load(OP_A)
        tail = start + BLOCK_N > kv_hi
        if tail:
            # unused slots past the sequence end may hold NaN codes: their p is 0, but 0 * NaN is NaN
            v_keys = start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, OP_A))
            v_raw = gl.where(gl.expand_dims(v_keys, 0) < kv_hi, v_raw, gl.zeros_like(v_raw))
        v_op = to_dot(v_raw, FP8_MODE, DOT)
        if PER_TOKEN_SCALE:
            vs = vsbufs.index(stage).load(KEYS)
            vs = gl.where(keys < kv_hi, vs, 0.0)
            p = p * gl.expand_dims(vs, 1)
            if DOT == gl.float16:
                p_shift = pow2_into(gl.max(p, axis=0), 15)
                p = p * gl.expand_dims(p_shift, 0)
        else:
            p = p * f16_shift(FP8_MODE, DOT)
        p_dot = p.to(DOT)
        acc = acc * gl.expand_dims(alpha, 0)
        if PER_TOKEN_SCALE and DOT == gl.float16:
            pv = mma_v2(v_op, gl.convert_layout(p_dot, OP_B), gl.zeros([DV, M_PAD], gl.float32, layout=MMA))
            acc = acc + pv * gl.expand_dims(f16_shift(FP8_MODE, DOT) / p_shift, 0)
        else:
            acc = mma_v2(v_op, gl.convert_layout(p_dot, OP_B), acc)
            if DOT == gl.bfloat16:
                # P rounded to bf16 is off by up to 2^-9 of itself; the remainder's product restores fp32
                acc = mma_v2(v_op, gl.convert_layout((p - p_dot.to(gl.float32)).to(DOT), OP_B), acc)
    async_copy.wait_group(0)

    if not PER_TOKEN_SCALE:
        acc = acc * gl.load(v_scale_ptr).to(gl.float32)

    out_rows = row0 + gl.arange(0, M_PAD, layout=ROWV)
    out_dims = dim_lo + gl.arange(0, DV, layout=KEYS)
    row_ok = out_rows < G * Q
    out_ok = gl.expand_dims(row_ok, 0) & gl.expand_dims(out_dims < D_REAL, 1)
    if SPLIT:
        ws_tile = seq.to(gl.int64) * ws_seq + kvh * ws_head
        ws = ws_tile + part * ws_part
        ml_ok = row_ok
        if SLICES > 1:  # every slice holds the same m and l: the first one writes them
            ml_ok = ml_ok & (out_rows * 0 + dim_lo == 0)
        gl.store(m_ws_ptr + ws + out_rows, m_i, mask=ml_ok)
        gl.store(l_ws_ptr + ws + out_rows, l_i, mask=ml_ok)
        if part_lo < part_hi:
            acc_off = gl.expand_dims(ws + out_rows, 0) * D_REAL + gl.expand_dims(out_dims, 1)
            gl.store(acc_ws_ptr + acc_off, acc, mask=out_ok)
        n_part = gl.num_programs(2)
        if last_to_arrive(count_ptr, seq * (gl.num_programs(1) // SLICES) + head_tile, n_part * SLICES):
            # (constexprs go by name: a tuple would carry them as values)
            fold_args = (out_ptr, m_ws_ptr, l_ws_ptr, acc_ws_ptr, ws_tile, ws_part, n_part,
                         (kv_lo // BLOCK_SIZE) * BLOCK_SIZE, part_size, kv_hi, row0)
            if STAGED_FOLD:
                fold_staged(*fold_args, G, Q, kvh * G, s_oi, s_op, s_oh, seq, MERGE_ROWS, D, D_REAL, MERGE_DIMS,
                            RING_BYTES, NUM_WARPS)
            else:
                fold(*fold_args, G, Q, kvh * G, s_oi, s_op, s_oh, seq, MERGE_ROWS, D, D_REAL, MERGE_DIMS, MERGE_UNROLL,
                     NUM_WARPS)
    else:
        l_at = gl.expand_dims(l_i, 0)
        out = gl.where(l_at > 0, acc / gl.where(l_at > 0, l_at, 1.0), 0.0)
        o_off = (seq.to(gl.int64) * s_oi + gl.expand_dims((out_rows // G) * s_op + (kvh * G + out_rows % G) * s_oh, 0)
                 + gl.expand_dims(out_dims, 1))
        gl.store(out_ptr + o_off, out.to(out_ptr.dtype.element_ty), mask=out_ok)
