"""K1 of the KDA forward ("prepare"), three launches over the chunks of every head.

For chunk c (L <= C valid rows; rows past L are padding with zero q, k, v, beta
and zero gate) and gc the inclusive cumsum of the gate inside the chunk in log2
units (gc = log2(e) * cumsum(g), so exp(x) = 2^(log2(e) x)):

    Akk[t, j] = beta_t * sum_c k_t[c] k_j[c] 2^(gc_t[c] - gc_j[c])    j <  t
    Aqk[t, j] = scale  * sum_c q_t[c] k_j[c] 2^(gc_t[c] - gc_j[c])    j <= t
    T         = (I + Akk)^-1                 (fp32; see kda_solve_kernel)
    w         = T (beta * k * 2^gc)          [C, K]
    u         = T (beta * v)                 [C, V]
    qg        = scale * q * 2^gc             [C, K]
    kg        = k * 2^(gL - gc)              [C, K]   gL = gc of row C-1
    decay     = 2^gL                         [K]

so that, with S the [K, V] state entering the chunk, the chunk walk does
U = u - w S, o = qg S + Aqk U, S <- decay * S + kg^T U.

The three kernels hand over through the workspace, in launch order:
  kda_stage_kernel  (chunk, head):            the gate and gc; stages gc
  kda_intra_kernel  (chunk x row block, head): the L2 norm of its rows; Akk and Aqk of BC
                                               rows t against every j <= t, and the inverse
                                               of the diagonal block; the rows' qg, kg,
                                               beta k 2^gc, and decay
  kda_solve_kernel  (chunk, head):            T from the blocks, then u and w
Each holds only its own phase, so it needs fewer registers and less code than one
kernel doing all three would, and more programs fit on a multiprocessor at once. q and
k are read from the inputs by intra alone, which holds whole rows (their norms) and
their gates: every tile that is a function of a row alone comes from it, and the solve
reads only what T multiplies.

Exponents stay <= 0 (one case aside, below): the rows t of block I (BC rows from
i0 = I*BC) meet the earlier rows j < i0 a block at a time, 2^(gc_t - gc_j) = 2^(gc_t - r)
2^(r - gc_j) with r = gc of row i0 - 1, which lies between j and t (a tl.dot in the DOT
dtype); inside the diagonal block the same holds between its sub-blocks of SB rows, and
pairs within one take the exact differences in fp32: strong decay underflows to 0, never inf.
A gate bounded below (plan.diagonal_product) makes the block one product through its middle
row's gate (factors within 2^(+-64); pairs j > t, which may reach inf, are dropped).
The solve runs over column blocks (the stage over its own width; intra takes whole rows).

Precision: inputs are upcast to fp32 on load; the gate, cumsum and L2 norm are fp32; the
exact diagonal steps and the substitution are fp32; the merges inverting T's diagonal
blocks (intra) take fp32 operands at the arch's solve precision (tf32 on NVIDIA); every other tl.dot takes DOT operands (bf16 on a
GPU, fp32 in the interpreter) and accumulates in fp32; u is stored in the DOT dtype.

Workspace (contiguous, index (chunk * H + head)):
  gates   [NC, H, C, K]    fp32  gc
  akk     [NC, H, C, C]    fp32  beta_t Akk[t, j] below the diagonal blocks, Dinv in them
  tiles   [NC, H, 3, C, K] DOT   qg, kg, w (beta k 2^gc from intra until the solve)
  u       [NC, H, C, V]    DOT
  aqk     [NC, H, C, C]    DOT   (zero above the diagonal)
  decay   [NC, H, K]       fp32
Chunk metadata `meta` [NC, 4] int32: (sequence, batch row, first token, length).
"""

import triton
import triton.language as tl

GATE_LOG = 0
GATE_SOFTPLUS = 1
GATE_LOWER_BOUND = 2


