"""Kimi Delta Attention (KDA) forward in float64: the token recurrence, readable as math.

Layouts are time-first: q, k and g are [B, T, H, K], v is [B, T, H, V], beta is [B, T, H].
Per sequence and head the state S is a K x V matrix and, for every token t,

    S   <- diag(exp(g_t)) S                       (decay first)
    S   <- S + beta_t k_t (v_t - S^T k_t)^T       (delta-rule update second)
    o_t  = scale * S^T q_t                        (output last)

with g_t <= 0 the per-channel log-decay and scale K ** -0.5 unless given.

Sequences: without cu_seqlens each batch row is one sequence (N = B). With
cu_seqlens [N+1] (then B == 1) sequence n is tokens [cu[n], cu[n+1]); an empty
sequence is legal and its final state is its initial state.

States: dense [N, H, K, V] (state_v_first: [N, H, V, K]) through initial_state and
the returned final state; or a paged cache [slots, H, V, K] (always V-first, any
stride(0)) through state_cache, state_indices [N] and has_initial_state [N]:
sequence n starts from slot state_indices[n] when has_initial_state[n], else from
zeros, and its final state goes back into that slot. The reference never writes
into its arguments: for a paged cache it returns an updated copy of the whole cache.
"""

from dataclasses import dataclass
from numbers import Real

import torch

GATES = ("log", "softplus", "lower_bound")
L2NORM_EPS = 1e-6

_FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)
_INT_DTYPES = (torch.int32, torch.int64)


def _type_name(x) -> str:
    return f"a tensor of {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__


def _require_tensor(name: str, x, dtypes, what: str) -> None:
    if not isinstance(x, torch.Tensor) or x.dtype not in dtypes:
        raise TypeError(f"{name}: expected a tensor of dtype {what}, got {_type_name(x)}")


def _require_float(name: str, x) -> None:
    _require_tensor(name, x, _FLOAT_DTYPES, "bfloat16, float16, float32 or float64")


def _require_int(name: str, x) -> None:
    _require_tensor(name, x, _INT_DTYPES, "int32 or int64")


def _require_shape(name: str, x: torch.Tensor, expected, meaning: str) -> None:
    if tuple(x.shape) != tuple(expected):
        raise ValueError(f"{name}: expected shape {list(expected)} ({meaning}), got {list(x.shape)}")


def _require_device(name: str, x: torch.Tensor, device: torch.device) -> None:
    if x.device != device:
        raise ValueError(f"{name}: expected a tensor on {device} (the device of q), got {x.device}")


def gate_log_decay(g, *, gate, A_log=None, dt_bias=None, lower_bound=None) -> torch.Tensor:
    """The per-channel log-decay [B, T, H, K] in float64, from g and the gate mode.

    gate="log"        : g is the log-decay already (every element <= 0), returned as float64.
    gate="softplus"   : -exp(A_log[h]) * softplus(g[..., h, c] + dt_bias[h*K + c]).
    gate="lower_bound": lower_bound * sigmoid(exp(A_log[h]) * (g[..., h, c] + dt_bias[h*K + c])),
                        with lower_bound < 0, so every decay lies in [lower_bound, 0].
    A_log is [H] and dt_bias is [H*K]; both are required by the last two modes and
    refused by "log", as lower_bound is outside "lower_bound".
    """
    _require_float("g", g)
    if g.dim() != 4:
        raise ValueError(f"g: expected 4 dimensions [B, T, H, K], got shape {list(g.shape)}")
    if gate not in GATES:
        raise ValueError(f"gate: expected one of {', '.join(map(repr, GATES))}, got {gate!r}")
    if gate != "lower_bound" and lower_bound is not None:
        raise ValueError(f"lower_bound: expected None with gate={gate!r}, got {lower_bound!r}")
    g = g.to(torch.float64)
    if gate == "log":
        for name, arg in (("A_log", A_log), ("dt_bias", dt_bias)):
            if arg is not None:
                raise ValueError(f"{name}: expected None with gate='log' (g is the log-decay), got {_type_name(arg)}")
        if bool((g > 0).any()):
            raise ValueError(f"g: expected a log-decay <= 0 with gate='log', got a maximum of {g.max().item()!r}")
        return g
    heads, dim = g.shape[2], g.shape[3]
    for name, arg, shape, meaning in (
        ("A_log", A_log, [heads], "[H]"),
        ("dt_bias", dt_bias, [heads * dim], "[H*K]"),
    ):
        if arg is None:
            raise ValueError(f"{name}: expected a {meaning} tensor with gate={gate!r}, got None")
        _require_float(name, arg)
        _require_shape(name, arg, shape, meaning)
        _require_device(name, arg, g.device)
    rate = A_log.to(torch.float64).exp().view(heads, 1)
    x = g + dt_bias.to(torch.float64).view(heads, dim)
    if gate == "softplus":
        return -rate * softplus(x)
    if not isinstance(lower_bound, Real) or isinstance(lower_bound, bool) or not float("-inf") < lower_bound < 0:
        raise ValueError(f"lower_bound: expected a finite number < 0 with gate='lower_bound', got {lower_bound!r}")
    return float(lower_bound) * torch.sigmoid(rate * x)


