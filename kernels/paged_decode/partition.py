"""The decode partition kernel: one program per (sequence, kv head x row tile, partition).

The M = Q * G query rows that read kv head h of sequence i (row r is query token
p = r // G of query head h * G + r % G) are cut into ROW_TILES tiles of M_PAD
rows (at most 64; the last tile is masked), and grid axis 1 numbers (h, tile)
as h * ROW_TILES + tile. A program holds one tile and walks the keys of its
partition in tiles of BLOCK_N (`attend_tile`) with an fp32 online softmax:

    s_rj  = scale * k_scale_j * (q_r . k_j)          visible keys only
    m_r   = max_j s_rj,   l_r = sum_j exp(s_rj - m_r)
    acc_r = sum_j exp(s_rj - m_r) * v_scale_j * v_j

Row r (token p) at absolute position L - Q + p sees keys
[max(0, L - Q + 1 + p - W), L - Q + 1 + p) for a window W > 0, [0, L - Q + 1 + p)
otherwise. The program covers keys [kv_lo, L) where kv_lo is row 0's first key;
partition j of that range is [base + j * PART, base + (j + 1) * PART), with
base = kv_lo rounded down to a cache block. Tiles that end at or before L
hold only written slots; at most one tail tile reaches past L, and only it
zeroes the V rows and V scales there (unused slots may hold NaN bytes and
inf or NaN scales).

Indices read from memory are clamped before they address anything: a
sequence length to [0, table_keys] (the keys its block-table row covers) and
a block id to [0, num_blocks). A bad table or length gives a wrong answer,
never a load outside the caches or the table (the host checks them when asked:
`validate`).

The tile's orientation is a constexpr of the launch table (KEYS_M): the rows
as the M of the MMAs (scores [rows, keys] = q K^T, acc [rows, D] += P V;
M_PAD >= 16) or the keys as M and the rows as N (scores [keys, rows] = K q^T,
acc [D, rows] += V^T P^T; M_PAD >= 8), which pads a few rows (GQA 4, one
query token) to 8 instead of 16 and halves the MMAs and the accumulator.
The same arithmetic either way; only the axes the softmax reduces over and
broadcasts along change (KA, RA in the code).

A wide head may run as D // DV dim slices (DV a constexpr of the launch table): the
slice's programs all score the whole head (q . k over every dim, the same
scores, maxima and sums bit for bit), and each weighs and writes only the DV
dims [slice * DV, (slice + 1) * DV) of V and of the output, so its accumulator
is [rows, DV]. Grid axis 1 then numbers (h, tile, slice) as
(h * ROW_TILES + tile) * (D // DV) + slice. DV < D needs D_REAL = D.

SPLIT = False: one partition; the program writes out = acc / l (0 where l = 0).
SPLIT = True : the program writes m and l of every row, and acc only when its
partition holds a key, to the workspace; the last program of the row tile to
finish folds every partition into the output (kernels.paged_decode.reduce).

A tile is BLOCK_N // CHUNK chunks of CHUNK keys that share a cache block, so a
chunk's block id b is read once, one step ahead of the tile's loads (`tile_pages`):
no load of a step then waits on another of the same step, and Triton's software
pipelining issues the tile's loads num_stages - 1 steps before they are used (with
the ids read in the step, half that). The host sets the strides for the shuffled
or plain layout: key element (slot s, dim d) of kv head h lives at

    b*k_blk + h*k_head + s*k_slo + (d // K_DX)*k_dhi + (d % K_DX)*k_dlo

and value element (s, d) at

    b*v_blk + h*v_head + (s // V_SX)*v_shi + (s % V_SX)*v_slo + d*v_dlo.

Tiles are loaded as [chunk, key, dim] blocks so the contiguous axis (dims of
K; keys of a shuffled V, dims of a plain one) is the vector axis of the
loads. fp8 values are decoded exactly to fp32 (natively or from their bits),
fed to `tl.dot` in DOT dtype (bf16/fp16 hold every fp8 value exactly), and
the scales are applied to scores and probabilities in fp32. Where DOT is
bf16, P enters the PV product as two DOT terms, P_hi + (P - P_hi); in fp16 it
enters once, rounded to 11 bits (at most 2^-11 of itself off).

DOT = fp16 on an fp8 cache (the arch's tuning asks for it: the hardware turns
two fp8 codes into two fp16 values in one instruction, where bf16 needs a
detour through fp32): fp16's range is narrow, so each operand row is scaled
by a power of two (exact) into it and the product scaled back. Query row r:
q_r * 2^a_r with max |q_r| * 2^a_r in [2^14, 2^15), s_r = (q_r 2^a_r . k) * 2^-a_r;
with per-token V scales, P row r of a tile as p_rj * v_scale_j * 2^b_r with its
largest entry in [2^14, 2^15), and its PV row scaled by 2^-b_r. Every fp8 and
bf16 query value keeps its bits (down to 2^-28 of its row's largest), so the
math is that of bf16 operands. Where the hardware has no fp8 conversion (the
interpreter; e4m3fnuz on NVIDIA) the codes' sign, exponent and mantissa are
moved into fp16's fields, which is the value times 2^-(15 - bias) exactly
(subnormals included; on NVIDIA four codes at a time in PTX); the scores'
scale and P carry that power of two back.
"""

