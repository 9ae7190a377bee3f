"""Public entry of the FlashKDA forward: argument checks, workspace and dispatch.

Kimi Delta Attention, time-first: q, k, g [B, T, H, K], v [B, T, H, V], beta
[B, T, H]. Per sequence and head the fp32 state S [K, V] follows, per token t,

    S <- diag(exp(g_t)) S;  S <- S + beta_t k_t (v_t - S^T k_t)^T;  o_t = scale S^T q_t.

K1 (kernels.kda.prepare: stage, intra, solve) prepares each chunk of CHUNK tokens; K2
(kernels.kda.chunk) walks the chunks, either one program per (sequence, head,
V block) or, for long sequences with few heads, in segments (pass A: each
segment's affine map, pass B: the scan over segments, pass C: the outputs).
Every kernel and host helper is reached through its module attribute at call
time, so a module can be swapped for a modified copy.
"""

import dataclasses
import math
from numbers import Integral, Real

import torch
import triton.language as tl

from kernels import arch
from kernels import launch as _launch
from kernels.kda import chunk as _chunk
from kernels.kda import meta as _meta
from kernels.kda import plan as _plan
from kernels.kda import prepare as _prepare
from kernels.kda import tuning as _tuning

CHUNK = 64  # tokens per chunk (C)
BLOCK_V = 64  # columns of the state one K2 program holds (BV)
HEAD_DIMS = (64, 128)  # supported K and V
MAX_HEADS = 65535  # grid axis 1 holds the head
GATES = {"log": _prepare.GATE_LOG, "softplus": _prepare.GATE_SOFTPLUS, "lower_bound": _prepare.GATE_LOWER_BOUND}

_IO_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_INDEX_DTYPES = (torch.int32, torch.int64)
_TL_DTYPES = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}


def _names(dtypes) -> str:
    names = [str(d).replace("torch.", "") for d in dtypes]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def _check_tensor(name, x, dtypes):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a tensor of dtype {_names(dtypes)}, got {type(x).__name__}")
    if x.dtype not in dtypes:
        raise TypeError(f"{name}: expected dtype {_names(dtypes)}, got {x.dtype}")


def _check_shape(name, x, shape, meaning):
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {list(shape)} ({meaning}), got {list(x.shape)}")


def _check_device(name, x, device):
    if x.device != device:
        raise ValueError(f"{name}: expected a tensor on {device} (the device of q), got {x.device}")


def _check_bool(name, x):
    if not isinstance(x, bool):
        raise TypeError(f"{name}: expected a bool, got {type(x).__name__}")


def _check_inputs(q, k, v, g, beta):
    for name, x, dtypes in (("q", q, _IO_DTYPES), ("v", v, _IO_DTYPES), ("g", g, _IO_DTYPES), ("beta", beta, _IO_DTYPES)):
        _check_tensor(name, x, dtypes)
    _check_tensor("k", k, (q.dtype,))
    if v.dtype != q.dtype:
        raise TypeError(f"v: expected dtype {q.dtype} (the dtype of q), got {v.dtype}")
    if q.dim() != 4:
        raise ValueError(f"q: expected 4 dimensions [B, T, H, K], got shape {list(q.shape)}")
    if v.dim() != 4:
        raise ValueError(f"v: expected 4 dimensions [B, T, H, V], got shape {list(v.shape)}")
    batch, seq_len, heads, dim_k = q.shape
    dim_v = v.shape[3]
    if dim_k not in HEAD_DIMS:
        raise ValueError(f"q: expected K = q.shape[-1] in {HEAD_DIMS}, got {dim_k}")
    if dim_v not in HEAD_DIMS:
        raise ValueError(f"v: expected V = v.shape[-1] in {HEAD_DIMS}, got {dim_v}")
    if not 1 <= heads <= MAX_HEADS:
        raise ValueError(f"q: expected 1 <= H <= {MAX_HEADS} heads, got {heads}")
    _check_shape("k", k, q.shape, "[B, T, H, K] like q")
    _check_shape("v", v, (batch, seq_len, heads, dim_v), "[B, T, H, V] with B, T, H of q")
    _check_shape("g", g, q.shape, "[B, T, H, K] like q")
    _check_shape("beta", beta, q.shape[:3], "[B, T, H]")
    for name, x in (("k", k), ("v", v), ("g", g), ("beta", beta)):
        _check_device(name, x, q.device)
    for name, x in (("q", q), ("k", k), ("v", v), ("g", g)):
        if x.stride(-1) != 1 and x.shape[-1] > 1:
            raise ValueError(f"{name}: expected stride 1 on the last dimension, got strides {list(x.stride())}")
    return batch, seq_len, heads, dim_k, dim_v


