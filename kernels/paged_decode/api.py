"""Public entry of the paged decode: validation, planning and dispatch.

    out[i, p, h] = sum_j softmax_j(scale * q[i, p, h] . K_j) V_j

over the keys j that query row p of sequence i sees (DESIGN.md: row p sits at
position L - Q + p and sees [max(0, L - Q + 1 + p - W), L - Q + 1 + p), W <= 0
meaning full causal), with K_j = k_j * k_scale_j and V_j = v_j * v_scale_j
dequantized from the cache. Rows that see no key, and sequences of length 0,
give zeros.
"""

import dataclasses
import math

import torch
import triton.language as tl

from kernels import arch as _arch
from kernels import launch as _launch
from kernels.paged_decode import gluon_partition as _gluon
from kernels.paged_decode import partition as _partition
from kernels.paged_decode import plan as _plan
from kernels.paged_decode import tuning as _tuning
from kernels.paged_decode import validate as _validate
from kernels.paged_decode import workspace as _workspace

_QUERY_DTYPES = (torch.bfloat16, torch.float16)
_CACHE_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.bfloat16, torch.float16)
_OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_TL = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}
HEAD_DIMS = (64, 128, 192, 256, 512, 1024)  # 1024 with fp8 caches only
_LAYOUTS = ("shuffled", "plain")
_KERNELS = (None, *_tuning.KERNELS)


def _name(dtypes) -> str:
    return ", ".join(str(d).replace("torch.", "") for d in dtypes)


def _check_tensor(name, t, dtypes, ndims):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        raise TypeError(f"{name}: expected dtype {_name(dtypes)}, got {t.dtype}")
    if t.dim() not in ndims:
        raise ValueError(f"{name}: expected {' or '.join(map(str, ndims))} dims, got shape {tuple(t.shape)}")


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _cache_geometry(name, cache, layout, num_kv_heads, head_dim, is_value):
    """(num_blocks, block_size, strides for the kernel's address formula)."""
    x = 16 // cache.element_size()
    s = cache.stride()
    if layout == "plain":
        if cache.dim() != 4:
            raise ValueError(f"{name}: expected plain layout [num_blocks, block_size, Hkv, D], "
                             f"got shape {tuple(cache.shape)}")
        nb, bs, hkv, d = cache.shape
        geo = dict(blk=s[0], head=s[2], dhi=0, dlo=s[3], shi=0, slo=s[1], dx=head_dim, sx=bs)
    elif not is_value:
        if cache.dim() != 5 or cache.shape[4] != x:
            raise ValueError(f"{name}: expected shuffled layout [num_blocks, Hkv, D//{x}, block_size, {x}], "
                             f"got shape {tuple(cache.shape)}")
        nb, hkv, dx, bs, _ = cache.shape
        d = dx * x
        geo = dict(blk=s[0], head=s[1], dhi=s[2], dlo=s[4], shi=0, slo=s[3], dx=x, sx=bs)
    else:
        if cache.dim() != 5 or cache.shape[4] != x:
            raise ValueError(f"{name}: expected shuffled layout [num_blocks, Hkv, block_size//{x}, D, {x}], "
                             f"got shape {tuple(cache.shape)}")
        nb, hkv, bx, d, _ = cache.shape
        bs = bx * x
        geo = dict(blk=s[0], head=s[1], dhi=0, dlo=s[3], shi=s[2], slo=s[4], dx=head_dim, sx=x)
    if hkv != num_kv_heads or d != head_dim:
        raise ValueError(f"{name}: expected Hkv={num_kv_heads} and D={head_dim} (from key_cache and query), "
                         f"got Hkv={hkv}, D={d} in shape {tuple(cache.shape)}")
    if not _is_pow2(bs) or bs > 256 or (layout == "shuffled" and bs % x):
        raise ValueError(f"{name}: expected a power-of-two block_size up to 256"
                         f"{f' divisible by {x}' if layout == 'shuffled' else ''}, got {bs}")
    return nb, bs, geo


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _scale_args(name, value, device, nb, hkv, bs):
    """(per_token, strides) of one dequantization scale."""
    if value is None or _is_number(value):
        return False, (0, 0, 0)
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: expected None, a float or a float32 tensor, got {type(value).__name__}")
    if value.dtype != torch.float32:
        raise TypeError(f"{name}: expected dtype float32, got {value.dtype}")
    if value.device != device:
        raise ValueError(f"{name}: expected a tensor on {device}, got {value.device}")
    if value.numel() == 1 and value.dim() <= 1:
        return False, (0, 0, 0)
    if tuple(value.shape) != (nb, hkv, bs):
        raise ValueError(f"{name}: expected a per-tensor scale (one element) or per-token "
                         f"[num_blocks, Hkv, block_size] = {[nb, hkv, bs]}, got shape {tuple(value.shape)}")
    return True, value.stride()