def softplus(x: torch.Tensor) -> torch.Tensor:
    """log(1 + exp(x)) as max(x, 0) + log1p(exp(-|x|)): no overflow, and no linear cutoff."""
    return x.clamp(min=0) + torch.log1p(torch.exp(-x.abs()))


def l2norm(x: torch.Tensor) -> torch.Tensor:
    """x / sqrt(sum(x^2, -1) + 1e-6) over the last dimension, in the dtype of x."""
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + L2NORM_EPS)


def prepare_inputs(
    q, k, v, g, beta, *, gate="log", A_log=None, dt_bias=None, lower_bound=None, beta_sigmoid=False, qk_l2norm=False
):
    """float64 (q, k, v, log_decay, beta) after the transforms a kernel applies to its inputs.

    log_decay = gate_log_decay(g, ...); beta = sigmoid(beta) when beta_sigmoid;
    q and k = l2norm(q), l2norm(k) when qk_l2norm. Shapes are those of the inputs.
    """
    for name, x in (("q", q), ("k", k), ("v", v), ("beta", beta)):
        _require_float(name, x)
    for name, flag in (("beta_sigmoid", beta_sigmoid), ("qk_l2norm", qk_l2norm)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name}: expected a bool, got {type(flag).__name__}")
    log_decay = gate_log_decay(g, gate=gate, A_log=A_log, dt_bias=dt_bias, lower_bound=lower_bound)
    q, k, v, beta = (x.to(torch.float64) for x in (q, k, v, beta))
    if beta_sigmoid:
        beta = torch.sigmoid(beta)
    if qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    return q, k, v, log_decay, beta