def _check_gate(gate, A_log, dt_bias, lower_bound, heads, dim_k, device):
    if gate not in GATES:
        raise ValueError(f"gate: expected one of {', '.join(map(repr, GATES))}, got {gate!r}")
    if gate == "log":
        for name, x in (("A_log", A_log), ("dt_bias", dt_bias), ("lower_bound", lower_bound)):
            if x is not None:
                raise ValueError(f"{name}: expected None with gate='log' (g is the log-decay), got {type(x).__name__}")
        return 0.0
    for name, x, shape, meaning in (("A_log", A_log, [heads], "[H]"), ("dt_bias", dt_bias, [heads * dim_k], "[H*K]")):
        if x is None:
            raise ValueError(f"{name}: expected a float32 {meaning} tensor with gate={gate!r}, got None")
        _check_tensor(name, x, (torch.float32,))
        _check_shape(name, x, shape, meaning)
        _check_device(name, x, device)
        if not x.is_contiguous():
            raise ValueError(f"{name}: expected a contiguous tensor, got strides {list(x.stride())}")
    if gate == "softplus":
        if lower_bound is not None:
            raise ValueError(f"lower_bound: expected None with gate='softplus', got {lower_bound!r}")
        return 0.0
    if not isinstance(lower_bound, Real) or isinstance(lower_bound, bool) or not -math.inf < lower_bound < 0:
        raise ValueError(f"lower_bound: expected a finite number < 0 with gate='lower_bound', got {lower_bound!r}")
    return float(lower_bound)


def _sequences(cu_seqlens, cu_seqlens_cpu, batch, seq_len, device, checked):
    """Per-sequence (first token, length) and batch row. The offsets come from cu_seqlens_cpu when
    given (no device sync), checked against cu_seqlens when `checked`."""
    if cu_seqlens is None:
        if cu_seqlens_cpu is not None:
            raise ValueError("cu_seqlens_cpu: expected None without cu_seqlens, got offsets")
        return [(0, seq_len)] * batch, list(range(batch))
    _check_tensor("cu_seqlens", cu_seqlens, _INDEX_DTYPES)
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise ValueError(f"cu_seqlens: expected a 1-D tensor [N+1] with N >= 1, got shape {list(cu_seqlens.shape)}")
    if cu_seqlens.device != device and cu_seqlens.device.type != "cpu":
        raise ValueError(f"cu_seqlens: expected a tensor on {device} (the device of q) or on the CPU, "
                         f"got {cu_seqlens.device}")
    if batch != 1:
        raise ValueError(f"q: expected batch size 1 with cu_seqlens (sequences packed on T), got {batch}")
    if cu_seqlens_cpu is None:
        cu = cu_seqlens.tolist()
    else:
        if isinstance(cu_seqlens_cpu, torch.Tensor) and cu_seqlens_cpu.device.type != "cpu":
            raise ValueError(f"cu_seqlens_cpu: expected host offsets (a list or a CPU tensor), "
                             f"got a tensor on {cu_seqlens_cpu.device}")
        try:
            cu = [int(x) for x in (cu_seqlens_cpu.tolist() if isinstance(cu_seqlens_cpu, torch.Tensor)
                                   else cu_seqlens_cpu)]
        except (TypeError, ValueError):
            raise TypeError(f"cu_seqlens_cpu: expected integer offsets (a list or a CPU tensor), "
                            f"got {cu_seqlens_cpu!r}") from None
        if len(cu) != cu_seqlens.numel():
            raise ValueError(f"cu_seqlens_cpu: expected the offsets of cu_seqlens, got {cu}")
        if checked:
            _check_offsets(cu, cu_seqlens)
    if cu[0] != 0 or cu[-1] != seq_len or any(b < a for a, b in zip(cu, cu[1:])):
        raise ValueError(f"cu_seqlens: expected non-decreasing offsets from 0 to T = {seq_len}, got {cu}")
    return [(a, b - a) for a, b in zip(cu, cu[1:])], [0] * (len(cu) - 1)


