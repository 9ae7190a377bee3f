"""The split-K reduce, run by the last partition program of each row tile to finish.

A split launch has one program per (sequence, kv head x row tile x dim slice,
partition). Each writes its partial softmax state (m_j, l_j of its rows and,
when its partition holds a key, acc_j) to the workspace, then arrives at the
row tile's counter. The program that arrives last, having seen every other
arrival, folds the n_part partitions of the tile's rows into the output:

    m   = max_j m_j                       over partitions with l_j > 0
    l   = sum_j exp(m_j - m) * l_j
    out = sum_j exp(m_j - m) * acc_j / l  (0 where no partition saw a key)

and sets the counter back to 0 for the next launch (the counters are zero
when allocated: kernels.paged_decode.workspace). One launch does what a
partition kernel and a reduce kernel did: one launch less on the host, and no
wait for the second kernel on the device.

Ordering. A program's threads store their partials, meet at a barrier, and
one of them adds 1 to the counter with acquire-release semantics at GPU
(agent) scope: the release makes every store before the barrier visible to
whoever acquires the counter later; the last arrival's acquire makes all of
them visible to it before it loads any (a barrier, then the other threads
read what it acquired). Release and acquire are cumulative through the
barrier in the PTX and the LLVM AMDGPU memory models alike. In the binaries
(tests/test_compile.py): sm90 a bar.sync then atom.acq_rel.gpu; gfx942 the
XCD's L2 written back and waited for before the atomic and invalidated
after it. The sm90 path is what the GPU tier ran; no AMD GPU has run it.

The fold is elementwise: a step loads UNROLL partitions (independent loads,
in flight together) and merges them one after another into the running
state, so no sum crosses lanes and every lane holding a copy of a row's m and
l computes it alike (a cross-lane sum that fused a lane's own product rounded
the copies differently, and they raced to one shared address). Every
partition writes m and l of every row; its acc rows only where it holds a key
(the partition kernel's test, repeated here from the lengths), so the acc
loads are masked by that: stale or NaN scratch, and memory nothing wrote, is
never read. A row that saw no key in a partition has m_j = -inf and l_j = 0
there, and weighs 0 in the fold. m_j is in log2 units (the partition kernel
scores with exp2). The fold takes the head DB dims a pass (D // DB passes).
"""

import triton
import triton.language as tl


@triton.jit
def last_to_arrive(count_ptr, group, arrivals):
    """Whether this program is the last of `arrivals` to reach counter `group` (then reset to 0);
    every store this program's threads made before the call is visible to that last one."""
    tl.debug_barrier()
    ticket = tl.atomic_add(count_ptr + group, 1, sem="acq_rel", scope="gpu")
    last = ticket == arrivals - 1
    if last:
        tl.atomic_xchg(count_ptr + group, 0, sem="relaxed", scope="gpu")
    return last


@triton.jit
def fold_partitions(out_ptr, m_ws_ptr, l_ws_ptr, acc_ws_ptr, ws_tile, ws_part, n_part, part_base, part_size,
                    kv_hi, rows, row_ok, o_rows,
                    ROWS: tl.constexpr, D: tl.constexpr, D_REAL: tl.constexpr, DB: tl.constexpr,
                    UNROLL: tl.constexpr):
    """out[rows] from the n_part partial states of the ROWS rows `rows` (those that exist: row_ok):
    partition j's m and l at
    ws_tile + j * ws_part + rows, its acc rows D_REAL wide; partition j holds keys
    [part_base + j * part_size, ...) below kv_hi; o_rows: the rows' offsets in out_ptr."""
    for c in tl.static_range(D // DB):
        dims = c * DB + tl.arange(0, DB)
        cell_ok = row_ok[:, None]
        if D_REAL != D:
            cell_ok = cell_ok & (dims < D_REAL)[None, :]
        m_run = tl.full([ROWS], float("-inf"), tl.float32)
        l_run = tl.zeros([ROWS], tl.float32)
        acc = tl.zeros([ROWS, DB], tl.float32)
        for j0 in range(0, n_part, UNROLL):
            for u in tl.static_range(UNROLL):
                j = j0 + u + rows * 0  # per row: the interpreter makes an int of a tensor & a scalar bool
                at = ws_tile + j * ws_part + rows
                in_part = row_ok & (j < n_part)
                wrote = in_part & (part_base + j * part_size < kv_hi)  # the partition holds a key
                l_j = tl.load(l_ws_ptr + at, mask=in_part, other=0.0)
                m_j = tl.load(m_ws_ptr + at, mask=in_part, other=float("-inf"))
                acc_j = tl.load(acc_ws_ptr + at[:, None] * D_REAL + dims[None, :],
                                mask=wrote[:, None] & cell_ok, other=0.0)
                m_new = tl.maximum(m_run, m_j)
                m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
                alpha = tl.exp2(m_run - m_safe)
                beta = tl.exp2(m_j - m_safe)  # 0 where the partition's rows saw no key (m_j = -inf)
                l_run = l_run * alpha + beta * l_j
                acc = acc * alpha[:, None] + beta[:, None] * acc_j
                m_run = m_new
        out = tl.where(l_run[:, None] > 0, acc / tl.where(l_run > 0, l_run, 1.0)[:, None], 0.0)
        tl.store(out_ptr + o_rows[:, None] + dims[None, :], out.to(out_ptr.dtype.element_ty), mask=cell_ok)
