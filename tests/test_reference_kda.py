"""The float64 KDA reference and its chunked same-precision form.

naive_kda is checked against a per-(sequence, head, token) loop written here with
scalar gate arithmetic; chunk_kda_torch in float64 is checked against naive_kda,
which proves the chunk algebra (tails, varlen, states, gates, strong decay,
correlated keys); in bf16 its error must be small but not zero.
"""

import math
import zlib

import pytest
import torch

from reference.kda import gate_log_decay, l2norm, naive_kda, prepare_inputs
from reference.kda_chunked import chunk_kda_torch

F64 = torch.float64
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def signed(gen, *shape, outlier=8.0):
    """Standard normal float64 with about 2% of the elements multiplied by `outlier`."""
    x = torch.randn(*shape, generator=gen, dtype=F64)
    spikes = torch.rand(*shape, generator=gen, dtype=F64) < 0.02
    return torch.where(spikes, x * outlier, x)


def unit(x):
    return x / x.norm(dim=-1, keepdim=True)


def make_inputs(
    shape,
    *,
    seed,
    gate="log",
    beta_sigmoid=False,
    qk_l2norm=False,
    log_decay=None,
    raw_gate=None,
    rho=None,
    raw_beta=None,
):
    """(args, kwargs) for a KDA call on float32 inputs of shape (B, T, H, K, V).

    Keys are unit vectors unless qk_l2norm (then they are scaled by 3, so the norm
    matters). log_decay / raw_gate fix g for the log / computed gates; rho mixes one
    shared key into every key (rho = 1: all keys of a head are the same); raw_beta
    fixes every beta (before the sigmoid when beta_sigmoid).
    """
    B, T, H, K, V = shape
    gen = torch.Generator().manual_seed(seed)
    q = signed(gen, B, T, H, K)
    k = signed(gen, B, T, H, K, outlier=3.0)
    if rho is not None:
        shared = torch.randn(B, 1, H, K, generator=gen, dtype=F64)
        k = rho * shared + math.sqrt(1.0 - rho * rho) * k
    k = 3.0 * unit(k) if qk_l2norm else unit(k)
    v = signed(gen, B, T, H, V)
    kwargs = {"gate": gate, "beta_sigmoid": beta_sigmoid, "qk_l2norm": qk_l2norm}
    if gate == "log":
        g = -torch.exp(torch.randn(B, T, H, K, generator=gen, dtype=F64) - 2.5) if log_decay is None else log_decay
    else:
        g = 2.0 * torch.randn(B, T, H, K, generator=gen, dtype=F64) if raw_gate is None else raw_gate
        kwargs["A_log"] = (0.5 * torch.randn(H, generator=gen, dtype=F64)).float()
        kwargs["dt_bias"] = (0.5 * torch.randn(H * K, generator=gen, dtype=F64)).float()
        if gate == "lower_bound":
            kwargs["lower_bound"] = -5.0
    g = torch.as_tensor(g, dtype=F64).expand(B, T, H, K).contiguous()
    if raw_beta is not None:
        beta = torch.full((B, T, H), float(raw_beta), dtype=F64)
    elif beta_sigmoid:
        beta = 2.0 * torch.randn(B, T, H, generator=gen, dtype=F64)
    else:
        beta = torch.rand(B, T, H, generator=gen, dtype=F64)
    return tuple(x.float() for x in (q, k, v, g, beta)), kwargs


def scalar_gate(x, h, c, K, *, gate, A_log=None, dt_bias=None, lower_bound=None):
    """One channel's log-decay, written with math on Python floats."""
    if gate == "log":
        return x
    z = x + float(dt_bias[h * K + c])
    rate = math.exp(float(A_log[h]))
    if gate == "softplus":
        return -rate * (z + math.log1p(math.exp(-z)) if z > 0 else math.log1p(math.exp(z)))
    return lower_bound / (1.0 + math.exp(-rate * z))