_SCALES: dict = {}  # (device, stream, number) -> its one-element tensor


def _capturing(device: torch.device) -> bool:
    """Whether `device`'s current stream is capturing a CUDA graph."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _scale_tensor(value, device, stream: int) -> torch.Tensor:
    """A scale as the kernel reads it: the caller's tensor, or a one-element tensor holding a number
    (None: 1.0). That tensor is kept per (device, stream, number), filled on that stream, so every later
    call on it reads it in order (a fill costs a launch); one made under CUDA-graph capture is not
    kept, since the graph's fill runs only when the graph does."""
    if isinstance(value, torch.Tensor):
        return value
    number = 1.0 if value is None else float(value)
    key = (device, stream, number)
    kept = _SCALES.get(key)
    if kept is not None:
        return kept
    made = torch.full((1,), number, dtype=torch.float32, device=device)
    if not _capturing(device):
        if len(_SCALES) > 256:
            _SCALES.clear()
        _SCALES[key] = made
    return made


@dataclasses.dataclass(frozen=True)
class _Call:
    """What the checks of one argument signature found, and what the launch needs from them."""

    device: torch.device
    num_seqs: int
    num_q: int
    head_dim: int
    num_kv_heads: int
    group: int
    num_blocks: int
    block_size: int
    max_seq_len: int
    kgeo: dict
    vgeo: dict
    per_token: bool
    ks_st: tuple
    vs_st: tuple
    strides: tuple  # out (3), query (3), block_tables (1)
    fp8_bits: bool  # the caches are read as their uint8 codes
    data_checks: bool  # every call checks the tables and lengths on the host (kernels.arch.data_checks)
    elem: int  # the caches' element size in bytes
    dtypes: tuple  # (query, cache)
    constexprs: dict
    layout: str
    kernel: str | None  # the caller's choice: "triton", "gluon", or None (the arch's table decides)
    aligned: bool  # both caches start at a multiple of 16 bytes (part of the signature's key)
    partition: _launch.Bound | None = None  # from _bound: the launch of this signature
    workspace: tuple | None = None  # (m and l shape, acc shape, counters) of the split's scratch


_CALLS: dict = {}
# Environment the plan and the data checks read (kernels.arch.cu_count, kernels.paged_decode.plan.split_archs,
# kernels.arch.data_checks).
_PLAN_ENV = ("CU_NUM", "QUANTFLOOR_SPLIT_ARCH", "TRITON_INTERPRET", "QUANTFLOOR_VALIDATE")
_plan_env = _arch.environment(_PLAN_ENV)


def clear_plans() -> None:
    """Forget the plans and launches of every argument signature seen: the next call of each is
    checked and planned again (after a launch table changed, as `bench.decode --sweep` does)."""
    _CALLS.clear()


