"""The decode partition kernel: one program per (sequence, kv head, partition).

For kv head h of sequence i, the program holds all M = Q * G query rows that
read h (row r is query token p = r // G of query head h * G + r % G), padded to
M_PAD >= 16 for `tl.dot`, and walks the keys of its partition in tiles of
BLOCK_N with an fp32 online softmax:

    s_rj  = scale * k_scale_j * (q_r . k_j)          visible keys only
    m_r   = max_j s_rj,   l_r = sum_j exp(s_rj - m_r)
    acc_r = sum_j exp(s_rj - m_r) * v_scale_j * v_j

Row r (token p) at absolute position L - Q + p sees keys
[max(0, L - Q + 1 + p - W), L - Q + 1 + p) for a window W > 0, [0, L - Q + 1 + p)
otherwise. The program covers keys [kv_lo, L) where kv_lo is row 0's first key;
partition j of that range is [base + j * PART, base + (j + 1) * PART), with
base = kv_lo rounded down to a cache block.

SPLIT = False: one partition; the program writes out = acc / l (0 where l = 0).
SPLIT = True : the program writes m and l of every row, and acc only when its
partition holds a key; the reduce kernel merges the partitions.

Cache addressing is one formula for every layout: the element of (block b,
kv head h, slot s, dim d) lives at

    b*s_blk + h*s_head + (d // DX)*s_dhi + (d % DX)*s_dlo + (s // SX)*s_shi + (s % SX)*s_slo

(the host sets the strides and the divisors DX, SX for the shuffled or plain
layout). fp8 values are decoded exactly to fp32 (natively or from their bits),
fed to `tl.dot` in DOT dtype (bf16/fp16 hold every fp8 value exactly), and the
scales are applied to scores and probabilities in fp32. Where DOT is narrower
than fp32, P enters the PV product as two DOT terms, P_hi + (P - P_hi).
"""

import triton
import triton.language as tl

from kernels import arch


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
    if FP8_MODE == arch.FP8_BITS_E4M3FN or FP8_MODE == arch.FP8_BITS_E4M3FNUZ:
        return decode_fp8_bits(raw, FP8_MODE)
    return raw.to(tl.float32)