@dataclass(frozen=True)
class Sequences:
    """Where each sequence's tokens sit on the flattened token axis of a [B, T, ...] tensor.

    Sequence n is flat tokens [starts[n], starts[n] + lengths[n]). `gather` lays the
    sequences out as [N, L, ...], zero past each one's end; `scatter` puts them back.
    """

    batch: int
    seq_len: int
    starts: torch.Tensor  # [N] int64
    lengths: torch.Tensor  # [N] int64
    max_len: int

    @property
    def count(self) -> int:
        return self.starts.numel()

    def _index(self, padded_len: int):
        t = torch.arange(padded_len, device=self.starts.device)
        return self.starts[:, None] + t, t < self.lengths[:, None]

    def gather(self, x: torch.Tensor, multiple: int = 1) -> torch.Tensor:
        """[B, T, ...] -> [N, L, ...], L = max length rounded up to `multiple`; zero padding."""
        padded_len = -(-self.max_len // multiple) * multiple
        flat = x.reshape(self.batch * self.seq_len, *x.shape[2:])
        index, valid = self._index(padded_len)
        out = flat.new_zeros(self.count, padded_len, *x.shape[2:])
        out[valid] = flat[index[valid]]
        return out

    def scatter(self, x: torch.Tensor) -> torch.Tensor:
        """[N, L, ...] -> [B, T, ...], the inverse of `gather` on the tokens that exist."""
        index, valid = self._index(x.shape[1])
        flat = x.new_empty(self.batch * self.seq_len, *x.shape[2:])
        flat[index[valid]] = x[valid]
        return flat.view(self.batch, self.seq_len, *x.shape[2:])


def _sequences(batch: int, seq_len: int, cu_seqlens, device) -> Sequences:
    if cu_seqlens is None:
        starts = torch.arange(batch, dtype=torch.int64) * seq_len
        lengths = torch.full((batch,), seq_len, dtype=torch.int64)
    else:
        _require_int("cu_seqlens", cu_seqlens)
        if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
            raise ValueError(f"cu_seqlens: expected a 1-D tensor [N+1] with N >= 1, got shape {list(cu_seqlens.shape)}")
        if batch != 1:
            raise ValueError(f"q: expected batch size 1 with cu_seqlens (varlen packs sequences on T), got {batch}")
        bounds = cu_seqlens.to("cpu", torch.int64)
        if bounds[0] != 0 or bounds[-1] != seq_len:
            raise ValueError(
                f"cu_seqlens: expected to start at 0 and end at T = {seq_len}, "
                f"got {bounds[0].item()} ... {bounds[-1].item()}"
            )
        lengths = bounds[1:] - bounds[:-1]
        if bool((lengths < 0).any()):
            raise ValueError(f"cu_seqlens: expected non-decreasing offsets, got {bounds.tolist()}")
        starts = bounds[:-1]
    max_len = int(lengths.max()) if lengths.numel() else 0
    return Sequences(batch, seq_len, starts.to(device), lengths.to(device), max_len)


def check_kda_arguments(
    q,
    k,
    v,
    g,
    beta,
    *,
    scale,
    initial_state,
    output_final_state,
    cu_seqlens,
    state_v_first,
    state_cache,
    state_indices,
    has_initial_state,
) -> Sequences:
    """Validate what naive_kda and its chunked form share; return the sequence layout.

    The gate arguments are checked by gate_log_decay. Raises TypeError for a wrong
    type or dtype and ValueError for a wrong shape, device or value.
    """
    for name, x in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta)):
        _require_float(name, x)
    if q.dim() != 4:
        raise ValueError(f"q: expected 4 dimensions [B, T, H, K], got shape {list(q.shape)}")
    batch, seq_len, heads, dim_k = q.shape
    if v.dim() != 4:
        raise ValueError(f"v: expected 4 dimensions [B, T, H, V], got shape {list(v.shape)}")
    dim_v = v.shape[3]
    _require_shape("k", k, q.shape, "[B, T, H, K] like q")
    _require_shape("v", v, (batch, seq_len, heads, dim_v), "[B, T, H, V] with B, T, H of q")
    _require_shape("g", g, q.shape, "[B, T, H, K] like q")
    _require_shape("beta", beta, q.shape[:3], "[B, T, H]")
    if dim_k == 0 or dim_v == 0 or heads == 0:
        raise ValueError(f"q, v: expected H, K and V >= 1, got H={heads}, K={dim_k}, V={dim_v}")
    for name, x in (("k", k), ("v", v), ("g", g), ("beta", beta)):
        _require_device(name, x, q.device)
    if scale is not None and (not isinstance(scale, Real) or isinstance(scale, bool)):
        raise TypeError(f"scale: expected a real number or None, got {type(scale).__name__}")
    for name, flag in (("output_final_state", output_final_state), ("state_v_first", state_v_first)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name}: expected a bool, got {type(flag).__name__}")
    seqs = _sequences(batch, seq_len, cu_seqlens, q.device)
    n = seqs.count

    if state_cache is None:
        for name, arg in (("state_indices", state_indices), ("has_initial_state", has_initial_state)):
            if arg is not None:
                raise ValueError(f"{name}: expected None without state_cache, got {_type_name(arg)}")
    else:
        if initial_state is not None:
            raise ValueError("initial_state: expected None with state_cache (the cache holds the initial states)")
        _require_float("state_cache", state_cache)
        if state_cache.dim() != 4 or tuple(state_cache.shape[1:]) != (heads, dim_v, dim_k):
            raise ValueError(
                f"state_cache: expected shape [slots, {heads}, {dim_v}, {dim_k}] ([slots, H, V, K]), "
                f"got {list(state_cache.shape)}"
            )
        _require_device("state_cache", state_cache, q.device)
        if state_indices is None or has_initial_state is None:
            raise ValueError("state_indices, has_initial_state: expected [N] tensors with state_cache, got None")
        _require_int("state_indices", state_indices)
        _require_shape("state_indices", state_indices, [n], "[N], one slot per sequence")
        _require_device("state_indices", state_indices, q.device)
        _require_tensor("has_initial_state", has_initial_state, (torch.bool,), "bool")
        _require_shape("has_initial_state", has_initial_state, [n], "[N], one flag per sequence")
        _require_device("has_initial_state", has_initial_state, q.device)
        slots = state_indices.to("cpu", torch.int64)
        if n and (slots.min() < 0 or slots.max() >= state_cache.shape[0]):
            raise ValueError(
                f"state_indices: expected slots in [0, {state_cache.shape[0]}), got {slots.tolist()}"
            )
        if slots.unique().numel() != n:
            raise ValueError(f"state_indices: expected distinct slots, got {slots.tolist()}")

    if initial_state is not None:
        _require_float("initial_state", initial_state)
        if state_v_first:
            _require_shape("initial_state", initial_state, (n, heads, dim_v, dim_k), "[N, H, V, K]")
        else:
            _require_shape("initial_state", initial_state, (n, heads, dim_k, dim_v), "[N, H, K, V]")
        _require_device("initial_state", initial_state, q.device)
    return seqs