import triton
import triton.language as tl

from kernels import arch
from kernels.paged_decode.reduce import fold_partitions, last_to_arrive


@triton.jit
def decode_fp8_bits(raw, FP8_MODE: tl.constexpr):
    """uint8 codes -> fp32, from the bits (e4m3fn: bias 7; e4m3fnuz: bias 8)."""
    b = raw.to(tl.int32)
    exponent = (b >> 3) & 0xF
    mantissa = b & 0x7
    if FP8_MODE == arch.FP8_BITS_E4M3FN:
        normal = ((exponent + 120) << 23) | (mantissa << 20)
        sub = mantissa.to(tl.float32) * 0.001953125  # m * 2^-9
        is_nan = (b & 0x7F) == 0x7F
    else:
        normal = ((exponent + 119) << 23) | (mantissa << 20)
        sub = mantissa.to(tl.float32) * 0.0009765625  # m * 2^-10
        is_nan = b == 0x80
    value = tl.where(exponent == 0, sub, normal.to(tl.float32, bitcast=True))
    value = tl.where((b >> 7) != 0, -value, value)
    return tl.where(is_nan, float("nan"), value)


@triton.jit
def to_f32(raw, FP8_MODE: tl.constexpr):
    """A loaded cache tile in fp32, whatever its storage."""
    if FP8_MODE >= arch.FP8_BITS_E4M3FN:  # a bit-decoded mode (kernels.arch.FP8_BITS)
        return decode_fp8_bits(raw, FP8_MODE)
    return raw.to(tl.float32)


# e4m3fnuz codes to fp16 fields, four codes (one 32-bit register, code i in byte i) to two fp16x2
# registers (code i in half i). Per pair of codes: t = [c0, sign(c0) x 8, c1, sign(c1) x 8] (a byte
# permute that replicates sign bits), so t << 7 holds each code's exponent and mantissa in fp16's bits
# 7 to 13 and its sign in bit 15; the mask drops the sign's copy in bit 14 and what crossed into the
# next half. NaN (code 0x80): y = [c0, 0, c1, 0] read as fp16 (a subnormal, compared exactly: no ftz)
# equals 0x0080 only there, and the all-ones half it gives makes the result NaN.
_FNUZ_TO_F16: tl.constexpr = tl.constexpr("""{
.reg .b32 t0, t1, y0, y1, m0, m1, z, k;
mov.b32 z, 0;
mov.b32 k, 0x00800080;
prmt.b32 t0, $2, z, 0x9180;
prmt.b32 t1, $2, z, 0xB3A2;
prmt.b32 y0, $2, z, 0x4140;
prmt.b32 y1, $2, z, 0x4342;
set.eq.u32.f16x2 m0, y0, k;
set.eq.u32.f16x2 m1, y1, k;
shl.b32 t0, t0, 7;
shl.b32 t1, t1, 7;
lop3.b32 $0, t0, 0xBF80BF80, m0, 0xEA;
lop3.b32 $1, t1, 0xBF80BF80, m1, 0xEA;
}""")