def token_loop(q, k, v, g, beta, *, cu_seqlens=None, initial_state=None, beta_sigmoid=False, qk_l2norm=False, **gate):
    """KDA by the definition: a loop over sequences, heads and tokens; float64 o and final [N, H, K, V]."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K**-0.5
    if cu_seqlens is None:
        spans = [(b, 0, T) for b in range(B)]
    else:
        cu = cu_seqlens.tolist()
        spans = [(0, cu[n], cu[n + 1]) for n in range(len(cu) - 1)]
    o = torch.zeros(B, T, H, V, dtype=F64)
    finals = torch.zeros(len(spans), H, K, V, dtype=F64)
    for n, (b, start, end) in enumerate(spans):
        for h in range(H):
            S = torch.zeros(K, V, dtype=F64) if initial_state is None else initial_state[n, h].double().clone()
            for t in range(start, end):
                q_t, k_t, v_t = q[b, t, h].double(), k[b, t, h].double(), v[b, t, h].double()
                if qk_l2norm:
                    q_t = q_t / math.sqrt(float(q_t @ q_t) + 1e-6)
                    k_t = k_t / math.sqrt(float(k_t @ k_t) + 1e-6)
                b_t = float(beta[b, t, h])
                if beta_sigmoid:
                    b_t = 1.0 / (1.0 + math.exp(-b_t))
                for c in range(K):
                    S[c] *= math.exp(scalar_gate(float(g[b, t, h, c]), h, c, K, **gate))
                S = S + b_t * torch.outer(k_t, v_t - S.T @ k_t)
                o[b, t, h] = scale * (S.T @ q_t)
            finals[n, h] = S
    return o, finals


def assert_close(name, got, want, rel):
    """max|got - want| <= rel * max(1, max|want|), with every element finite."""
    assert got.shape == want.shape, f"{name}: shape {list(got.shape)} != {list(want.shape)}"
    assert torch.isfinite(got).all(), f"{name}: non-finite values"
    assert torch.isfinite(want).all(), f"{name}: non-finite reference values"
    err = (got.double() - want.double()).abs().max().item() if got.numel() else 0.0
    bound = rel * max(1.0, want.abs().max().item() if want.numel() else 0.0)
    assert err <= bound, f"{name}: max abs error {err:.3e} > {bound:.3e}"


# ---------------------------------------------------------------- naive_kda vs the token loop

NAIVE_CASES = {
    "log": dict(shape=(2, 9, 2, 4, 3)),
    "softplus-sigmoid-l2": dict(shape=(2, 7, 2, 4, 3), gate="softplus", beta_sigmoid=True, qk_l2norm=True),
    "lower_bound": dict(shape=(1, 8, 3, 4, 2), gate="lower_bound"),
}


@pytest.mark.parametrize("name", list(NAIVE_CASES))
def test_naive_matches_token_loop(name):
    args, kw = make_inputs(seed=1, **NAIVE_CASES[name])
    q = args[0]
    initial = signed(torch.Generator().manual_seed(2), q.shape[0], q.shape[2], q.shape[3], args[2].shape[3])
    o, final = naive_kda(*args, initial_state=initial.float(), output_final_state=True, **kw)
    assert o.dtype == F64 and final.dtype == F64
    o_ref, final_ref = token_loop(*args, initial_state=initial.float(), **kw)
    assert_close("o", o, o_ref, 1e-12)
    assert_close("final", final, final_ref, 1e-12)


def test_naive_varlen_matches_token_loop():
    args, kw = make_inputs((1, 12, 2, 4, 3), seed=3, gate="softplus")
    cu = torch.tensor([0, 5, 5, 11, 12], dtype=torch.int32)
    initial = signed(torch.Generator().manual_seed(4), 4, 2, 4, 3).float()
    o, final = naive_kda(*args, cu_seqlens=cu, initial_state=initial, output_final_state=True, **kw)
    o_ref, final_ref = token_loop(*args, cu_seqlens=cu, initial_state=initial, **kw)
    assert_close("o", o, o_ref, 1e-12)
    assert_close("final", final, final_ref, 1e-12)
    assert torch.equal(final[1], initial[1].double()), "an empty sequence must keep its initial state"


def test_gate_and_l2norm_formulas():
    gen = torch.Generator().manual_seed(5)
    g = signed(gen, 1, 3, 2, 4)
    g[0, 1, 1, 0], g[0, 2, 0, 1] = 40.0, -40.0  # past softplus's linear cutoff and far below it
    A_log, dt_bias = torch.randn(2, generator=gen, dtype=F64), torch.randn(8, generator=gen, dtype=F64)
    for gate, extra in (("softplus", {}), ("lower_bound", {"lower_bound": -5.0})):
        got = gate_log_decay(g, gate=gate, A_log=A_log, dt_bias=dt_bias, **extra)
        for idx in [(0, 0, 0, 0), (0, 2, 1, 3), (0, 1, 1, 0), (0, 2, 0, 1)]:
            want = scalar_gate(g[idx].item(), idx[2], idx[3], 4, gate=gate, A_log=A_log, dt_bias=dt_bias, **extra)
            assert abs(got[idx].item() - want) <= 1e-14 * max(1.0, abs(want))
        assert (got <= 0).all()
    assert (gate_log_decay(g, gate="lower_bound", A_log=A_log, dt_bias=dt_bias, lower_bound=-5.0) >= -5.0).all()
    x = signed(gen, 3, 5)
    assert torch.allclose(l2norm(x), x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6), rtol=0, atol=0)
    x4, raw_beta = x[None, None], x[None, None, :, 0]
    q, k, v, log_decay, beta = prepare_inputs(x4, x4, x4, -x4.abs(), raw_beta, beta_sigmoid=True, qk_l2norm=True)
    assert torch.equal(beta, torch.sigmoid(raw_beta)) and torch.equal(k, l2norm(x4)) and torch.equal(v, x4)


def test_naive_state_layouts_agree():
    """Dense K-first, dense V-first and paged states give the same sequences' results."""
    args, kw = make_inputs((1, 30, 2, 4, 3), seed=6)
    cu = torch.tensor([0, 13, 13, 30])
    gen = torch.Generator().manual_seed(7)
    initial = signed(gen, 3, 2, 4, 3)
    o, final = naive_kda(*args, cu_seqlens=cu, initial_state=initial, output_final_state=True, **kw)
    o_vf, final_vf = naive_kda(
        *args, cu_seqlens=cu, initial_state=initial.transpose(-1, -2), state_v_first=True, output_final_state=True, **kw
    )
    assert torch.equal(o_vf, o) and torch.equal(final_vf, final.transpose(-1, -2))
    assert naive_kda(*args, cu_seqlens=cu, initial_state=initial, **kw)[1] is None

    padded = signed(gen, 6, 3, 3, 4)  # [slots, H + 1, V, K]: stride(0) leaves a gap
    cache = padded[:, :2]
    slots = torch.tensor([4, 0, 2])
    has_initial = torch.tensor([True, False, True])
    cache[0] = float("nan")  # must not be read: sequence 1 starts from zeros
    cache[4] = initial[0].transpose(-1, -2)
    cache[2] = initial[2].transpose(-1, -2)
    before = cache.clone()
    o_p, final_p = naive_kda(
        *args, cu_seqlens=cu, state_cache=cache, state_indices=slots, has_initial_state=has_initial, **kw
    )
    unchanged = torch.equal(cache.isnan(), before.isnan()) and torch.equal(cache.nan_to_num(), before.nan_to_num())
    assert unchanged, "the reference wrote into state_cache"
    zeroed = initial * torch.tensor([1.0, 0.0, 1.0], dtype=F64).view(3, 1, 1, 1)
    o_z, final_z = naive_kda(*args, cu_seqlens=cu, initial_state=zeroed, output_final_state=True, **kw)
    assert torch.equal(o_p, o_z)
    assert final_p.shape == cache.shape and final_p.dtype == F64
    assert torch.equal(final_p[slots], final_z.transpose(-1, -2))
    for unused in (1, 3, 5):
        assert torch.equal(final_p[unused], cache[unused].double())
    assert torch.equal(final_p[0], torch.zeros(2, 3, 4, dtype=F64)), "an empty sequence from zeros writes zeros"