def _check_offsets(cu, cu_seqlens):
    """cu_seqlens_cpu's offsets `cu` against the values of cu_seqlens (a device sync)."""
    if list(cu) != cu_seqlens.tolist():
        raise ValueError(f"cu_seqlens_cpu: expected the offsets of cu_seqlens, got {list(cu)}")


def _check_states(initial_state, state_v_first, state_cache, state_indices, has_initial_state, n, heads, dim_k, dim_v, device):
    if initial_state is not None:
        _check_tensor("initial_state", initial_state, (torch.float32,))
        shape, meaning = ((n, heads, dim_v, dim_k), "[N, H, V, K]") if state_v_first else ((n, heads, dim_k, dim_v), "[N, H, K, V]")
        _check_shape("initial_state", initial_state, shape, meaning)
        _check_device("initial_state", initial_state, device)
    if state_cache is None:
        for name, x in (("state_indices", state_indices), ("has_initial_state", has_initial_state)):
            if x is not None:
                raise ValueError(f"{name}: expected None without state_cache, got {type(x).__name__}")
        return
    if initial_state is not None:
        raise ValueError("initial_state: expected None with state_cache (the cache holds the initial states), got a tensor")
    _check_tensor("state_cache", state_cache, (torch.float32,))
    if state_cache.dim() != 4 or tuple(state_cache.shape[1:]) != (heads, dim_v, dim_k):
        raise ValueError(f"state_cache: expected shape [slots, {heads}, {dim_v}, {dim_k}] ([slots, H, V, K]), got {list(state_cache.shape)}")
    if state_cache.stride(3) != 1:
        raise ValueError(f"state_cache: expected stride 1 on the last dimension, got strides {list(state_cache.stride())}")
    _check_device("state_cache", state_cache, device)
    if state_indices is None or has_initial_state is None:
        raise ValueError("state_indices, has_initial_state: expected [N] tensors with state_cache, got None")
    _check_tensor("state_indices", state_indices, _INDEX_DTYPES)
    _check_shape("state_indices", state_indices, [n], "[N], one slot per sequence")
    if n > 1 and state_indices.stride(0) != 1:  # the walk reads slot n at state_indices' address + n
        raise ValueError(f"state_indices: expected a contiguous [N] tensor (stride 1), got stride {state_indices.stride(0)}")
    _check_device("state_indices", state_indices, device)
    _check_tensor("has_initial_state", has_initial_state, (torch.bool,))
    _check_shape("has_initial_state", has_initial_state, [n], "[N], one flag per sequence")
    _check_device("has_initial_state", has_initial_state, device)


def _check_slots(state_indices, num_slots):
    """The paged state's slots: distinct and in [0, num_slots) (read on the host: a device sync)."""
    slots = state_indices.tolist()
    if any(not 0 <= s < num_slots for s in slots) or len(set(slots)) != len(slots):
        raise ValueError(f"state_indices: expected distinct slots in [0, {num_slots}), got {slots}")


def _buffers(workspace, layouts, device) -> dict:
    """{name: workspace[name]} for each (elements, dtype) of `layouts`, (re)allocated where missing
    or too small: flat buffers of at least that many elements. The kernels index each from its base
    pointer (the layouts in kernels.kda.prepare), so a call passes it whole, without a view a call."""
    got = {}
    for name, (need, dtype) in layouts.items():
        buf = workspace.get(name)
        if buf is None or buf.dtype != dtype or buf.device != device or buf.numel() < need:
            buf = workspace[name] = torch.empty(max(need, 1), dtype=dtype, device=device)
        got[name] = buf
    return got


def _contiguous(shape):
    """The strides of a contiguous tensor of `shape` (torch's, from a meta tensor)."""
    return torch.empty(shape, device="meta").stride()