@triton.jit
def fp8_bits_to_f16(raw, FP8_MODE: tl.constexpr):
    """uint8 codes -> fp16 holding value * 2^-F16_SHIFT: sign, exponent and mantissa moved into
    fp16's fields (fp16's subnormals take the fp8 subnormals exactly), NaN codes to NaN; with
    FP8_PTX_E4M3FNUZ four codes at a time in PTX (_FNUZ_TO_F16), the same bits."""
    if FP8_MODE == arch.FP8_PTX_E4M3FNUZ:
        value = tl.inline_asm_elementwise(_FNUZ_TO_F16, "=r,=r,r", [raw], dtype=tl.float16, is_pure=True, pack=4)
    else:
        b = raw.to(tl.uint16)
        value = (((b & 0x7F) << 7) | ((b & 0x80) << 8)).to(tl.float16, bitcast=True)
        if FP8_MODE == arch.FP8_BITS_E4M3FN:
            is_nan = (b & 0x7F) == 0x7F
        else:
            is_nan = b == 0x80
        value = tl.where(is_nan, float("nan"), value)
    return value


@triton.jit
def to_dot(raw, FP8_MODE: tl.constexpr, DOT: tl.constexpr):
    """A loaded cache tile as dot operands. fp16 from fp8: native in one step, or from the bits
    as value / f16_shift (the scores' scale and P multiply it back); else via fp32."""
    if DOT == tl.float16 and FP8_MODE == arch.FP8_NATIVE:
        return raw.to(tl.float16)
    if DOT == tl.float16 and FP8_MODE >= arch.FP8_BITS_E4M3FN:
        return fp8_bits_to_f16(raw, FP8_MODE)
    return to_f32(raw, FP8_MODE).to(DOT)


@triton.jit
def f16_shift(FP8_MODE: tl.constexpr, DOT: tl.constexpr):
    """2^k with the fp16 operands of fp8_bits_to_f16 = value * 2^-k (15 minus the fp8 bias), else 1."""
    if DOT == tl.float16 and FP8_MODE == arch.FP8_BITS_E4M3FN:
        return 256.0
    elif DOT == tl.float16 and (FP8_MODE == arch.FP8_BITS_E4M3FNUZ or FP8_MODE == arch.FP8_PTX_E4M3FNUZ):
        return 128.0
    else:
        return 1.0