# ---------------------------------------------------------------- chunk_kda_torch in float64 == naive_kda

def _shape(T, B=2):
    return (B, T, 2, 8, 6)


CHUNK_CASES = {
    "T1": dict(shape=_shape(1)),
    "T15": dict(shape=_shape(15)),
    "T17": dict(shape=_shape(17)),
    "T40": dict(shape=_shape(40)),
    "varlen-empty-seq": dict(shape=_shape(70, B=1), cu=[0, 17, 17, 50, 51, 70], initial=True),
    "initial-state": dict(shape=_shape(33), initial=True),
    "v-first-varlen": dict(shape=_shape(40, B=1), cu=[0, 0, 23, 40], initial=True, v_first=True),
    "paged-padded-varlen": dict(shape=_shape(45, B=1), cu=[0, 20, 20, 45], paged=True),
    "paged-padded-batch": dict(shape=_shape(19), paged=True),
    "gate-softplus": dict(shape=_shape(40), gate="softplus", initial=True),
    "gate-lower_bound": dict(shape=_shape(40), gate="lower_bound"),
    "beta-sigmoid": dict(shape=_shape(40), beta_sigmoid=True),
    "qk-l2norm": dict(shape=_shape(40), qk_l2norm=True, gate="softplus"),
    "strong-decay-g-1000": dict(shape=_shape(40), log_decay=-1000.0, initial=True),
    "strong-decay-mixed": dict(shape=_shape(40), mixed_strong=True, initial=True),
    "lower-bound-saturated": dict(shape=_shape(40), gate="lower_bound", raw_gate=60.0, initial=True),
    "correlated-rho0.9": dict(shape=_shape(40), rho=0.9, raw_beta=4.0, beta_sigmoid=True, log_decay=-0.01),
    "correlated-rho1.0": dict(shape=_shape(40), rho=1.0, raw_beta=4.0, beta_sigmoid=True, log_decay=-0.01),
}