def _layout(shape, dtype):
    """(elements, dtype) of a workspace buffer holding a contiguous [shape]."""
    return math.prod(shape), dtype


def _state_strides(x, v_first):
    """(n, h, k, v) element strides of a dense state tensor."""
    s = x.stride()
    return (s[0], s[1], s[3], s[2]) if v_first else s


def dot_dtype(device: torch.device) -> torch.dtype:
    """Operand dtype of the chunk walk's dots on `device`, whatever the input dtype.

    Both outputs come out of those dots (o = qg S + Aqk U; S <- decay S + kg^T U,
    with U = u - w S and S rounded to it as an operand), and w, u out of T = (I + Akk)^-1
    rounded to it: bf16 compiled, fp32 under the Triton interpreter (whose dots are
    fp32 whatever input_precision asks for).
    """
    return arch.dot_dtype(torch.bfloat16, device)


def _offsets_key(cu_seqlens, cu_seqlens_cpu):
    """The sequence offsets a call plans with, as a key (reading cu_seqlens without a host copy is
    a device sync); None where they cannot be read (the checks then name the argument)."""
    try:
        if cu_seqlens_cpu is not None:
            if isinstance(cu_seqlens_cpu, torch.Tensor):
                return tuple(cu_seqlens_cpu.tolist()) if cu_seqlens_cpu.device.type == "cpu" else None
            offsets = tuple(cu_seqlens_cpu)
            hash(offsets)  # entries a key cannot hold are left to the checks
            return offsets
        if isinstance(cu_seqlens, torch.Tensor) and cu_seqlens.dim() == 1 and cu_seqlens.device.type != "meta":
            return tuple(cu_seqlens.tolist())
    except (TypeError, ValueError, RuntimeError):
        pass
    return None


@dataclasses.dataclass(frozen=True)
class _Call:
    """What the checks of one argument signature found, and its launches (kernels.launch.Bound, the
    tensors of a call in their SLOTs): K1's stage, intra and solve (None without chunks); the walk,
    and for a segmented walk pass A (transition) and pass B (scan)."""

    device: torch.device
    dtype: torch.dtype
    o_shape: tuple
    final_shape: tuple | None
    buffers: dict  # workspace name -> its buffer's _layout
    offsets: tuple | None  # cu_seqlens_cpu's offsets, checked against cu_seqlens on every call (validate)
    slots: int | None  # the paged state's slot count, its indices checked on every call (None: no check)
    stage: _launch.Bound | None
    intra: _launch.Bound | None
    solve: _launch.Bound | None
    transition: _launch.Bound | None
    scan: _launch.Bound | None
    walk: _launch.Bound


_CALLS: dict = {}
# Environment the checks and the plan read (kernels.arch.cu_count, interpreting and data_checks).
_PLAN_ENV = ("CU_NUM", "TRITON_INTERPRET", "QUANTFLOOR_VALIDATE")
_plan_env = arch.environment(_PLAN_ENV)