@triton.jit
def decode_partition_kernel(
    out_ptr, q_ptr, k_ptr, v_ptr, bt_ptr, seq_lens_ptr, k_scale_ptr, v_scale_ptr,
    m_ws_ptr, l_ws_ptr, acc_ws_ptr,
    scale, window, part_size,
    s_oi, s_op, s_oh,
    s_qi, s_qp, s_qh,
    s_bti,
    k_blk, k_head, k_dhi, k_dlo, k_shi, k_slo,
    v_blk, v_head, v_dhi, v_dlo, v_shi, v_slo,
    ks_blk, ks_head, ks_slot,
    vs_blk, vs_head, vs_slot,
    ws_seq, ws_head, ws_part,
    NUM_KV_HEADS: tl.constexpr, G: tl.constexpr, Q: tl.constexpr, M_PAD: tl.constexpr,
    D: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
    K_DX: tl.constexpr, K_SX: tl.constexpr, V_DX: tl.constexpr, V_SX: tl.constexpr,
    FP8_MODE: tl.constexpr, PER_TOKEN_SCALE: tl.constexpr, DOT: tl.constexpr,
    SPLIT: tl.constexpr,
):
    seq = tl.program_id(0)
    kvh = tl.program_id(1)
    part = tl.program_id(2)
    LOG2E: tl.constexpr = 1.4426950408889634

    seq_len = tl.load(seq_lens_ptr + seq).to(tl.int32)
    rows = tl.arange(0, M_PAD)
    row_ok = rows < G * Q
    tok = rows // G
    head = kvh * G + rows % G
    dims = tl.arange(0, D)

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

    q_off = seq.to(tl.int64) * s_qi + tok[:, None] * s_qp + head[:, None] * s_qh + dims[None, :]
    q = tl.load(q_ptr + q_off, mask=row_ok[:, None], other=0.0).to(tl.float32).to(DOT)
    if PER_TOKEN_SCALE:
        qk_scale = scale * LOG2E
    else:
        qk_scale = scale * LOG2E * tl.load(k_scale_ptr).to(tl.float32)

    m_i = tl.full([M_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([M_PAD], tl.float32)
    acc = tl.zeros([M_PAD, D], tl.float32)
    k_dim_off = (dims // K_DX) * k_dhi + (dims % K_DX) * k_dlo
    v_dim_off = (dims // V_DX) * v_dhi + (dims % V_DX) * v_dlo

    for start in range(part_lo, part_hi, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        key_ok = (keys >= kv_lo) & (keys < part_hi)
        page_ok = (keys >= 0) & (keys < ((kv_hi + BLOCK_SIZE - 1) // BLOCK_SIZE) * BLOCK_SIZE)
        page = tl.load(bt_ptr + seq.to(tl.int64) * s_bti + keys // BLOCK_SIZE, mask=page_ok, other=0)
        page = page.to(tl.int64)
        slot = keys % BLOCK_SIZE

        k_off = (page * k_blk + kvh * k_head + (slot // K_SX) * k_shi + (slot % K_SX) * k_slo)
        # Whole pages are readable; keys outside the partition are masked out of the scores below.
        k = tl.load(k_ptr + k_off[None, :] + k_dim_off[:, None], mask=page_ok[None, :])
        k = to_f32(k, FP8_MODE).to(DOT)
        s = tl.dot(q, k) * qk_scale
        if PER_TOKEN_SCALE:
            ks = tl.load(k_scale_ptr + page * ks_blk + kvh * ks_head + slot * ks_slot, mask=key_ok, other=0.0)
            s = s * ks[None, :]
        visible = (keys[None, :] >= row_lo[:, None]) & (keys[None, :] < row_hi[:, None]) & key_ok[None, :]
        s = tl.where(visible, s, float("-inf"))

        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        m_i = m_new

        # V rows of keys outside the partition (unused slots may hold NaN bytes) are zeroed:
        # their p is 0, but 0 * NaN is NaN.
        v_keep = key_ok[:, None]
        v_off = (page * v_blk + kvh * v_head + (slot // V_SX) * v_shi + (slot % V_SX) * v_slo)
        v = tl.load(v_ptr + v_off[:, None] + v_dim_off[None, :], mask=page_ok[:, None])
        v = tl.where(v_keep, to_f32(v, FP8_MODE), 0.0).to(DOT)
        if PER_TOKEN_SCALE:
            vs = tl.load(v_scale_ptr + page * vs_blk + kvh * vs_head + slot * vs_slot, mask=key_ok, other=0.0)
            p = p * vs[None, :]
        p_dot = p.to(DOT)
        pv = tl.dot(p_dot, v)
        if DOT != tl.float32:
            # P rounded to bf16 is off by up to 2^-9 of itself (a row that sees one key with a
            # per-token scale shows all of it); a second dot of the remainder restores fp32 accuracy.
            pv += tl.dot((p - p_dot.to(tl.float32)).to(DOT), v)
        acc = acc * alpha[:, None] + pv

    if not PER_TOKEN_SCALE:
        acc = acc * tl.load(v_scale_ptr).to(tl.float32)

    if SPLIT:
        ws = seq.to(tl.int64) * ws_seq + kvh * ws_head + part * ws_part
        tl.store(m_ws_ptr + ws + rows, m_i, mask=row_ok)
        tl.store(l_ws_ptr + ws + rows, l_i, mask=row_ok)
        if part_lo < part_hi:
            acc_off = (ws + rows[:, None]) * D + dims[None, :]
            tl.store(acc_ws_ptr + acc_off, acc, mask=row_ok[:, None])
    else:
        out = tl.where(l_i[:, None] > 0, acc / tl.where(l_i > 0, l_i, 1.0)[:, None], 0.0)
        o_off = seq.to(tl.int64) * s_oi + tok[:, None] * s_op + head[:, None] * s_oh + dims[None, :]
        tl.store(out_ptr + o_off, out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None])