def load_states(
    seqs: Sequences,
    heads,
    dim_k,
    dim_v,
    *,
    initial_state,
    state_v_first,
    state_cache,
    state_indices,
    has_initial_state,
    dtype,
    device,
) -> torch.Tensor:
    """The initial states [N, H, K, V] in `dtype`, a fresh tensor (zeros when none is given).

    A paged sequence with has_initial_state False starts from zeros whatever its slot holds.
    """
    if state_cache is not None:
        cached = state_cache[state_indices.long()].to(dtype).transpose(-1, -2)
        return torch.where(has_initial_state.view(-1, 1, 1, 1), cached, torch.zeros_like(cached)).contiguous()
    if initial_state is None:
        return torch.zeros(seqs.count, heads, dim_k, dim_v, dtype=dtype, device=device)
    state = initial_state.transpose(-1, -2) if state_v_first else initial_state
    return state.to(dtype=dtype, copy=True).contiguous()


def store_states(states: torch.Tensor, *, output_final_state, state_v_first, state_cache, state_indices):
    """The `final` a KDA forward returns for final states [N, H, K, V].

    Paged: a copy of the whole state_cache in the dtype of `states` with slot
    state_indices[n] set to sequence n's final state, transposed to V x K (the other
    slots as they were). Dense: the states in the layout of initial_state when
    output_final_state, else None.
    """
    if state_cache is not None:
        final = torch.empty(state_cache.shape, dtype=states.dtype, device=states.device)
        final.copy_(state_cache)
        final[state_indices.long()] = states.transpose(-1, -2)
        return final
    if not output_final_state:
        return None
    return states.transpose(-1, -2).contiguous() if state_v_first else states


def naive_kda(
    q,
    k,
    v,
    g,
    beta,
    *,
    scale=None,
    initial_state=None,
    output_final_state=False,
    cu_seqlens=None,
    gate="log",
    A_log=None,
    dt_bias=None,
    lower_bound=None,
    beta_sigmoid=False,
    qk_l2norm=False,
    state_v_first=False,
    state_cache=None,
    state_indices=None,
    has_initial_state=None,
):
    """KDA forward by the token recurrence in float64 (see the module docstring).

    Returns (o, final): o float64 [B, T, H, V]; final float64 states in the layout of
    initial_state when output_final_state ([N, H, K, V], or [N, H, V, K] when
    state_v_first), the updated copy of the whole state_cache when one is given
    (whatever output_final_state says), else None. state_v_first concerns the dense
    states only; the cache is always [slots, H, V, K].

    One step of a Python loop per token position, every sequence, head and channel at
    once: sequences shorter than the longest are padded with tokens of zero log-decay
    and zero beta, which leave the state as it is.
    """
    seqs = check_kda_arguments(
        q,
        k,
        v,
        g,
        beta,
        scale=scale,
        initial_state=initial_state,
        output_final_state=output_final_state,
        cu_seqlens=cu_seqlens,
        state_v_first=state_v_first,
        state_cache=state_cache,
        state_indices=state_indices,
        has_initial_state=has_initial_state,
    )
    heads, dim_k, dim_v = q.shape[2], q.shape[3], v.shape[3]
    scale = dim_k**-0.5 if scale is None else float(scale)
    inputs = prepare_inputs(
        q,
        k,
        v,
        g,
        beta,
        gate=gate,
        A_log=A_log,
        dt_bias=dt_bias,
        lower_bound=lower_bound,
        beta_sigmoid=beta_sigmoid,
        qk_l2norm=qk_l2norm,
    )
    q, k, v, log_decay, beta = (seqs.gather(x) for x in inputs)
    decay = log_decay.exp()
    state = load_states(
        seqs,
        heads,
        dim_k,
        dim_v,
        initial_state=initial_state,
        state_v_first=state_v_first,
        state_cache=state_cache,
        state_indices=state_indices,
        has_initial_state=has_initial_state,
        dtype=torch.float64,
        device=q.device,
    )
    out = q.new_empty(seqs.count, q.shape[1], heads, dim_v)
    for t in range(q.shape[1]):
        state = state * decay[:, t, :, :, None]
        k_t = k[:, t, :, None, :]  # [N, H, 1, K]
        residual = v[:, t, :, None, :] - k_t @ state  # [N, H, 1, V]: v_t - S^T k_t
        state = state + (beta[:, t, :, None, None] * k_t).transpose(-1, -2) @ residual
        out[:, t] = scale * (q[:, t, :, None, :] @ state).squeeze(-2)
    final = store_states(
        state,
        output_final_state=output_final_state,
        state_v_first=state_v_first,
        state_cache=state_cache,
        state_indices=state_indices,
    )
    return seqs.scatter(out), final