@arch.on_first_tensors_device
def flash_kda_fwd(
    q, k, v, g, beta, *, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None,
    gate="log", A_log=None, dt_bias=None, lower_bound=None, beta_sigmoid=False, qk_l2norm=False,
    state_v_first=False, state_cache=None, state_indices=None, has_initial_state=None,
    chunks_per_segment=None, workspace=None, out=None, cu_seqlens_cpu=None, validate=None,
):
    """KDA forward. Returns (o, final_state).

    o [B, T, H, V] in q.dtype (written into `out` when given). final_state fp32
    [N, H, K, V] ([N, H, V, K] when state_v_first) when output_final_state, else
    None; initial_state in that layout. Paged: sequence n starts from
    state_cache[state_indices[n]] ([slots, H, V, K]; state_indices a contiguous [N]) when has_initial_state[n], else
    from zeros, and its final state is written back into that slot. cu_seqlens
    [N+1] (B == 1) packs sequences on T; it is read on the host only, so it may live on the CPU
    (which spares a device sync). chunks_per_segment: None lets the planner
    choose, 0 forces the unsegmented walk, n >= 1 segments of n chunks. workspace:
    a dict that keeps the scratch tensors between calls. cu_seqlens_cpu: the same
    offsets on the host (a list or CPU tensor), so planning reads no device memory;
    validate (None follows QUANTFLOOR_VALIDATE=1, always on under the interpreter)
    checks them against cu_seqlens. A call that copies nothing from the host (no
    cu_seqlens, or cu_seqlens_cpu given; no paged state, whose slots are checked on
    the host) can be captured in a CUDA graph once a call of its shapes has run.
    With gate='log', g must be
    <= 0 (not checked: that would cost a pass over g). The kernels run on q's device,
    whichever device is current. The checks, the plan and the launches of an argument
    signature (dtypes, shapes, strides and devices of the tensors, the host values and the
    offsets) are kept: a later call of it checks again only what device tensors hold (the
    offsets against cu_seqlens where checked, the paged state's slots).
    """
    if validate is not None and validate is not True and validate is not False:
        arch.data_checks(validate)  # raises, naming the argument
    offsets = _offsets_key(cu_seqlens, cu_seqlens_cpu)
    key = (*_launch.signatures((q, k, v, g, beta, A_log, dt_bias, initial_state, state_cache, state_indices,
                                has_initial_state, out, cu_seqlens, cu_seqlens_cpu if offsets is None else None,
                                scale, output_final_state, gate, lower_bound, beta_sigmoid, qk_l2norm,
                                state_v_first, chunks_per_segment)),
           offsets, type(workspace), validate, arch.planned_target(), *_plan_env(),
           # the modules a signature's launches come from (verify.mutants swaps them for mutated ones)
           _prepare, _chunk, _meta, _plan, _tuning, _launch, arch)
    call = _CALLS.get(key)
    if call is None:
        call = _checked(q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens, gate, A_log,
                        dt_bias, lower_bound, beta_sigmoid, qk_l2norm, state_v_first, state_cache, state_indices,
                        has_initial_state, chunks_per_segment, workspace, out, cu_seqlens_cpu, validate)
        if len(_CALLS) > 1024:
            _CALLS.clear()
        _CALLS[key] = call
    else:  # what the values of device tensors decide, checked again on every call
        if call.offsets is not None:
            _check_offsets(call.offsets, cu_seqlens)
        if call.slots is not None:
            _check_slots(state_indices, call.slots)
    device = call.device
    if out is None:
        out = torch.empty(call.o_shape, dtype=call.dtype, device=device)
    final = None if call.final_shape is None else torch.empty(call.final_shape, dtype=torch.float32, device=device)
    workspace = {} if workspace is None else workspace
    ws = _buffers(workspace, call.buffers, device)
    init = initial_state if initial_state is not None else out
    fin = final if final is not None else out
    state = (state_cache, state_indices, has_initial_state.to(torch.int32)) if state_cache is not None else (out,)
    tiles, u, aqk, decay = ws["tiles"], ws["u"], ws["aqk"], ws["decay"]
    stream = arch.raw_stream(device)
    if call.stage is not None:
        gc, akk = ws["gates"], ws["akk"]
        call.stage(g, A_log if A_log is not None else g, dt_bias if dt_bias is not None else g, gc, stream=stream)
        call.intra(q, k, beta, gc, akk, aqk, tiles, decay, stream=stream)
        call.solve(v, beta, akk, tiles, u, stream=stream)
    if call.transition is None:
        call.walk(out, tiles, u, aqk, decay, out, init, fin, *state, stream=stream)
    else:
        ms, s_in = ws["transition"], ws["segment_state"]
        call.transition(tiles, u, aqk, decay, ms, stream=stream)
        call.scan(ms, s_in, init, *state, stream=stream)
        call.walk(out, tiles, u, aqk, decay, s_in, init, fin, *state, stream=stream)
    return out, final