@triton.jit
def pow2_into(x, TOP: tl.constexpr):
    """2^a (fp32) with x * 2^a in [2^(TOP-1), 2^TOP), elementwise, for finite x > 0 (a clamped to
    [-126, 127]); 1 where x is 0 or not finite."""
    exponent = ((x.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
    a = tl.minimum(tl.maximum(TOP - 1 - exponent, -126), 127)
    factor = ((a + 127) << 23).to(tl.float32, bitcast=True)
    return tl.where((x > 0) & (x < float("inf")), factor, 1.0)


@triton.jit
def head_dims(D: tl.constexpr, D_REAL: tl.constexpr):
    """The cache dim each of a tile's D columns reads. Columns past a head size D_REAL read dim
    D_REAL - 1 again: always inside the cache, and harmless, as the query is 0 in those columns
    and their output is never stored. No `other` fill is needed, which sm90's fp8 loads refuse."""
    dims = tl.arange(0, D)
    if D_REAL != D:
        dims = tl.minimum(dims, D_REAL - 1)
    return dims


@triton.jit
def weigh(p, v, KEYS_M: tl.constexpr):
    """The PV product in the tile's orientation: V^T P^T ([dims, rows]) with keys as the MMA's M,
    else P V ([rows, dims])."""
    if KEYS_M:
        pv = tl.dot(v, p)
    else:
        pv = tl.dot(p, v)
    return pv


@triton.jit
def key_dims(cols, k_dhi, k_dlo, K_DX: tl.constexpr):
    """The offsets of key dims `cols` within a key (the cache's split of D into D // K_DX blocks)."""
    return (cols // K_DX) * k_dhi + (cols % K_DX) * k_dlo


@triton.jit
def load_query(q_ptr, q_rows, row_ok, lo, WIDTH: tl.constexpr, KA: tl.constexpr):
    """Query dims [lo, lo + WIDTH) of the tile's rows in fp32 ([M_PAD, WIDTH], or [WIDTH, M_PAD]
    with KA = 0); q_rows are the rows' offsets in q_ptr, rows that do not exist read 0."""
    RA: tl.constexpr = 1 - KA
    off = tl.expand_dims(q_rows, KA) + tl.expand_dims(lo + tl.arange(0, WIDTH), RA)
    return tl.load(q_ptr + off, mask=tl.expand_dims(row_ok, KA), other=0.0).to(tl.float32)


@triton.jit
def tile_pages(start, seq, table_hi, num_blocks, bt_ptr, s_bti, BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
               CHUNK: tl.constexpr):
    """The cache block ids of the BLOCK_N // CHUNK chunks of keys [start, start + BLOCK_N), clamped
    to [0, num_blocks) (0 for chunks past the table's last block, which no key of them reads)."""
    first = start + tl.arange(0, BLOCK_N // CHUNK) * CHUNK
    page = tl.load(bt_ptr + seq.to(tl.int64) * s_bti + first // BLOCK_SIZE, mask=(first >= 0) & (first < table_hi),
                   other=0)
    return tl.minimum(tl.maximum(page, 0), num_blocks - 1).to(tl.int64)


@triton.jit
def attend_tile(acc, m_i, l_i, q, q_shift, qk_scale, start, page, seq, kvh, kv_lo, kv_hi, part_hi, row_lo, row_hi,
                table_hi, row_ok, num_blocks, q_ptr, k_ptr, v_ptr, bt_ptr, k_scale_ptr, v_scale_ptr, s_bti, k_blk,
                k_head, k_slo, k_dhi, k_dlo, v_blk, v_head, v_dim_off, v_shi, v_slo, ks_blk, ks_head, ks_slot,
                vs_blk, vs_head, vs_slot,
                D: tl.constexpr, D_REAL: tl.constexpr, DV: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                BLOCK_N: tl.constexpr, CHUNK: tl.constexpr, K_DX: tl.constexpr, V_SX: tl.constexpr,
                FP8_MODE: tl.constexpr, PER_TOKEN_SCALE: tl.constexpr, DOT: tl.constexpr, KEYS_M: tl.constexpr,
                TAIL: tl.constexpr):
    """Fold keys [start, start + BLOCK_N) into the online softmax state (acc, m_i, l_i).

    The tile is BLOCK_N // CHUNK chunks of CHUNK keys; a chunk never crosses a cache block, so
    its block id (`page`, from tile_pages) is read once and its keys sit one stride apart (the
    vector axis of the loads).
    TAIL: the tile reaches past the sequence end, where unused slots may hold NaN bytes.
    D is the tile's width, a power of two (head_dims: for a head size D_REAL below it);
    v_dim_off are the offsets in a value of the DV dims the program weighs. KEYS_M: acc is
    [DV, M_PAD], scores [keys, rows]; else acc is [M_PAD, DV], scores [rows, keys] (module
    docstring). KA is the axis of the keys in the scores (and of the dims in acc), RA that of
    the rows. With one slice (DV = D) q is the query tile in DOT, scaled by q_shift already
    ([D, M_PAD] with KEYS_M, else [M_PAD, D]); with slices, q holds the rows' offsets in q_ptr
    and the scores sum over the head DV dims at a time, each slice of q and K read where it
    is multiplied (a whole wide head in registers spills).
    """
    KA: tl.constexpr = 1 - KEYS_M
    RA: tl.constexpr = 1 - KA
    NC: tl.constexpr = BLOCK_N // CHUNK
    lanes = tl.arange(0, CHUNK)
    keys = start + tl.arange(0, BLOCK_N)
    key_ok = (keys >= kv_lo) & (keys < part_hi)
    first = start + tl.arange(0, NC) * CHUNK
    # Whole blocks of the table are readable; keys outside the partition are masked from the scores.
    page_ok = (first >= 0) & (first < table_hi)
    slot = tl.multiple_of(first % BLOCK_SIZE, CHUNK)  # tiles start on chunk boundaries

    k_base = page * k_blk + kvh * k_head + slot * k_slo
    k_row = k_base[:, None, None] + lanes[None, :, None] * k_slo
    if DV == D:
        k = tl.load(k_ptr + k_row + key_dims(head_dims(D, D_REAL), k_dhi, k_dlo, K_DX)[None, None, :],
                    mask=page_ok[:, None, None])
        k = tl.reshape(to_dot(k, FP8_MODE, DOT), [BLOCK_N, D])
        if KEYS_M:
            s = tl.dot(k, q)  # [keys, rows]
        else:
            s = tl.dot(q, tl.trans(k))  # [rows, keys]
    else:
        if KEYS_M:
            s = tl.zeros([BLOCK_N, q.shape[0]], tl.float32)
        else:
            s = tl.zeros([q.shape[0], BLOCK_N], tl.float32)
        for c in tl.static_range(D // DV):
            cols = c * DV + tl.arange(0, DV)
            k = tl.load(k_ptr + k_row + key_dims(cols, k_dhi, k_dlo, K_DX)[None, None, :], mask=page_ok[:, None, None])
            k = tl.reshape(to_dot(k, FP8_MODE, DOT), [BLOCK_N, DV])
            q_c = load_query(q_ptr, q, row_ok, c * DV, DV, KA)
            if DOT == tl.float16:
                q_c = q_c * tl.expand_dims(q_shift, KA)
            if KEYS_M:
                s += tl.dot(k, q_c.to(DOT))
            else:
                s += tl.dot(q_c.to(DOT), tl.trans(k))
    s = s * tl.expand_dims(qk_scale, KA)
    if PER_TOKEN_SCALE:
        ks_off = page * ks_blk + kvh * ks_head + slot * ks_slot
        ks = tl.load(k_scale_ptr + ks_off[:, None] + lanes[None, :] * ks_slot, mask=page_ok[:, None])
        s = s * tl.expand_dims(tl.reshape(ks, [BLOCK_N]), RA)
    key_at = tl.expand_dims(keys, RA)
    visible = (key_at >= tl.expand_dims(row_lo, KA)) & (key_at < tl.expand_dims(row_hi, KA))
    s = tl.where(visible & tl.expand_dims(key_ok, RA), s, float("-inf"))

    m_new = tl.maximum(m_i, tl.max(s, axis=KA))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.exp2(s - tl.expand_dims(m_safe, KA))
    alpha = tl.exp2(m_i - m_safe)
    l_i = l_i * alpha + tl.sum(p, axis=KA)

    v_base = page * v_blk + kvh * v_head + (slot // V_SX) * v_shi + (slot % V_SX) * v_slo
    if KEYS_M:  # V^T: [dims, keys]
        v_off = v_base[None, :, None] + lanes[None, None, :] * v_slo + v_dim_off[:, None, None]
        v = tl.reshape(to_dot(tl.load(v_ptr + v_off, mask=page_ok[None, :, None]), FP8_MODE, DOT), [DV, BLOCK_N])
    else:
        v_off = v_base[:, None, None] + lanes[None, :, None] * v_slo + v_dim_off[None, None, :]
        v = tl.reshape(to_dot(tl.load(v_ptr + v_off, mask=page_ok[:, None, None]), FP8_MODE, DOT), [BLOCK_N, DV])
    if TAIL:
        # Unused slots past the sequence end may hold NaN bytes: their p is 0, but 0 * NaN is NaN.
        v = tl.where(tl.expand_dims(keys, KA) < kv_hi, v, 0.0)
    if PER_TOKEN_SCALE:
        vs_off = page * vs_blk + kvh * vs_head + slot * vs_slot
        vs = tl.reshape(tl.load(v_scale_ptr + vs_off[:, None] + lanes[None, :] * vs_slot, mask=page_ok[:, None]),
                        [BLOCK_N])
        if TAIL:
            vs = tl.where(keys < kv_hi, vs, 0.0)
        p = p * tl.expand_dims(vs, RA)
        if DOT == tl.float16:
            p_shift = pow2_into(tl.max(p, axis=KA), 15)
            p = p * tl.expand_dims(p_shift, KA)
    else:
        # V from bit-decoded fp8 is value * 2^-k: P carries the 2^k back (p <= 1, so P * 2^k fits fp16).
        p = p * f16_shift(FP8_MODE, DOT)
    p_dot = p.to(DOT)
    pv = weigh(p_dot, v, KEYS_M)
    if DOT == tl.bfloat16:
        # P rounded to bf16 is off by up to 2^-9 of itself (a row that sees one key with a
        # per-token scale shows all of it); a second dot of the remainder restores fp32 accuracy.
        # fp16 keeps 11 bits, so its one term errs by at most 2^-11 of itself: no second dot there.
        pv += weigh((p - p_dot.to(tl.float32)).to(DOT), v, KEYS_M)
    if PER_TOKEN_SCALE and DOT == tl.float16:
        pv = pv * tl.expand_dims(f16_shift(FP8_MODE, DOT) / p_shift, KA)
    acc = acc * tl.expand_dims(alpha, KA) + pv
    return acc, m_new, l_i


@triton.jit
def decode_partition_kernel(
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
    G: tl.constexpr, Q: tl.constexpr, M_PAD: tl.constexpr, ROW_TILES: tl.constexpr,
    D: tl.constexpr, D_REAL: tl.constexpr, DV: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
    CHUNK: tl.constexpr, K_DX: tl.constexpr, V_SX: tl.constexpr,
    FP8_MODE: tl.constexpr, PER_TOKEN_SCALE: tl.constexpr, DOT: tl.constexpr, KEYS_M: tl.constexpr,
    SPLIT: tl.constexpr, MERGE_ROWS: tl.constexpr, MERGE_DIMS: tl.constexpr, MERGE_UNROLL: tl.constexpr,
):
    seq = tl.program_id(0)
    head_tile = tl.program_id(1)
    part = tl.program_id(2)
    SLICES: tl.constexpr = D // DV
    tl.static_assert(SLICES * DV == D and (SLICES == 1 or D_REAL == D), "DV: a power of two up to D; D_REAL = D")
    if SLICES > 1:
        dim_lo = (head_tile % SLICES) * DV
        head_tile = head_tile // SLICES
    kvh = head_tile // ROW_TILES
    LOG2E: tl.constexpr = 1.4426950408889634
    KA: tl.constexpr = 1 - KEYS_M  # the axis of the dims in q and acc (attend_tile)
    RA: tl.constexpr = 1 - KA  # the axis of the rows

    seq_len = tl.minimum(tl.maximum(tl.load(seq_lens_ptr + seq).to(tl.int32), 0), table_keys)
    rows = (head_tile % ROW_TILES) * M_PAD + tl.arange(0, M_PAD)
    row_ok = rows < G * Q
    tok = rows // G
    head = kvh * G + rows % G
    dims = tl.arange(0, D)
    cell_ok = tl.expand_dims(row_ok, KA)  # the rows and dims that exist
    if D_REAL != D:
        cell_ok = cell_ok & tl.expand_dims(dims < D_REAL, RA)
    if SLICES > 1:  # the dims this program weighs and writes, and the cells of them that exist
        out_dims = dim_lo + tl.arange(0, DV)
        out_ok = tl.expand_dims(row_ok, KA)
        v_cols = out_dims
    else:
        out_dims = dims
        out_ok = cell_ok
        v_cols = head_dims(D, D_REAL)

    # Keys each row sees: [row_lo, row_hi).
    row_hi = tl.maximum(seq_len - Q + 1 + tok, 0)
    if window > 0:
        row_lo = tl.maximum(row_hi - window, 0)
        kv_lo = tl.maximum(seq_len - Q + 1 - window, 0)
    else:
        row_lo = row_hi * 0
        kv_lo = seq_len * 0
    kv_hi = seq_len
    part_lo = (kv_lo // BLOCK_SIZE) * BLOCK_SIZE + part * part_size
    part_hi = tl.minimum(part_lo + part_size, kv_hi)

    if PER_TOKEN_SCALE:
        qk_scale = tl.full([M_PAD], scale * LOG2E, tl.float32)
    else:
        qk_scale = tl.full([M_PAD], scale * LOG2E * tl.load(k_scale_ptr).to(tl.float32), tl.float32)
    q_rows = seq.to(tl.int64) * s_qi + tok * s_qp + head * s_qh
    q_shift = tl.full([M_PAD], 1.0, tl.float32)  # the power of two the query's rows are scaled by (fp16)
    if SLICES > 1:  # the query is read a slice at a time where it is scored (attend_tile)
        q = q_rows
        if DOT == tl.float16:
            q_max = tl.zeros([M_PAD], tl.float32)
            for c in tl.static_range(SLICES):
                q_max = tl.maximum(q_max, tl.max(tl.abs(load_query(q_ptr, q_rows, row_ok, c * DV, DV, KA)), axis=KA))
            q_shift = pow2_into(q_max, 15)
            qk_scale = qk_scale / q_shift * f16_shift(FP8_MODE, DOT)
    else:
        q_off = tl.expand_dims(q_rows, KA) + tl.expand_dims(dims, RA)
        q = tl.load(q_ptr + q_off, mask=cell_ok, other=0.0).to(tl.float32)
        if DOT == tl.float16:
            q_shift = pow2_into(tl.max(tl.abs(q), axis=KA), 15)
            q = q * tl.expand_dims(q_shift, KA)
            qk_scale = qk_scale / q_shift * f16_shift(FP8_MODE, DOT)
        q = q.to(DOT)

    m_i = tl.full([M_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([M_PAD], tl.float32)
    if KEYS_M:
        acc = tl.zeros([DV, M_PAD], tl.float32)
    else:
        acc = tl.zeros([M_PAD, DV], tl.float32)

    # Tiles that end at or before the sequence end; then at most one tail tile.
    table_hi = ((kv_hi + BLOCK_SIZE - 1) // BLOCK_SIZE) * BLOCK_SIZE
    body_hi = tl.minimum(part_hi, kv_hi - BLOCK_N + 1)
    args = (seq, kvh, kv_lo, kv_hi, part_hi, row_lo, row_hi, table_hi, row_ok, num_blocks,
            q_ptr, k_ptr, v_ptr, bt_ptr, k_scale_ptr, v_scale_ptr, s_bti, k_blk, k_head, k_slo, k_dhi, k_dlo,
            v_blk, v_head, v_cols * v_dlo, v_shi, v_slo, ks_blk, ks_head, ks_slot, vs_blk, vs_head, vs_slot)
    # A tile's block ids are read a step before its loads (module docstring).
    page = tile_pages(part_lo, seq, table_hi, num_blocks, bt_ptr, s_bti, BLOCK_SIZE, BLOCK_N, CHUNK)
    for start in range(part_lo, body_hi, BLOCK_N):
        next_page = tile_pages(start + BLOCK_N, seq, table_hi, num_blocks, bt_ptr, s_bti, BLOCK_SIZE, BLOCK_N,
                               CHUNK)
        acc, m_i, l_i = attend_tile(acc, m_i, l_i, q, q_shift, qk_scale, start, page, *args, D=D, D_REAL=D_REAL, DV=DV,
                                    BLOCK_SIZE=BLOCK_SIZE, BLOCK_N=BLOCK_N, CHUNK=CHUNK, K_DX=K_DX, V_SX=V_SX, FP8_MODE=FP8_MODE,
                                    PER_TOKEN_SCALE=PER_TOKEN_SCALE, DOT=DOT, KEYS_M=KEYS_M, TAIL=False)
        page = next_page
    tail = part_lo + tl.maximum(tl.cdiv(body_hi - part_lo, BLOCK_N), 0) * BLOCK_N
    if tail < part_hi:  # page: the tail tile's, read in the last step
        acc, m_i, l_i = attend_tile(acc, m_i, l_i, q, q_shift, qk_scale, tail, page, *args, D=D, D_REAL=D_REAL, DV=DV,
                                    BLOCK_SIZE=BLOCK_SIZE, BLOCK_N=BLOCK_N, CHUNK=CHUNK, K_DX=K_DX, V_SX=V_SX, FP8_MODE=FP8_MODE,
                                    PER_TOKEN_SCALE=PER_TOKEN_SCALE, DOT=DOT, KEYS_M=KEYS_M, TAIL=True)

    if not PER_TOKEN_SCALE:
        acc = acc * tl.load(v_scale_ptr).to(tl.float32)

    if SPLIT:
        ws_tile = seq.to(tl.int64) * ws_seq + kvh * ws_head
        ws = ws_tile + part * ws_part
        ml_ok = row_ok
        if SLICES > 1:  # every slice holds the same m and l: the first one writes them
            ml_ok = ml_ok & (rows * 0 + dim_lo == 0)
        tl.store(m_ws_ptr + ws + rows, m_i, mask=ml_ok)
        tl.store(l_ws_ptr + ws + rows, l_i, mask=ml_ok)
        if part_lo < part_hi:
            acc_off = tl.expand_dims(ws + rows, KA) * D_REAL + tl.expand_dims(out_dims, RA)
            tl.store(acc_ws_ptr + acc_off, acc, mask=out_ok)
        # the row tile's counter; every slice and partition of the tile arrives at it once
        n_part = tl.num_programs(2)
        if last_to_arrive(count_ptr, seq * (tl.num_programs(1) // SLICES) + head_tile, n_part * SLICES):
            # the tile's first MERGE_ROWS rows: every row of it that exists
            f_rows = (head_tile % ROW_TILES) * M_PAD + tl.arange(0, MERGE_ROWS)
            o_rows = seq.to(tl.int64) * s_oi + (f_rows // G) * s_op + (kvh * G + f_rows % G) * s_oh
            fold_partitions(out_ptr, m_ws_ptr, l_ws_ptr, acc_ws_ptr, ws_tile, ws_part, n_part,
                            (kv_lo // BLOCK_SIZE) * BLOCK_SIZE, part_size, kv_hi, f_rows, f_rows < G * Q, o_rows,
                            ROWS=MERGE_ROWS, D=D, D_REAL=D_REAL, DB=MERGE_DIMS, UNROLL=MERGE_UNROLL)
    else:
        l_at = tl.expand_dims(l_i, KA)
        out = tl.where(l_at > 0, acc / tl.where(l_at > 0, l_at, 1.0), 0.0)
        o_off = seq.to(tl.int64) * s_oi + tl.expand_dims(tok * s_op + head * s_oh, KA) + tl.expand_dims(out_dims, RA)
        tl.store(out_ptr + o_off, out.to(out_ptr.dtype.element_ty), mask=out_ok)
