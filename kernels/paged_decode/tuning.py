"""Launch configurations of the paged decode, per arch: data, chosen by `kernels.arch`.

A row gives, for head sizes up to `max_head_dim`, the keys per loop step
(`block_n`), the warps per program, the software-pipelining depth and a
register cap; and for
the arch, whether the auto path may split, how many partition programs per
CU it aims for, and the dot operand dtype of fp8 caches ("fp16": two fp8
codes become two fp16 values in one instruction on Hopper, and the kernel
scales rows into fp16's range; None: the query's dtype, as for other caches).
The CPU runs the fp16 operands too, so the interpreter checks that code. `config(arch, head_dim)` picks the first row that fits; an arch
without a table gets DEFAULT. The interpreter ("cpu") takes large steps: its
cost is per step, not per key.

The sm90 rows come from `python -m bench.decode --sweep` on an H200
(bench/NOTES.md has the table they were read from).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class LaunchConfig:
    """max_head_dim: the largest head size the row serves; maxnreg: a register cap per thread
    (more programs per CU, at the price of spills), None for the compiler's choice."""

    max_head_dim: int
    block_n: int
    num_warps: int
    num_stages: int
    maxnreg: int | None = None


@dataclass(frozen=True)
class ArchTuning:
    """rows: launch configs by head size; split: the auto path may split on this arch;
    programs_per_cu: partition programs the split aims for per CU; fp8_dot: the dot operand
    dtype of fp8 caches ("fp16", or None for the query's dtype)."""

    rows: tuple
    split: bool
    programs_per_cu: int
    fp8_dot: str | None = None


TABLES = {
    "sm90": ArchTuning(rows=(LaunchConfig(128, 128, 4, 2), LaunchConfig(256, 64, 4, 2)),
                       split=True, programs_per_cu=2, fp8_dot="fp16"),
    "gfx950": ArchTuning(rows=(LaunchConfig(128, 64, 4, 2), LaunchConfig(256, 32, 4, 2)),
                         split=True, programs_per_cu=2),
    "cpu": ArchTuning(rows=(LaunchConfig(256, 256, 4, 1),), split=False, programs_per_cu=2, fp8_dot="fp16"),
}
DEFAULT = ArchTuning(rows=(LaunchConfig(128, 64, 4, 2), LaunchConfig(256, 32, 4, 2)),
                     split=False, programs_per_cu=2)


def tuning(arch: str) -> ArchTuning:
    """The table of `arch` ('sm90', 'gfx942', 'cpu', ...), DEFAULT where it has none."""
    return TABLES.get(arch, DEFAULT)


def config(arch: str, head_dim: int) -> LaunchConfig:
    """The launch config for head size `head_dim` on `arch`."""
    for row in tuning(arch).rows:
        if head_dim <= row.max_head_dim:
            return row
    raise ValueError(f"head_dim: no launch config for {head_dim} on {arch}")