def _checked(q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens, gate, A_log, dt_bias,
             lower_bound, beta_sigmoid, qk_l2norm, state_v_first, state_cache, state_indices, has_initial_state,
             chunks_per_segment, workspace, out, cu_seqlens_cpu, validate) -> _Call:
    """Every check of the entry's arguments that their shapes, dtypes, strides, devices, host values
    and offsets decide; raises a named error, or returns the signature's plan and launches."""
    batch, seq_len, heads, dim_k, dim_v = _check_inputs(q, k, v, g, beta)
    device = q.device
    lower = _check_gate(gate, A_log, dt_bias, lower_bound, heads, dim_k, device)
    if scale is None:
        scale = dim_k**-0.5
    elif not isinstance(scale, Real) or isinstance(scale, bool):
        raise TypeError(f"scale: expected a real number or None, got {type(scale).__name__}")
    elif not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale: expected a finite number > 0 or None, got {scale!r}")
    for name, flag in (("output_final_state", output_final_state), ("beta_sigmoid", beta_sigmoid),
                       ("qk_l2norm", qk_l2norm), ("state_v_first", state_v_first)):
        _check_bool(name, flag)
    checked = arch.data_checks(validate)
    bounds, rows = _sequences(cu_seqlens, cu_seqlens_cpu, batch, seq_len, device, checked)
    n = len(bounds)
    _check_states(initial_state, state_v_first, state_cache, state_indices, has_initial_state, n, heads, dim_k, dim_v, device)
    # a meta tensor holds no slots to check
    paged_slots = state_cache.shape[0] if state_cache is not None and state_indices.device.type != "meta" else None
    if paged_slots is not None:
        _check_slots(state_indices, paged_slots)
    if chunks_per_segment is not None and (not isinstance(chunks_per_segment, Integral) or isinstance(chunks_per_segment, bool) or chunks_per_segment < 0):
        raise ValueError(f"chunks_per_segment: expected None or an int >= 0, got {chunks_per_segment!r}")
    if workspace is not None and not isinstance(workspace, dict):
        raise TypeError(f"workspace: expected a dict or None, got {type(workspace).__name__}")
    o_shape = (batch, seq_len, heads, dim_v)
    if out is None:
        o_strides = _contiguous(o_shape)
    else:
        _check_tensor("out", out, (q.dtype,))
        _check_shape("out", out, o_shape, "[B, T, H, V]")
        _check_device("out", out, device)
        if out.stride(-1) != 1:
            raise ValueError(f"out: expected stride 1 on the last dimension, got strides {list(out.stride())}")
        o_strides = out.stride()

    v_blocks = dim_v // BLOCK_V
    chunk_meta, first = _meta.chunks(bounds, rows, CHUNK, seq_len, device)
    counts = [b - a for a, b in zip(first, first[1:])]
    cps = chunks_per_segment
    if cps is None:
        cps = _plan.chunks_per_segment(counts, heads, v_blocks, arch.cu_count(device))
    unit_meta, seg_off_t = _meta.units(first, int(cps), device)
    nc, nu = chunk_meta.shape[0], unit_meta.shape[0]
    arch_name = arch.arch_name(device)
    configs = _tuning.config(arch_name, dim_k)
    table = _tuning.tuning(arch_name)
    dot = dot_dtype(device)
    dot_tl = _TL_DTYPES[dot]
    buffers = dict(tiles=_layout((nc, heads, 3, CHUNK, dim_k), dot), u=_layout((nc, heads, CHUNK, dim_v), dot),
                   aqk=_layout((nc, heads, CHUNK, CHUNK), dot), decay=_layout((nc, heads, dim_k), torch.float32))
    final_shape = None
    if output_final_state:
        final_shape = (n, heads, dim_v, dim_k) if state_v_first else (n, heads, dim_k, dim_v)
    if state_cache is not None:
        init_mode = _chunk.INIT_PAGED
    elif initial_state is not None:
        init_mode = _chunk.INIT_DENSE
    else:
        init_mode = _chunk.INIT_ZERO
    init_strides = _state_strides(initial_state, state_v_first) if initial_state is not None else (0, 0, 0, 0)
    fin_strides = (0, 0, 0, 0)
    if final_shape is not None:
        fin_strides = _state_strides(torch.empty(final_shape, device="meta"), state_v_first)
    cache_strides = state_cache.stride()[:3] if state_cache is not None else (0, 0, 0)
    S = _launch.SLOT
    # Slots a call fills: the initial state (or a stand-in); the paged cache, its slots and their
    # flags, or without one a stand-in cache and the unit table in place of slots and flags.
    state_args = (S, *init_strides)
    if state_cache is not None:
        cache_args = (S, *cache_strides, S, S, state_cache.shape[0])
    else:
        cache_args = (S, *cache_strides, unit_meta, unit_meta, 1)

    stage = intra = solve = transition = scan = None
    if nc:
        sub = _tuning.SUB_BLOCK
        buffers.update(gates=_layout((nc, heads, CHUNK, dim_k), torch.float32),
                       akk=_layout((nc, heads, CHUNK, CHUNK), torch.float32))
        stage = _launch.Bound(_prepare.kda_stage_kernel, (nc, heads), (
            S, S, S, *g.stride()[:3], chunk_meta, S, heads, lower),
            dict(K=dim_k, C=CHUNK, BK=min(configs.stage_columns, dim_k), GATE=GATES[gate]),
            configs.stage.options)
        intra = _launch.Bound(_prepare.kda_intra_kernel, (nc * (CHUNK // sub), heads), (
            S, S, S, *q.stride()[:3], *k.stride()[:3], *beta.stride()[:3], chunk_meta, S, S, S, S, S, heads,
            float(scale)),
            dict(K=dim_k, C=CHUNK, BC=sub, SB=configs.exact_rows,
                 ONE_PRODUCT=_plan.diagonal_product(lower if gate == "lower_bound" else None, sub),
                 L2NORM=qk_l2norm, BETA_SIGMOID=beta_sigmoid, PRECISION=table.solve_precision, DOT=dot_tl),
            configs.intra.options)
        solve = _launch.Bound(_prepare.kda_solve_kernel, (nc, heads), (
            S, S, *v.stride()[:3], *beta.stride()[:3], chunk_meta, S, S, S, heads),
            dict(K=dim_k, V=dim_v, C=CHUNK, BC=sub, BK=min(configs.columns, dim_k, dim_v),
                 BETA_SIGMOID=beta_sigmoid, DOT=dot_tl),
            configs.solve.options)

    out_args = (S, *o_strides[:3], chunk_meta, unit_meta, S, S, S, S)
    common = dict(K=dim_k, V=dim_v, C=CHUNK, BV=BLOCK_V)
    if cps:
        buffers.update(transition=_layout((nu, heads, dim_k, dim_k + dim_v), torch.float32),
                       segment_state=_layout((nu, heads, dim_k, dim_v), torch.float32))
        transition = _launch.Bound(_chunk.kda_transition_kernel, (nu * ((dim_k + dim_v) // BLOCK_V), heads), (
            unit_meta, S, S, S, S, S, heads),
            dict(common, DOT=dot_tl), configs.transition.options)
        scan = _launch.Bound(_chunk.kda_scan_kernel, (n, heads, dim_v // configs.scan_columns), (
            seg_off_t, S, S, *state_args, *cache_args, heads),
            dict(K=dim_k, V=dim_v, BV=configs.scan_columns, INIT=init_mode, PRECISION=table.scan_precision),
            configs.scan.options)
    # The walk starts each unit from its state: pass B's segment states (segmented), else the initial.
    walk = _launch.Bound(_chunk.kda_walk_kernel, (nu * v_blocks, heads), (
        *out_args, S, *state_args, S, *fin_strides, *cache_args, heads),
        dict(common, SEGMENTED=bool(cps), INIT=_chunk.INIT_ZERO if cps else init_mode, PAGED=state_cache is not None,
             DENSE_OUT=final_shape is not None, DOT=dot_tl), configs.walk.options)
    offsets = None
    if checked and cu_seqlens is not None and cu_seqlens_cpu is not None:
        offsets = (*(bos for bos, _ in bounds), seq_len)
    return _Call(device=device, dtype=q.dtype, o_shape=o_shape, final_shape=final_shape, buffers=buffers,
                 offsets=offsets, slots=paged_slots, stage=stage, intra=intra, solve=solve,
                 transition=transition, scan=scan, walk=walk)
