"""Split-K planning for the paged decode: whether to split, and how.

A program of the one-pass kernel walks every key its (sequence, kv head)
attends. The split spreads that walk over partitions when it pays:

- keys attended per sequence: eff = min(max_seq_len, W + Q - 1) for a window
  W > 0, else max_seq_len; the walk starts at a cache-block boundary, so the
  partitions must cover eff + block_size - 1 keys;
- auto mode splits only on an allowed arch (those whose table in
  `kernels.paged_decode.tuning` says so; `QUANTFLOOR_SPLIT_ARCH`, a comma
  list, overrides them) and only when the grid of num_seqs * Hkv programs
  underfills the device, or holds fewer programs per CU than the launch
  config's `min_programs`, or the walk is long (at least the launch config's
  `long_walk`, else LONG_WALK_PARTS, partitions of `partition_size`);
- `partition_size` is the caller's, else the launch config's, else
  tuning.PARTITION_SIZE (never below a cache block);
- the partition count is capped near the arch's programs per CU; when capped, the
  partition grows (block aligned, never below `partition_size`) so that the
  partitions still cover every key;
- the workspace's partition dim is the count rounded up to a power of two;
- the fold of a split (in the last partition program of each row tile) holds the
  tile's rows that can exist, takes the arch table's `merge_dims` dims a pass and
  loads partitions of at most `merge_block` elements a warp a step (or takes them through
  shared memory where that would take at least the launch config's `staged_fold` steps);
- a split launch asks for its launch config's `split_waves_per_eu`, where it has one
  (AMD: the waves per SIMD the compiler leaves room for);
- the query split (MTP, any mode): a kv head's G * Q rows run as tiles of at
  most `tile_rows(D)` rows; when even so the sequences' programs would leave
  CUs idle, the tiles shrink to the rows of fewer query positions (down to the
  fewest rows a tile holds, or the G rows of one position), so one sequence's
  query positions spread over more programs;
- a head wider than the launch config's `slice_dims` runs as slices of that
  many dims (each its own program, scoring the whole head), counted in the grid;
- the launch config (`kernels.paged_decode.tuning`, the table of the kernel planned
  for: Triton's or Gluon's) is chosen by head size,
  rows a program, cache element size, the keys each CU walks and the (sequence,
  kv head) pairs per CU, and, for a one-pass launch, the programs per CU its grid
  holds (a split makes its own);
  a tile holds at least 16 rows (the MMA's M), or 8 where the config puts the
  keys in M and the rows in N.
"""

import dataclasses
import os
from dataclasses import dataclass

from kernels.paged_decode import tuning

LONG_WALK_PARTS = 8


@dataclass(frozen=True)
class DecodePlan:
    """split: partitions whose last program folds them; n_part partitions of part_size keys;
    p2: the workspace's partition dim (next power of two of n_part); the G * Q query rows of a
    kv head run as row_tiles tiles of m_pad rows (row_tiles and the query split), each as
    dim_slices programs of dims // dim_slices output dims; launch: the partition kernel's launch
    config; the fold (split only, else 0): the tile's merge_rows rows that can exist (a power of two
    up to m_pad), merge_dims dims a pass, merge_unroll partitions a step, or through shared memory
    (staged_fold: where n_part takes at least the launch config's staged_fold steps of merge_unroll)."""

    split: bool
    n_part: int
    part_size: int
    p2: int
    m_pad: int
    row_tiles: int
    launch: tuning.LaunchConfig
    merge_rows: int = 0
    merge_dims: int = 0
    merge_unroll: int = 0
    dim_slices: int = 1
    staged_fold: bool = False


def auto_plan(*, gluon: bool, **planned) -> tuple[str, DecodePlan]:
    """(kernel, plan) the auto path runs for plan_decode's arguments `planned`: the Gluon kernel's
    plan where it can run (`gluon`) and its table picks the row it chose, else the Triton kernel's."""
    if gluon:
        plan = plan_decode(**planned, kernel="gluon")
        if plan.launch.picked:
            return "gluon", plan
    return "triton", plan_decode(**planned, kernel="triton")


def split_archs(kernel: str = "triton") -> tuple[str, ...]:
    """The archs where the auto path may split `kernel`'s walk."""
    env = os.environ.get("QUANTFLOOR_SPLIT_ARCH")
    if env is None:
        tables = tuning.GLUON_TABLES if kernel == "gluon" else tuning.TABLES
        return tuple(arch for arch, table in tables.items() if table.split)
    return tuple(a.strip() for a in env.split(",") if a.strip())


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def pow2_at_least(n: int) -> int:
    """The smallest power of two >= n (a tile's width for a head size n: 192 -> 256)."""
    return 1 << max(0, (n - 1).bit_length())


TILE_ROWS = 64  # the most query rows (of the G * Q of a kv head) one program holds up to D 256
LEAST_ROWS = 16  # the fewest rows of a tile: the MMA's M (rows as M)
LEAST_ROWS_N = 8  # ... and its N (keys as M: LaunchConfig.keys_m)


