"""Segment planner of the KDA chunk walk: how many chunks each segment holds.

The unsegmented walk runs one program per (sequence, head, V block), each walking
its whole sequence serially. When those walkers cannot fill the device and some
sequence is long, the walk is cut into segments of `cps` chunks that run in
parallel (pass A), joined by a short scan (pass B) and replayed (pass C).
"""

MAX_SEGMENT_CHUNKS = 64  # longer segments make pass A and pass C's serial walk the bound
MAX_SEGMENTS = 16  # occupancy target per sequence: beyond it pass B's chain grows for little gain
MIN_SEGMENT_CHUNKS = 4  # shorter segments pay pass A's doubled walk for too little parallelism


def chunks_per_segment(chunk_counts, num_heads: int, v_blocks: int, cu_count: int) -> int:
    """0 for the unsegmented walk, else the chunks per segment.

    chunk_counts: chunks of each sequence; walkers = nonempty sequences * heads *
    V blocks. Unsegmented when the walkers fill cu_count compute units or no
    sequence is longer than two minimum segments. Otherwise each sequence is cut
    into up to ceil(cu_count / walkers) (at most MAX_SEGMENTS) segments, each of
    MIN_SEGMENT_CHUNKS to MAX_SEGMENT_CHUNKS chunks.
    """
    counts = [int(c) for c in chunk_counts]
    longest = max(counts, default=0)
    walkers = sum(1 for c in counts if c > 0) * num_heads * v_blocks
    if walkers == 0 or walkers >= cu_count or longest <= 2 * MIN_SEGMENT_CHUNKS:
        return 0
    segments = min(MAX_SEGMENTS, -(-cu_count // walkers))
    cps = max(MIN_SEGMENT_CHUNKS, -(-longest // segments))
    return min(cps, MAX_SEGMENT_CHUNKS)