@triton.jit
def _gate(g, alog_ptr, dtb_ptr, h, cols, lower_bound, K: tl.constexpr, GATE: tl.constexpr):
    """Log-decay (natural units) from the raw gate g [R, K] of head h."""
    if GATE == 0:
        out = g
    else:
        rate = tl.exp(tl.load(alog_ptr + h).to(tl.float32))
        x = g + tl.load(dtb_ptr + h * K + cols).to(tl.float32)[None, :]
        if GATE == 1:
            # log1p(e) as log(u) * e / (u - 1), u = 1 + e (u - 1 is exact): log(1 + e) alone loses
            # the bits of e that 1 + e rounds off, up to 1e-4 of a small softplus in fp32.
            e = tl.exp(-tl.abs(x))
            u = 1.0 + e
            d = u - 1.0
            softplus = tl.maximum(x, 0.0) + tl.where(d == 0.0, e, tl.log(u) * (e / tl.where(d == 0.0, 1.0, d)))
            out = -rate * softplus
        else:
            out = lower_bound / (1.0 + tl.exp(-rate * x))
    return out


@triton.jit
def _chunk(meta_ptr, cid):
    """(batch row, first token, valid rows) of chunk cid."""
    return (tl.load(meta_ptr + cid * 4 + 1).to(tl.int64), tl.load(meta_ptr + cid * 4 + 2).to(tl.int64),
            tl.load(meta_ptr + cid * 4 + 3))


@triton.jit
def _rows(ptr, bidx, t0, h, s_b, s_t, s_h, rows, valid, cols):
    """The [R, len(cols)] tile of `ptr` at chunk rows `rows` (tokens t0 + rows of batch row bidx, head h)
    and columns `cols`, in fp32, zero where not `valid`."""
    at = ptr + bidx * s_b + (t0 + rows)[:, None] * s_t + h * s_h + cols[None, :]
    return tl.load(at, mask=valid[:, None], other=0.0).to(tl.float32)


@triton.jit
def _beta(beta_ptr, bidx, t0, h, s_b, s_t, s_h, rows, valid, BETA_SIGMOID: tl.constexpr):
    """beta of chunk rows `rows` in fp32 (through a sigmoid with BETA_SIGMOID), zero where not `valid`."""
    beta = tl.load(beta_ptr + bidx * s_b + (t0 + rows) * s_t + h * s_h, mask=valid, other=0.0).to(tl.float32)
    if BETA_SIGMOID:
        beta = 1.0 / (1.0 + tl.exp(-beta))
    return tl.where(valid, beta, 0.0)


@triton.jit
def _inv_norm(x, L2NORM: tl.constexpr):
    """1 / sqrt(sum_c x[:, c]^2 + 1e-6) of each row of the whole-row tile x [R, K] (ones without L2NORM),
    by the hardware's reciprocal square root where there is one (within 2^-22 of the quotient)."""
    if L2NORM:
        inv = tl.math.rsqrt(tl.sum(x * x, 1) + 1e-6)
    else:
        inv = tl.full([x.shape[0]], 1.0, dtype=tl.float32)
    return inv