def tile_rows(head_dim: int) -> int:
    """The most query rows a program holds at head size D: TILE_ROWS up to D 256, then fewer, so
    that its fp32 accumulator [rows, D] stays at 64 x 256 elements (32 rows at D 512, 16 at 1024)."""
    return TILE_ROWS if head_dim <= 256 else max(16, TILE_ROWS * 256 // head_dim)


def slices(head_dim: int, launch: tuning.LaunchConfig) -> int:
    """The dim slices a head of size head_dim runs as with launch config `launch` (1: whole)."""
    width = pow2_at_least(head_dim)
    return width // launch.slice_dims if launch.slice_dims and launch.slice_dims < width else 1


def row_tiles(rows: int, head_dim: int, least: int = LEAST_ROWS) -> tuple[int, int]:
    """(M_PAD, tiles): the G * Q query rows of a kv head cut into tiles of M_PAD rows, M_PAD a power
    of two from `least` (the MMA's M or N) to tile_rows(head_dim); the last tile is masked."""
    m_pad = max(least, 1 << (min(rows, tile_rows(head_dim)) - 1).bit_length())
    return m_pad, -(-rows // m_pad)


def plan_decode(*, num_seqs: int, num_kv_heads: int, max_seq_len: int, num_queries: int,
                window: int, block_size: int, partition_size: int | None, cu: int, arch: str,
                force_split: bool | None, group: int = 1, head_dim: int = 128, elem: int = 1,
                kernel: str = "triton") -> DecodePlan:
    """Choose the row tiles (the query split), the launch config, one-pass or split, the partition
    count and size. A sequence runs num_kv_heads * row_tiles programs a partition; `elem` is the
    cache's element size in bytes; partition_size None: the launch config's (or PARTITION_SIZE);
    `kernel` ('triton' or 'gluon'): whose launch table the configs come from."""
    rows = group * num_queries
    eff = min(max_seq_len, window + num_queries - 1) if window > 0 else max_seq_len
    work = num_seqs * num_kv_heads * eff // max(cu, 1)  # keys each CU walks
    heads = num_seqs * num_kv_heads / max(cu, 1)  # (sequence, kv head) pairs a CU

    def tiled(programs: float) -> tuple[int, int, tuning.LaunchConfig]:
        """(m_pad, tiles, launch config) with `programs` programs per CU to spread the keys over."""
        first = tuning.config(arch, head_dim, min(rows, tile_rows(head_dim)), elem, work, programs, kernel, heads)
        least = LEAST_ROWS_N if first.keys_m else LEAST_ROWS
        m_pad, tiles = row_tiles(rows, head_dim, least)
        if num_queries > 1 and num_seqs * num_kv_heads * tiles < cu:
            # query split: too few programs for the device; a tile of the rows of fewer query positions
            q_pad = max(least, pow2_at_least(group))
            if q_pad < m_pad:
                m_pad, tiles = q_pad, _cdiv(rows, q_pad)
        return m_pad, tiles, tuning.config(arch, head_dim, m_pad, elem, work, programs, kernel, heads)

    m_pad, tiles, launch = tiled(float("inf"))  # a split makes programs enough for any row
    if partition_size is None:
        partition_size = max(block_size, launch.partition_size or tuning.PARTITION_SIZE)
    span = max(eff, 1) + block_size - 1
    n_full = _cdiv(span, partition_size)
    n_slices = slices(head_dim, launch)
    grid = max(num_seqs * num_kv_heads * tiles * n_slices, 1)
    split = force_split is not False
    if force_split is None:
        wanted = grid < cu or n_full >= (launch.long_walk or LONG_WALK_PARTS) or grid < launch.min_programs * cu
        split = arch in split_archs(kernel) and n_full >= 2 and wanted
    if not split:
        if grid < launch.min_programs * cu:  # a one-pass launch has only its grid to spread the keys
            m_pad, tiles, launch = tiled(grid / max(cu, 1))
        return DecodePlan(split=False, n_part=1, part_size=_cdiv(span, block_size) * block_size, p2=1,
                          m_pad=m_pad, row_tiles=tiles, launch=launch, dim_slices=slices(head_dim, launch))
    n_part = min(n_full, max(2, tuning.programs_per_cu(arch, launch, kernel) * cu // grid))
    part = max(partition_size, _cdiv(_cdiv(span, n_part), block_size) * block_size)
    table = tuning.tuning(arch, kernel)
    dims = min(pow2_at_least(head_dim), table.merge_dims)
    # the fold holds only rows that exist (GQA 4, one query: 4 of a tile of 8 or 16)
    fold_rows = min(m_pad, pow2_at_least(rows))
    # partitions a fold step loads: a power of two, within the table's block, no more than there are
    fits = max(1, table.merge_block * launch.num_warps // (fold_rows * dims))
    unroll = min(pow2_at_least(n_part), 1 << (fits.bit_length() - 1))
    if launch.split_waves_per_eu is not None:
        launch = dataclasses.replace(launch, waves_per_eu=launch.split_waves_per_eu)
    staged = launch.staged_fold is not None and _cdiv(n_part, unroll) >= launch.staged_fold
    return DecodePlan(split=True, n_part=n_part, part_size=part, p2=pow2_at_least(n_part), m_pad=m_pad,
                      row_tiles=tiles, launch=launch, merge_rows=fold_rows, merge_dims=dims, merge_unroll=unroll,
                      dim_slices=n_slices, staged_fold=staged)
