"""Checks of the decode entry's arguments that need the device's data.

The kernel follows `block_tables` and `seq_lens` as it finds them on the
device, each index clamped before it addresses anything (a length to the keys
its table row covers, a block id to the cache): a block id outside the cache,
a length past its table row, a negative length or one above `max_seq_len`
never sends it outside its tensors but gives a silently wrong answer.
Checking needs the tensors on the host (a device sync), so it is opt-in on a
GPU (`validate=True`, or QUANTFLOOR_VALIDATE=1 for every call) and always on
under the Triton interpreter, where a stray index is a segmentation fault.

For sequence i with L_i = seq_lens[i], bs the block size, Q query tokens and
a window W > 0 (lo_i = max(0, L_i - Q + 1 - W), the first key any row sees;
lo_i = 0 without a window):
    0 <= L_i <= max_seq_len   and   L_i <= bs * block_tables.shape[1],
    0 <= block_tables[i, j] < num_blocks   for lo_i // bs <= j < ceil(L_i / bs),
the columns the kernel reads. Columns outside them are never read: past the
sequence, or before its window (blocks a window has released may hold any id).
"""

import torch


def check_tables(block_tables: torch.Tensor, seq_lens: torch.Tensor, *, num_blocks: int, block_size: int,
                 max_seq_len: int, window: int, num_queries: int) -> None:
    """Raise a ValueError naming the argument if a length or a block id it covers is out of range."""
    lens = seq_lens.to("cpu", torch.int64)
    width = block_tables.shape[1]
    for name, bad, expected in (
        ("seq_lens", lens < 0, "lengths >= 0"),
        ("seq_lens", lens > width * block_size,
         f"lengths <= {width * block_size} (block_tables width {width} x block_size {block_size})"),
        ("max_seq_len", lens > max_seq_len, f"a bound >= every seq_lens entry, got {max_seq_len} below"),
    ):
        if bool(bad.any()):
            i = int(bad.nonzero()[0, 0])
            raise ValueError(f"{name}: expected {expected}; seq_lens[{i}] = {int(lens[i])}")
    first = (lens - num_queries + 1 - window).clamp_min(0) // block_size if window > 0 else torch.zeros_like(lens)
    cols = torch.arange(width)[None, :]
    covered = (cols >= first[:, None]) & (cols < ((lens + block_size - 1) // block_size)[:, None])
    ids = block_tables.to("cpu", torch.int64)
    bad = covered & ((ids < 0) | (ids >= num_blocks))
    if bool(bad.any()):
        i, j = (int(x) for x in bad.nonzero()[0])
        raise ValueError(f"block_tables: expected block ids in [0, {num_blocks}) in the columns the kernel reads, "
                         f"got {int(ids[i, j])} at [{i}, {j}] (seq_lens[{i}] = {int(lens[i])})")