def to_device(items, device):
    """A tuple or dict with its tensors moved to `device`."""

    def move(x):
        return x.to(device) if isinstance(x, torch.Tensor) else x

    if isinstance(items, dict):
        return {key: move(x) for key, x in items.items()}
    return tuple(move(x) for x in items)


def build_chunk_case(name, device):
    """(args, kwargs) of a CHUNK_CASES entry on `device`, state arguments included."""
    spec = dict(CHUNK_CASES[name])
    cu, initial, v_first, paged = (spec.pop(key, None) for key in ("cu", "initial", "v_first", "paged"))
    mixed_strong = spec.pop("mixed_strong", False)
    args, kw = make_inputs(seed=zlib.crc32(name.encode()), **spec)
    B, T, H, K = args[0].shape
    V = args[2].shape[-1]
    gen = torch.Generator().manual_seed(11)
    if mixed_strong:
        g = args[3].clone()
        g[torch.rand(g.shape, generator=gen) < 0.3] = -1000.0
        args = (*args[:3], g, args[4])
    n = B if cu is None else len(cu) - 1
    if cu is not None:
        kw["cu_seqlens"] = torch.tensor(cu, dtype=torch.int32)
    if initial:
        state = signed(gen, n, H, K, V).float()
        kw["initial_state"] = state.transpose(-1, -2).contiguous() if v_first else state
        kw["state_v_first"] = bool(v_first)
        kw["output_final_state"] = True
    elif paged:
        slots = n + 3
        kw["state_cache"] = signed(gen, slots, H + 2, V, K).float()[:, :H]
        kw["state_indices"] = torch.arange(n).flip(0) + 1  # slot 0 and the last two are unused
        kw["has_initial_state"] = torch.arange(n) % 2 == 0
    else:
        kw["output_final_state"] = True
    return to_device(args, device), to_device(kw, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("chunk_size", [16, 64])
@pytest.mark.parametrize("name", list(CHUNK_CASES))
def test_chunk_float64_equals_naive(name, chunk_size, device):
    args, kw = build_chunk_case(name, device)
    o_ref, final_ref = naive_kda(*args, **kw)
    o, final = chunk_kda_torch(*args, chunk_size=chunk_size, operand_dtype=F64, **kw)
    assert o.dtype == F64 and o.device == args[0].device
    assert_close("o", o, o_ref, 1e-10)
    assert_close("final", final, final_ref, 1e-10)
    assert o_ref.abs().max() > 1e-3, "the case must produce a non-trivial output"


@pytest.mark.parametrize("device", DEVICES)
def test_chunk_bf16_error_is_small_but_not_zero(device):
    """The floor: bf16 operands give a visible, bounded error; fp32 operands a far smaller one."""
    args, kw = make_inputs((2, 200, 2, 32, 32), seed=12, gate="softplus", qk_l2norm=True)
    args, kw = to_device(args, device), to_device(kw, device)
    o_ref, final_ref = naive_kda(*args, output_final_state=True, **kw)
    errors = {}
    for dtype in (torch.bfloat16, torch.float32):
        o, final = chunk_kda_torch(*args, operand_dtype=dtype, output_final_state=True, **kw)
        assert o.dtype == torch.float32 and final.dtype == torch.float32
        errors[dtype] = (
            (o.double() - o_ref).abs().max().item() / o_ref.abs().max().item(),
            (final.double() - final_ref).abs().max().item() / final_ref.abs().max().item(),
        )
    print(f"max error / max |naive| (o, final): bf16 {errors[torch.bfloat16]}, fp32 {errors[torch.float32]}")
    for bf16_err, fp32_err in zip(errors[torch.bfloat16], errors[torch.float32]):
        assert 1e-4 < bf16_err < 2e-2
        assert fp32_err < 1e-5 and fp32_err < bf16_err / 100


# ---------------------------------------------------------------- bad input


def _bad_calls():
    """name -> (exception, message pattern, positional args, keyword args) of a call that must fail."""
    args, _ = make_inputs((2, 5, 2, 4, 3), seed=13)
    q, k, v, g, beta = args
    one = tuple(x[:1] for x in args)
    sp = make_inputs((2, 5, 2, 4, 3), seed=13, gate="softplus")[1]
    paged = {
        "state_cache": torch.zeros(4, 2, 3, 4),
        "state_indices": torch.tensor([0, 1]),
        "has_initial_state": torch.tensor([True, True]),
    }
    return {
        "q-dtype": (TypeError, "q: expected a tensor of dtype bfloat16", (q.to(torch.int32), k, v, g, beta), {}),
        "k-shape": (ValueError, r"k: expected shape \[2, 5, 2, 4\]", (q, k[..., :3], v, g, beta), {}),
        "beta-shape": (ValueError, r"beta: expected shape \[2, 5, 2\]", (q, k, v, g, beta[..., None]), {}),
        "cu-batch": (ValueError, "batch size 1", args, {"cu_seqlens": torch.tensor([0, 5])}),
        "cu-dtype": (TypeError, "cu_seqlens: expected a tensor of dtype int32 or int64", one, {"cu_seqlens": torch.tensor([0.0, 5.0])}),
        "cu-order": (ValueError, "non-decreasing", one, {"cu_seqlens": torch.tensor([0, 4, 2, 5])}),
        "cu-end": (ValueError, "end at T = 5", one, {"cu_seqlens": torch.tensor([0, 4])}),
        "gate-name": (ValueError, "gate: expected one of", args, {"gate": "exp"}),
        "g-positive": (ValueError, "g: expected a log-decay <= 0", (q, k, v, g.abs(), beta), {}),
        "A_log-missing": (ValueError, r"A_log: expected a \[H\] tensor", args, {**sp, "A_log": None}),
        "dt_bias-shape": (ValueError, r"dt_bias: expected shape \[8\]", args, {**sp, "dt_bias": sp["dt_bias"][:4]}),
        "A_log-with-log": (ValueError, "A_log: expected None with gate='log'", args, {"A_log": sp["A_log"]}),
        "lower_bound-sign": (
            ValueError,
            "lower_bound: expected a finite number < 0",
            args,
            {**sp, "gate": "lower_bound", "lower_bound": 5.0},
        ),
        "initial-shape": (
            ValueError,
            r"initial_state: expected shape \[2, 2, 4, 3\]",
            args,
            {"initial_state": torch.zeros(2, 2, 3, 4)},
        ),
        "initial-and-cache": (
            ValueError,
            "initial_state: expected None with state_cache",
            args,
            {**paged, "initial_state": torch.zeros(2, 2, 4, 3)},
        ),
        "cache-shape": (
            ValueError,
            r"state_cache: expected shape \[slots, 2, 3, 4\]",
            args,
            {**paged, "state_cache": torch.zeros(4, 2, 4, 3)},
        ),
        "slots-distinct": (
            ValueError,
            "state_indices: expected distinct",
            args,
            {**paged, "state_indices": torch.tensor([1, 1])},
        ),
        "slots-range": (
            ValueError,
            r"state_indices: expected slots in \[0, 4\)",
            args,
            {**paged, "state_indices": torch.tensor([1, 4])},
        ),
        "flags-dtype": (
            TypeError,
            "has_initial_state: expected a tensor of dtype bool",
            args,
            {**paged, "has_initial_state": torch.tensor([1, 1])},
        ),
        "indices-without-cache": (
            ValueError,
            "state_indices: expected None without state_cache",
            args,
            {"state_indices": torch.tensor([0, 1])},
        ),
    }


BAD = _bad_calls()


@pytest.mark.parametrize("fn", [naive_kda, chunk_kda_torch], ids=["naive", "chunked"])
@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_is_named(name, fn):
    error, message, args, kw = BAD[name]
    with pytest.raises(error, match=message):
        fn(*args, **kw)


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"chunk_size": 0}, "chunk_size: expected a positive int"),
        ({"operand_dtype": torch.int8}, "operand_dtype: expected"),
    ],
)
def test_chunked_bad_settings(kw, message):
    args, gate_kw = make_inputs((1, 5, 1, 4, 3), seed=14)
    with pytest.raises(ValueError, match=message):
        chunk_kda_torch(*args, **gate_kw, **kw)