def dot_dtype(query_dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """Operand dtype of the decode kernel's dots (q . k and P . v) for a query of `query_dtype` on `device`.

    The query's dtype compiled (it holds the query, a cache of that dtype and every
    fp8 value exactly; P enters as two terms of bf16, one of fp16),
    fp32 under the Triton interpreter. An fp8 cache may run fp16 operands instead
    (the arch's tuning, kernels/paged_decode/tuning.py), each row scaled into fp16's
    range by a power of two: the same values of q, K and V, and P to 2^-11 of itself.
    """
    return _arch.dot_dtype(query_dtype, device)


def paged_attention_decode(out, query, key_cache, value_cache, block_tables, seq_lens, scale,
                           k_scale, v_scale, sliding_window, *, layout="shuffled", max_seq_len=None,
                           partition_size=None, force_split=None, workspace=None, validate=None, kernel=None):
    """Windowed paged decode attention over an fp8 (or bf16/fp16) KV cache; writes and returns `out`.

    query        [num_seqs, Hq, D] or [num_seqs, Q, Hq, D] (MTP), bf16 or fp16, last dim contiguous
    out          same shape as query; bf16, fp16 or fp32
    key_cache    shuffled [num_blocks, Hkv, D//x, block_size, x] or plain [num_blocks, block_size, Hkv, D]
    value_cache  shuffled [num_blocks, Hkv, block_size//x, D, x] or plain [num_blocks, block_size, Hkv, D]
                 x = 16 // element_size; fp8 e4m3fn / e4m3fnuz, or the query's dtype
    block_tables int32 [num_seqs, max_blocks]; token t of sequence i is in block block_tables[i, t // bs]
    seq_lens     int32/int64 [num_seqs], contiguous, every token counted, the current ones included
    k_scale, v_scale  None, a float, a one-element fp32 tensor, or per-token fp32 [num_blocks, Hkv, block_size]
    sliding_window  W > 0 keys per row (itself included); W <= 0: full causal
    max_seq_len  host int bounding seq_lens (no device sync); None: block_tables width * block_size
    partition_size, force_split  split-K: keys per partition (a multiple of block_size, grown when the
                 partition count is capped; None: the arch's launch table chooses); force_split
                 True/False overrides the auto gate
    workspace    None (the per-device, per-stream scratch) or a caller-owned dict, empty when first passed:
                 the entry fills it and reads it back on later calls (a split's row-tile counters in it
                 must stay as the last call left them, zero), so give one to one stream at a time
    validate     check block ids and lengths against the cache, the table and max_seq_len on the host
                 (a device sync): True/False; None follows QUANTFLOOR_VALIDATE=1. Always on under the
                 Triton interpreter. scale is checked on every call (finite and > 0).
    kernel       "triton" (kernels/paged_decode/partition.py), "gluon" (gluon_partition.py: NVIDIA GPUs whose
                 arch has a Gluon launch table, kernels/paged_decode/tuning.py) or None: the Gluon kernel
                 where the arch's table picks it, else the Triton one
    """
    if validate is not None and validate is not True and validate is not False:
        _arch.data_checks(validate)  # raises, naming the argument
    if kernel is not None and kernel != "triton" and kernel != "gluon":
        raise ValueError(f"kernel: expected one of {_KERNELS}, got {kernel!r}")
    tensors = (out, query, key_cache, value_cache, block_tables, seq_lens, k_scale, v_scale)
    key = (*_launch.signatures(tensors),
           type(scale), scale, type(sliding_window), sliding_window, layout, type(max_seq_len), max_seq_len,
           type(partition_size), partition_size, type(force_split), force_split, type(workspace), validate,
           kernel, (key_cache.data_ptr() | value_cache.data_ptr()) % 16 == 0 if isinstance(key_cache, torch.Tensor)
           and isinstance(value_cache, torch.Tensor) else None, _arch.planned_target(), *_plan_env(),
           # the modules a signature's launches come from (verify.mutants swaps them for mutated ones)
           _partition, _gluon, _plan, _tuning, _arch)
    call = _CALLS.get(key)
    if call is None:
        call = _checked(out, query, key_cache, value_cache, block_tables, seq_lens, scale, k_scale, v_scale,
                        sliding_window, layout, max_seq_len, partition_size, force_split, workspace, validate, kernel)
        if len(_CALLS) > 1024:
            _CALLS.clear()
        _CALLS[key] = call
    if call.data_checks:
        _validate.check_tables(block_tables, seq_lens, num_blocks=call.num_blocks, block_size=call.block_size,
                               max_seq_len=call.max_seq_len, window=sliding_window, num_queries=call.num_q)
    if call.num_seqs == 0:
        return out

    with _arch.on_device(call.device):
        stream = _arch.raw_stream(call.device)
        ks, vs = _scale_tensor(k_scale, call.device, stream), _scale_tensor(v_scale, call.device, stream)
        if call.workspace is not None:
            store = workspace if workspace is not None else _workspace.default_store(call.device, stream)
            m_ws, l_ws, acc_ws, count = _workspace.acquire(store, call.device, *call.workspace)
        else:
            m_ws = l_ws = acc_ws = count = out
        call.partition(out, query, key_cache, value_cache, block_tables, seq_lens, ks, vs, m_ws, l_ws, acc_ws, count,
                       stream=stream)
    return out


def _bound(call: "_Call", scale, window, partition_size, force_split, table_width) -> dict:
    """The plan of a checked signature and its launch: the partition kernel (a split one folds its
    partitions in its last program), Triton's or Gluon's, and the workspace shapes a split takes; the
    same for every call of the signature."""
    device, num_seqs, num_kv_heads, head_dim = call.device, call.num_seqs, call.num_kv_heads, call.head_dim
    kgeo, vgeo, common = call.kgeo, call.vgeo, call.constexprs
    arch = _arch.arch_name(device)
    planned = dict(num_seqs=num_seqs, num_kv_heads=num_kv_heads, max_seq_len=call.max_seq_len,
                   num_queries=call.num_q, window=window, block_size=call.block_size, partition_size=partition_size,
                   cu=_arch.cu_count(device), arch=arch, force_split=force_split, group=call.group,
                   head_dim=head_dim, elem=call.elem)
    if call.kernel is None:
        kernel, plan = _plan.auto_plan(gluon=_gluon_fault(call) is None, **planned)
    else:
        kernel, plan = call.kernel, _plan.plan_decode(**planned, kernel=call.kernel)
    rows = call.group * call.num_q
    ws_strides = (num_kv_heads * plan.p2 * rows, plan.p2 * rows, rows)
    launch = plan.launch
    programs = num_kv_heads * plan.row_tiles  # (kv head, row tile): a split's counters a sequence
    tile = dict(G=common["G"], Q=common["Q"], M_PAD=plan.m_pad, ROW_TILES=plan.row_tiles,
                D=_plan.pow2_at_least(head_dim), D_REAL=head_dim)
    constexprs = dict(**tile, DV=tile["D"] // plan.dim_slices, BLOCK_SIZE=call.block_size, BLOCK_N=launch.block_n,
                      # keys that share a cache block and sit one stride apart in both caches
                      CHUNK=min(vgeo["sx"], call.block_size, launch.block_n), K_DX=kgeo["dx"],
                      V_SX=vgeo["sx"], FP8_MODE=common["FP8_MODE"], PER_TOKEN_SCALE=call.per_token,
                      DOT=_dot(arch, kernel, *call.dtypes, device),
                      KEYS_M=launch.keys_m, SPLIT=plan.split, MERGE_ROWS=plan.merge_rows, MERGE_DIMS=plan.merge_dims,
                      MERGE_UNROLL=plan.merge_unroll)
    fn = _partition.decode_partition_kernel
    if kernel == "gluon":
        fn = _gluon.decode_partition_gluon
        constexprs.update(V_KEYS_INNER=call.layout == "shuffled", STAGES=launch.num_stages,
                          STAGED_FOLD=plan.staged_fold, SCORE_DIMS=min(tile["D"], _gluon.SCORE_DIMS),
                          NUM_WARPS=launch.num_warps)
    # the keys a table row covers, to which the kernels clamp each length; a cache of no blocks has no
    # block to clamp an id to, so there every length clamps to 0 and nothing of the cache is read
    table_keys = table_width * call.block_size if call.num_blocks else 0
    partition = _launch.Bound(fn,  # axis 1: (kv head, row tile, dim slice)
                              (num_seqs, programs * plan.dim_slices, plan.n_part), (
        *_launch.slots(12), float(scale), window, plan.part_size, call.num_blocks, table_keys,
        *call.strides, *_cache_strides(call, kernel), *call.ks_st, *call.vs_st, *ws_strides), constexprs,
        dict(num_warps=launch.num_warps, num_stages=launch.num_stages, **launch.options),
        views={2: torch.uint8, 3: torch.uint8} if call.fp8_bits else None)  # the caches as their codes
    if not plan.split:
        return dict(partition=partition, workspace=None)
    ml_shape = (num_seqs, num_kv_heads, plan.p2, rows)
    return dict(partition=partition, workspace=(ml_shape, (*ml_shape, head_dim), num_seqs * programs))


def _dot(arch: str, kernel: str, query_dtype: torch.dtype, cache_dtype: torch.dtype, device: torch.device):
    """The DOT constexpr of `kernel` on `arch`: fp16 for an fp8 cache where its table asks for it, else
    the query's dot dtype (dot_dtype)."""
    if _arch.fp8_format(cache_dtype) and _tuning.tuning(arch, kernel).fp8_dot == "fp16":
        return tl.float16
    return _TL[dot_dtype(query_dtype, device)]


def gluon_unavailable(device: torch.device) -> str | None:
    """Why the Gluon kernel (kernel="gluon") cannot run on `device`, None where it can: it is compiled
    for NVIDIA GPUs whose arch has a Gluon launch table, and the Triton interpreter cannot run it."""
    if _arch.interpreting():
        return "the Triton interpreter cannot run a Gluon kernel"
    arch = _arch.arch_name(device)
    if not _tuning.has_table(arch, "gluon"):
        return f"no Gluon launch table for {arch} (kernels/paged_decode/tuning.py has {tuple(_tuning.GLUON_TABLES)})"
    return None


def _gluon_fault(call: "_Call") -> str | None:
    """Why the Gluon kernel cannot run this signature (None: it can): gluon_unavailable, or caches
    whose 16-byte runs (the dims of a key; the keys of a value dim in the shuffled layout) do not lie
    together at 16-byte boundaries: stride 1 along the run, every other stride a multiple of its
    length, the caches 16-byte aligned."""
    unavailable = gluon_unavailable(call.device)
    if unavailable is not None:
        return unavailable
    if not call.aligned:
        return "key_cache/value_cache: the Gluon kernel copies 16-byte runs; expected 16-byte aligned caches"
    run = 16 // call.elem
    for name, geo, along in (("key_cache", call.kgeo, "dlo"),
                             ("value_cache", call.vgeo, "slo" if call.layout == "shuffled" else "dlo")):
        others = {k: geo[k] for k in ("blk", "head", "dhi", "dlo", "shi", "slo") if k != along}
        if geo[along] != 1 or any(v % run for v in others.values()):
            return (f"{name}: the Gluon kernel copies runs of {run} elements; expected stride 1 along them and "
                    f"other strides multiples of {run}, got {geo[along]} and {sorted(others.values())}")
    return None


def _cache_strides(call: "_Call", kernel: str) -> tuple:
    """The caches' strides as `kernel` takes them, K (blk, head, dhi, dlo, slo) then V (blk, head, dlo,
    shi, slo): in elements for Triton's; for Gluon's in 16-byte runs but for the run's own stride, 1
    (kernels/paged_decode/gluon_partition.py; _gluon_fault checked that they divide)."""
    k_names, v_names = ("blk", "head", "dhi", "dlo", "slo"), ("blk", "head", "dlo", "shi", "slo")
    k, v = [call.kgeo[n] for n in k_names], [call.vgeo[n] for n in v_names]
    if kernel == "gluon":
        run, v_run = 16 // call.elem, "slo" if call.layout == "shuffled" else "dlo"
        k = [s if n == "dlo" else s // run for n, s in zip(k_names, k)]
        v = [s if n == v_run else s // run for n, s in zip(v_names, v)]
    return (*k, *v)


def _checked(out, query, key_cache, value_cache, block_tables, seq_lens, scale, k_scale, v_scale,
             sliding_window, layout, max_seq_len, partition_size, force_split, workspace, validate, kernel) -> _Call:
    """Every check of the entry's arguments that their shapes, dtypes, strides, devices and host values
    decide; raises a named error, or returns what the launch needs."""
    _check_tensor("query", query, _QUERY_DTYPES, (3, 4))
    q4 = query if query.dim() == 4 else query.unsqueeze(1)
    num_seqs, num_q, num_heads, head_dim = q4.shape
    device = query.device
    if q4.stride(3) != 1:
        raise ValueError(f"query: expected the last dim contiguous (stride 1), got strides {tuple(query.stride())}")
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"query: expected head size D in {HEAD_DIMS}, got {head_dim}")
    _check_tensor("out", out, _OUT_DTYPES, (query.dim(),))
    if out.shape != query.shape or out.device != device:
        raise ValueError(f"out: expected shape {tuple(query.shape)} on {device}, "
                         f"got {tuple(out.shape)} on {out.device}")
    o4 = out if out.dim() == 4 else out.unsqueeze(1)
    if o4.stride(3) != 1:
        raise ValueError(f"out: expected the last dim contiguous (stride 1), got strides {tuple(out.stride())}")
    if layout not in _LAYOUTS:
        raise ValueError(f"layout: expected one of {_LAYOUTS}, got {layout!r}")
    _check_tensor("key_cache", key_cache, _CACHE_DTYPES, (4, 5))
    _check_tensor("value_cache", value_cache, _CACHE_DTYPES, (4, 5))
    if value_cache.dtype != key_cache.dtype:
        raise TypeError(f"value_cache: expected the dtype of key_cache ({key_cache.dtype}), got {value_cache.dtype}")
    if _arch.fp8_format(key_cache.dtype) is None and key_cache.dtype != query.dtype:
        raise TypeError(f"key_cache: a non-fp8 cache must have the query's dtype {query.dtype}, got {key_cache.dtype}")
    if head_dim > 512 and _arch.fp8_format(key_cache.dtype) is None:
        raise ValueError(f"query: head size D {head_dim} takes an fp8 cache (D up to 512 for "
                         f"{key_cache.dtype}), got D {head_dim}")
    num_kv_heads = key_cache.shape[1] if layout == "shuffled" else key_cache.shape[2]
    if num_kv_heads < 1 or num_heads % num_kv_heads:
        raise ValueError(f"query: expected Hq to be a multiple of Hkv={num_kv_heads}, got Hq={num_heads}")
    group = num_heads // num_kv_heads
    nb, bs, kgeo = _cache_geometry("key_cache", key_cache, layout, num_kv_heads, head_dim, False)
    nbv, bsv, vgeo = _cache_geometry("value_cache", value_cache, layout, num_kv_heads, head_dim, True)
    if (nbv, bsv) != (nb, bs):
        raise ValueError(f"value_cache: expected num_blocks={nb}, block_size={bs} as key_cache, got {nbv}, {bsv}")
    for name, t in (("key_cache", key_cache), ("value_cache", value_cache)):
        if t.device != device:
            raise ValueError(f"{name}: expected a tensor on {device}, got {t.device}")
    _check_tensor("block_tables", block_tables, (torch.int32,), (2,))
    _check_tensor("seq_lens", seq_lens, (torch.int32, torch.int64), (1,))
    if block_tables.shape[0] != num_seqs or seq_lens.shape[0] != num_seqs:
        raise ValueError(f"block_tables/seq_lens: expected {num_seqs} rows (num_seqs of query), "
                         f"got {block_tables.shape[0]} and {seq_lens.shape[0]}")
    for name, t in (("block_tables", block_tables), ("seq_lens", seq_lens)):
        if t.device != device:
            raise ValueError(f"{name}: expected a tensor on {device} (the query's device), got {t.device}")
    if block_tables.stride(1) != 1:
        raise ValueError(f"block_tables: expected contiguous rows, got strides {tuple(block_tables.stride())}")
    if num_seqs > 1 and seq_lens.stride(0) != 1:  # the kernels read length i at seq_lens' address + i
        raise ValueError(f"seq_lens: expected a contiguous [num_seqs] tensor (stride 1), got stride {seq_lens.stride(0)}")
    if not isinstance(scale, (int, float)) or isinstance(scale, bool):
        raise TypeError(f"scale: expected a float, got {type(scale).__name__}")
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale: expected a finite number > 0, got {scale!r}")
    if not isinstance(sliding_window, int) or isinstance(sliding_window, bool):
        raise TypeError(f"sliding_window: expected an int (<= 0 for full attention), got {sliding_window!r}")
    if max_seq_len is None:
        max_seq_len = block_tables.shape[1] * bs
    if not isinstance(max_seq_len, int) or max_seq_len < 0:
        raise ValueError(f"max_seq_len: expected a host int >= 0, got {max_seq_len!r}")
    if partition_size is not None and (not isinstance(partition_size, int) or isinstance(partition_size, bool)
                                       or partition_size < bs or partition_size % bs):
        raise ValueError(f"partition_size: expected None or a positive multiple of block_size={bs}, "
                         f"got {partition_size!r}")
    if force_split is not None and not isinstance(force_split, bool):
        raise ValueError(f"force_split: expected None, True or False, got {force_split!r}")
    if workspace is not None and not isinstance(workspace, dict):
        raise TypeError(f"workspace: expected None or a dict, got {type(workspace).__name__}")
    ks_tok, ks_st = _scale_args("k_scale", k_scale, device, nb, num_kv_heads, bs)
    vs_tok, vs_st = _scale_args("v_scale", v_scale, device, nb, num_kv_heads, bs)
    if ks_tok != vs_tok:
        raise ValueError("k_scale/v_scale: expected both per-tensor or both per-token, got one of each")
    fp8_mode = _arch.fp8_mode(key_cache.dtype, device)
    constexprs = dict(G=group, Q=num_q, FP8_MODE=fp8_mode)  # DOT: _bound's, for the kernel it runs
    call = _Call(device=device, num_seqs=num_seqs, num_q=num_q, head_dim=head_dim, num_kv_heads=num_kv_heads,
                 group=group, num_blocks=nb, block_size=bs, max_seq_len=max_seq_len, kgeo=kgeo, vgeo=vgeo,
                 per_token=ks_tok, ks_st=ks_st, vs_st=vs_st,
                 strides=(*o4.stride()[:3], *q4.stride()[:3], block_tables.stride(0)),
                 fp8_bits=fp8_mode in _arch.FP8_BITS, elem=key_cache.element_size(),
                 dtypes=(query.dtype, key_cache.dtype), layout=layout, kernel=kernel,
                 aligned=(key_cache.data_ptr() | value_cache.data_ptr()) % 16 == 0,
                 # a meta tensor holds no ids to check
                 data_checks=device.type != "meta" and _arch.data_checks(validate),
                 constexprs=constexprs)
    if kernel == "gluon" and _gluon_fault(call) is not None:
        raise ValueError(f"kernel: 'gluon' cannot run here: {_gluon_fault(call)}")
    if num_seqs == 0:
        return call
    return dataclasses.replace(call, **_bound(call, scale, sliding_window, partition_size, force_split,
                                              block_tables.shape[1]))