@triton.jit
def _unit_lower_inverse(lkk, rb, BC: tl.constexpr, PRECISION: tl.constexpr):
    """(I + L)^-1 of the strictly lower [BC, BC] block L = lkk (BC = 4 SUB): forward substitution on
    its [SUB, SUB] diagonal blocks gives D = (I + L4)^-1; with L4o the part of L below them,
    M = D L4o (M^4 = 0) and (I + L)^-1 = (I + M)^-1 D = (I - M)(I + M^2) D, in products at the
    arch's PRECISION (tf32 or fp32)."""
    SUB: tl.constexpr = BC // 4
    quad = (rb[:, None] // SUB) == (rb[None, :] // SUB)
    a = tl.where(quad, -lkk, 0.0)
    for i in range(1, SUB):
        pick = (rb % SUB) == i
        ai = tl.sum(tl.where(pick[:, None], a, 0.0), 0)
        ai = ai + tl.sum(ai[:, None] * a, 0)
        a = tl.where(pick[:, None] & quad, ai[None, :], a)
    eye = tl.where(rb[:, None] == rb[None, :], 1.0, 0.0)
    quad_inv = a + eye
    m = tl.dot(quad_inv, tl.where(quad, 0.0, lkk), input_precision=PRECISION)
    return tl.dot(tl.dot(eye - m, eye + tl.dot(m, m, input_precision=PRECISION), input_precision=PRECISION),
                  quad_inv, input_precision=PRECISION)


@triton.jit
def kda_stage_kernel(
    g_ptr, alog_ptr, dtb_ptr, sg_b, sg_t, sg_h, meta_ptr, gc_ptr, H, lower_bound,
    K: tl.constexpr, C: tl.constexpr, BK: tl.constexpr, GATE: tl.constexpr,
):
    """By [C, BK] column blocks: the gate and its cumsum along the rows (log2 units; each
    column is independent), staged as gc (rows past the chunk's length repeat the last row's)."""
    cid = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    bidx, t0, length = _chunk(meta_ptr, cid)
    rows = tl.arange(0, C)
    cb = tl.arange(0, BK)
    valid = rows < length
    tile = gc_ptr + (cid * H + h) * (C * K) + rows[:, None] * K + cb[None, :]
    for kb in tl.static_range(K // BK):
        cols = kb * BK + cb
        g = _rows(g_ptr, bidx, t0, h, sg_b, sg_t, sg_h, rows, valid, cols)
        gate = tl.where(valid[:, None], _gate(g, alog_ptr, dtb_ptr, h, cols, lower_bound, K, GATE), 0.0)
        tl.store(tile + kb * BK, tl.cumsum(gate * 1.4426950408889634, axis=0))


@triton.jit
def kda_intra_kernel(
    q_ptr, k_ptr, beta_ptr, sq_b, sq_t, sq_h, sk_b, sk_t, sk_h, sb_b, sb_t, sb_h, meta_ptr, gc_ptr,
    akk_ptr, aqk_ptr, tiles_ptr, decay_ptr, H, scale,
    K: tl.constexpr, C: tl.constexpr, BC: tl.constexpr, SB: tl.constexpr, ONE_PRODUCT: tl.constexpr,
    L2NORM: tl.constexpr, BETA_SIGMOID: tl.constexpr, PRECISION: tl.constexpr, DOT: tl.constexpr,
):
    """Rows t of block I (BC rows from i0 = I*BC) of chunk cid, program_id(0) = cid * (C // BC)
    + I (a chunk's blocks run side by side and share its rows in the L2): Aqk against every
    j <= t and zeros above the diagonal; beta_t Akk[t, j] for j below the diagonal block, and
    in its place Dinv = (I + beta Akk)^-1 of the diagonal block (_unit_lower_inverse); the
    rows' qg, kg and beta k 2^gc (in w's place of `tiles`, the solve's operand), and decay
    (block 0).
    Every q and k row is read whole and normalised here (L2NORM).
    Below the diagonal block, a [BC, BC] product for each earlier block J of BC rows (I of
    them: the work grows with the block), with r = gc of row i0 - 1 for all of them
    (j <= i0 - 1 < t): 2^(gc_t - gc_j) = 2^(gc_t - r) 2^(r - gc_j), both factors at most 1.
    The diagonal block likewise in sub-blocks of SB rows (SB | BC): a product for each
    earlier sub-block, exact exponents inside each (SB steps);
    ONE_PRODUCT (a gate bounded below, kernels.kda.plan.diagonal_product): one product through
    the gate of the block's middle row, whose two factors stay within 2^(+-64)."""
    cid = (tl.program_id(0) // (C // BC)).to(tl.int64)
    I = tl.program_id(0) % (C // BC)
    h = tl.program_id(1)
    base = cid * H + h
    bidx, t0, length = _chunk(meta_ptr, cid)
    rows = tl.arange(0, C)
    rb = tl.arange(0, BC)
    ck = tl.arange(0, K)
    gc_base = gc_ptr + base * (C * K)
    akk_base = akk_ptr + base * (C * C)
    aqk_base = aqk_ptr + base * (C * C)
    i0 = I * BC
    ri = i0 + rb
    # The block's own q, k and gc tiles: the diagonal block, then the earlier rows.
    qI = _rows(q_ptr, bidx, t0, h, sq_b, sq_t, sq_h, ri, ri < length, ck)
    kI = _rows(k_ptr, bidx, t0, h, sk_b, sk_t, sk_h, ri, ri < length, ck)
    qI = qI * _inv_norm(qI, L2NORM)[:, None]
    kI = kI * _inv_norm(kI, L2NORM)[:, None]
    gI = tl.load(gc_base + ri[:, None] * K + ck[None, :])
    # Diagonal block, in sub-blocks of SB rows: a later sub-block meets an earlier one, s, in one
    # [BC, BC] product with r = gc of s's last row (j <= r < t); pairs inside a sub-block take the
    # exact exponents gc_t - gc_j (j <= t), one partner row a step for every sub-block at once.
    if ONE_PRODUCT:
        # Pairs j > t take 2^(gc_t - gc_j) >= 1 (finite or inf, never read: the where drops them).
        ref = tl.load(gc_base + (i0 + BC // 2 - 1) * K + ck)
        ks = tl.trans((kI * tl.exp2(ref[None, :] - gI)).to(DOT))
        later = tl.exp2(gI - ref[None, :])
        pair = rb[:, None] - rb[None, :]
        dkk = tl.where(pair > 0, tl.dot((kI * later).to(DOT), ks), 0.0)
        dqk = tl.where(pair >= 0, tl.dot((qI * later).to(DOT), ks), 0.0)
    else:
        dkk = tl.zeros([BC, BC], dtype=tl.float32)
        dqk = tl.zeros([BC, BC], dtype=tl.float32)
        for s in tl.static_range(BC // SB - 1):
            ref = tl.load(gc_base + (i0 + (s + 1) * SB - 1) * K + ck)
            later = tl.exp2(tl.where((rb >= (s + 1) * SB)[:, None], gI - ref[None, :], float("-inf")))
            inside = ((rb >= s * SB) & (rb < (s + 1) * SB))[:, None]
            ks = tl.trans((kI * tl.exp2(tl.where(inside, ref[None, :] - gI, float("-inf")))).to(DOT))
            dkk += tl.dot((kI * later).to(DOT), ks)
            dqk += tl.dot((qI * later).to(DOT), ks)
        first = (rb // SB) * SB  # the first row of each row's sub-block
        partner = first[:, None] + ck[None, :] * 0
        for m in range(SB):
            # Partner row first + m loaded into each row of a [BC, K] tile (the math's layout, so no
            # exchange through shared memory; the repeated addresses hit the L1).
            kj = tl.load(k_ptr + bidx * sk_b + (t0 + i0 + partner + m) * sk_t + h * sk_h + ck[None, :],
                         mask=(i0 + partner + m) < length, other=0.0).to(tl.float32)
            kj = kj * _inv_norm(kj, L2NORM)[:, None]
            gj = tl.load(gc_base + (i0 + partner + m) * K + ck[None, :])
            e = kj * tl.exp2(tl.where((rb - first >= m)[:, None], gI - gj, float("-inf")))
            col_kk = tl.where(rb - first > m, tl.sum(kI * e, 1), 0.0)
            col_qk = tl.sum(qI * e, 1)
            at = rb[None, :] == (first + m)[:, None]
            dkk = tl.where(at, col_kk[:, None], dkk)
            dqk = tl.where(at, col_qk[:, None], dqk)
    beta = _beta(beta_ptr, bidx, t0, h, sb_b, sb_t, sb_h, ri, ri < length, BETA_SIGMOID)
    off = ri[:, None] * C + i0 + rb[None, :]
    tl.store(akk_base + off, _unit_lower_inverse(dkk * beta[:, None], rb, BC, PRECISION))
    tl.store(aqk_base + off, (dqk * scale).to(aqk_ptr.dtype.element_ty))
    # The walk's qg and kg and the solve's beta k 2^gc, row by row (gL: gc of the chunk's last row).
    g_last = tl.load(gc_base + (C - 1) * K + ck)
    decayed = tl.exp2(gI)
    tile = tiles_ptr + base * (3 * C * K) + ri[:, None] * K + ck[None, :]
    tl.store(tile, (qI * decayed * scale).to(tiles_ptr.dtype.element_ty))
    tl.store(tile + C * K, (kI * tl.exp2(g_last[None, :] - gI)).to(tiles_ptr.dtype.element_ty))
    tl.store(tile + 2 * C * K, (kI * beta[:, None] * decayed).to(tiles_ptr.dtype.element_ty))
    if I == 0:
        tl.store(decay_ptr + base * K + ck, tl.exp2(g_last))
    # Earlier rows j < i0, a block J of BC rows at a time (none for the first block):
    # Akk[t, j] = sum_c (k_t 2^(gc_t - r))[c] (k_j 2^(r - gc_j))[c] with r = gc of row i0 - 1.
    if I > 0:
        ref = tl.load(gc_base + (i0 - 1) * K + ck)
        ai = tl.exp2(gI - ref[None, :])
        ka = (kI * ai).to(DOT)
        qa = (qI * ai).to(DOT)
        for J in tl.range(0, I, num_stages=1):
            rj = J * BC + rb
            kj = _rows(k_ptr, bidx, t0, h, sk_b, sk_t, sk_h, rj, rj < length, ck)
            kj = kj * _inv_norm(kj, L2NORM)[:, None]
            kj = kj * tl.exp2(ref[None, :] - tl.load(gc_base + rj[:, None] * K + ck[None, :]))
            kj = tl.trans(kj.to(DOT))
            off = ri[:, None] * C + rj[None, :]
            tl.store(akk_base + off, tl.dot(ka, kj) * beta[:, None])
            tl.store(aqk_base + off, (tl.dot(qa, kj) * scale).to(aqk_ptr.dtype.element_ty))
    off = ri[:, None] * C + rows[None, :]  # Aqk above the diagonal block
    tl.store(aqk_base + off, tl.zeros([BC, C], dtype=aqk_ptr.dtype.element_ty), mask=(rows >= i0 + BC)[None, :])


@triton.jit
def kda_solve_kernel(
    v_ptr, beta_ptr, sv_b, sv_t, sv_h, sb_b, sb_t, sb_h, meta_ptr, akk_ptr, tiles_ptr, u_ptr, H,
    K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr,
    BETA_SIGMOID: tl.constexpr, DOT: tl.constexpr,
):
    """T = (I + beta Akk)^-1. With beta Akk = Ld + Lo (Ld inside the diagonal [BC, BC] blocks, Lo
    below them), intra leaves Dinv = (I + Ld)^-1 in the diagonal blocks of `akk` and Lo below
    them: I + Ld + Lo = (I + Lo Dinv)(I + Ld), so with P = -Lo Dinv (P^(C/BC) = 0)
    T = Dinv (I + P + ... + P^(C/BC - 1)), summed as R <- Dinv + R P from R = Dinv: the running
    R is each product's left operand and P, computed once, its right one.
    Then u and w by column blocks, w from intra's beta k 2^gc, which it replaces in `tiles`."""
    cid = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    bidx, t0, length = _chunk(meta_ptr, cid)
    rows = tl.arange(0, C)
    cb = tl.arange(0, BK)
    valid = rows < length
    base = cid * H + h
    beta = _beta(beta_ptr, bidx, t0, h, sb_b, sb_t, sb_h, rows, valid, BETA_SIGMOID)

    cc = tl.arange(0, C)
    same = (rows[:, None] // BC) == (cc[None, :] // BC)
    akk = tl.load(akk_ptr + base * (C * C) + rows[:, None] * C + cc[None, :],
                  mask=(rows[:, None] // BC) >= (cc[None, :] // BC), other=0.0)
    dinv = tl.where(same, akk, 0.0)
    p = -tl.dot(tl.where(same, 0.0, akk), dinv)
    r = dinv
    for _ in tl.static_range(C // BC - 1):
        r = tl.dot(r, p, dinv)
    tinv = r.to(DOT)
    for vb in tl.static_range(V // BK):
        v = _rows(v_ptr, bidx, t0, h, sv_b, sv_t, sv_h, rows, valid, vb * BK + cb)
        u = tl.dot(tinv, (v * beta[:, None]).to(DOT))
        tl.store(u_ptr + base * (C * V) + rows[:, None] * V + vb * BK + cb[None, :], u.to(u_ptr.dtype.element_ty))
    # w's place holds intra's beta k 2^gc until w, one column block at a time, replaces it.
    w_tile = tiles_ptr + base * (3 * C * K) + 2 * C * K + rows[:, None] * K + cb[None, :]
    for kb in tl.static_range(K // BK):
        w = tl.dot(tinv, tl.load(w_tile + kb * BK))
        tl.store(w_tile + kb * BK, w.to(tiles_ptr.dtype.element_ty))
