"""Planner of the KDA forward: how many chunks each segment of the chunk walk holds, and whether
K1's diagonal blocks may be one product.

The unsegmented walk runs one program per (sequence, head, V block), each walking
its whole sequence serially. When those walkers cannot fill the device and some
sequence is long, the walk is cut into segments of `cps` chunks that run in
parallel (pass A), joined by a short scan (pass B) and replayed (pass C).

A walk program takes most of an SM's shared memory on sm90 (its pipelined tiles:
one program an SM), so the walk's time is its waves times a wave's chunks: the
segments are as many as fit every walker's segments into one wave of cu_count
programs. One segment more makes a second wave, which takes as long as the
first, and pass A (twice the walk's programs) one wave more as well.
"""

MAX_SEGMENT_CHUNKS = 64  # longer segments make pass A and pass C's serial walk the bound
MAX_SEGMENTS = 16  # occupancy target per sequence: beyond it pass B's chain grows for little gain
# Shorter segments pay pass A's doubled walk, the scan and two launches for too little parallelism:
# at 16 chunks (1 x 1024 x 12 on an H100, 24 walkers) the unsegmented walk took 0.91 of the time of
# 4 segments of 4 and 0.92 of 2 of 8; at 64 chunks 5 segments of 13 took 0.90 of the unsegmented's.
MIN_SEGMENT_CHUNKS = 8
# Largest |exponent| (log2) either factor of a diagonal block's one product may reach: 2^64 leaves
# fp32's (and bf16's) other 2^63 to the q and k values, and 2^-64 keeps q k products of 2^-62 normal.
DIAGONAL_EXPONENT = 64.0
LOG2_E = 1.4426950408889634


def chunks_per_segment(chunk_counts, num_heads: int, v_blocks: int, cu_count: int) -> int:
    """0 for the unsegmented walk, else the chunks per segment.

    chunk_counts: chunks of each sequence; walkers = nonempty sequences * heads *
    V blocks. Unsegmented when fewer than two segments of every walker fit in
    cu_count programs (walkers > cu_count / 2) or no sequence is longer than two
    minimum segments. Otherwise each sequence is cut into up to
    floor(cu_count / walkers) (at most MAX_SEGMENTS) segments, each of
    MIN_SEGMENT_CHUNKS to MAX_SEGMENT_CHUNKS chunks.
    """
    counts = [int(c) for c in chunk_counts]
    longest = max(counts, default=0)
    walkers = sum(1 for c in counts if c > 0) * num_heads * v_blocks
    segments = min(MAX_SEGMENTS, cu_count // walkers) if walkers else 0
    if segments < 2 or longest <= 2 * MIN_SEGMENT_CHUNKS:
        return 0
    cps = max(MIN_SEGMENT_CHUNKS, -(-longest // segments))
    return min(cps, MAX_SEGMENT_CHUNKS)


def diagonal_product(lower_bound: float | None, rows: int) -> bool:
    """Whether intra's diagonal [rows, rows] blocks may be one product through the gate r of their
    middle row (row rows/2 - 1): 2^(gc_t - gc_j) = 2^(gc_t - r) 2^(r - gc_j). Each step's log-decay
    lies in (lower_bound, 0) with gate='lower_bound' (None: any other gate, unbounded), so gc moves
    at most rows/2 steps of |lower_bound| log2(e) from r, and both factors stay within
    2^(+-DIAGONAL_EXPONENT) when rows/2 |lower_bound| log2(e) <= DIAGONAL_EXPONENT
    (|lower_bound| <= 5.545 for 16 rows). Otherwise pairs inside a block take exact exponents."""
    return lower_bound is not None and rows // 2 * -lower_bound * LOG2_E <= DIAGONAL_EXPONENT
