"""FlashKDA Triton forward (kernels.kda) against the float64 token recurrence.

Without a GPU the kernels run in the Triton interpreter, so sizes stay small:
K = V = 64 (one 128 case), T <= ~200, H <= 2. Outputs are judged by the RMS
ratio rms(out - ref) / rms(ref) against a bf16-precision bound, and every
output element must have been written (outputs and workspace are NaN-poisoned).
"""

import dataclasses
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kernels.kda import api, prepare  # noqa: E402
from kernels.kda.api import flash_kda_fwd  # noqa: E402
from kernels.kda.plan import MAX_SEGMENT_CHUNKS, chunks_per_segment  # noqa: E402
from reference.kda import naive_kda  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
RMS_BOUND = 5e-3  # bf16 output rounding alone gives ~2e-3
STATE_BOUND = 5e-3


def _randn(*shape, gen, outliers=True):
    x = torch.randn(*shape, generator=gen)
    if outliers and x.numel() >= 8:
        flat = x.view(-1)
        idx = torch.randint(0, flat.numel(), (max(1, flat.numel() // 200),), generator=gen)
        flat[idx] *= 6.0
    return x


def make_inputs(B, T, H, K=64, V=64, *, seed=0, gate="log", decay=0.3, dtype=torch.bfloat16):
    """Signed inputs with outliers; keys unit-norm-ish so the delta rule stays stable."""
    gen = torch.Generator().manual_seed(seed)
    q = _randn(B, T, H, K, gen=gen)
    k = _randn(B, T, H, K, gen=gen, outliers=False)
    k = k / k.norm(dim=-1, keepdim=True).clamp_min(1e-3)
    v = _randn(B, T, H, V, gen=gen)
    if gate == "log":
        g = -torch.rand(B, T, H, K, generator=gen) * decay
    else:
        g = _randn(B, T, H, K, gen=gen) * 2.0
    beta = torch.rand(B, T, H, generator=gen)
    return tuple(x.to(dtype).to(DEVICE) for x in (q, k, v)) + (g.to(DEVICE), beta.to(dtype).to(DEVICE))


def gate_params(H, K, seed=1):
    gen = torch.Generator().manual_seed(seed)
    A_log = (torch.rand(H, generator=gen) * 2 - 1).to(DEVICE)
    dt_bias = (torch.randn(H * K, generator=gen) * 0.5).to(DEVICE)
    return A_log, dt_bias


def rms_ratio(out, ref):
    out, ref = out.double().cpu(), ref.double().cpu()
    return ((out - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt().clamp_min(1e-30)).item()


def check(out, ref, bound=RMS_BOUND, what="o"):
    assert torch.isfinite(out).all(), f"{what}: non-finite elements"
    ratio = rms_ratio(out, ref)
    assert ratio < bound, f"{what}: rms ratio {ratio:.3e} >= {bound:.1e}"


def nan_out(B, T, H, V, dtype=torch.bfloat16):
    return torch.full((B, T, H, V), float("nan"), dtype=dtype, device=DEVICE)


def rand_state(*shape, seed=3):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=gen) * 0.5).to(DEVICE)


# ---------------------------------------------------------------- accuracy


@pytest.mark.parametrize("T", [1, 63, 65, 130])
def test_tails_against_recurrence(T):
    q, k, v, g, beta = make_inputs(1, T, 2, seed=T)
    h0 = rand_state(1, 2, 64, 64)
    out = nan_out(1, T, 2, 64)
    o, fin = flash_kda_fwd(q, k, v, g, beta, initial_state=h0, output_final_state=True, out=out)
    ref_o, ref_fin = naive_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    assert o.data_ptr() == out.data_ptr()
    check(o, ref_o)
    check(fin, ref_fin, STATE_BOUND, "final_state")


def _with_launch_rows(monkeypatch, **fields):
    """This device's KDA launch table with `fields` replaced in every row, and no plan kept from before."""
    from kernels import arch
    from kernels.kda import tuning
    name = arch.arch_name(torch.device(DEVICE))
    table = tuning.tuning(name)
    rows = {dim: dataclasses.replace(row, **fields) for dim, row in table.rows.items()}
    monkeypatch.setitem(tuning.TABLES, name, dataclasses.replace(table, rows=rows))
    monkeypatch.setattr(api, "_CALLS", {})


@pytest.mark.parametrize("exact_rows", [1, 2, 4, 8, 16])
def test_every_split_of_the_diagonal_block_computes_the_forward(exact_rows, monkeypatch):
    # every divisor of the 16-row block (the tables take 8): the sub-blocks meet by products through
    # their reference rows, under a decay fast enough that the earlier sub-block's first row as the
    # reference instead of its last would overflow 2^(r - gc_j)
    _with_launch_rows(monkeypatch, exact_rows=exact_rows)
    q, k, v, g, beta = make_inputs(1, 130, 1, seed=11, decay=40.0)
    o, fin = flash_kda_fwd(q, k, v, g, beta, output_final_state=True, out=nan_out(1, 130, 1, 64))
    ref_o, ref_fin = naive_kda(q, k, v, g, beta, output_final_state=True)
    check(o, ref_o)
    check(fin, ref_fin, STATE_BOUND, "final_state")


def test_diagonal_product_only_where_the_gate_bounds_its_factors():
    from kernels.kda.plan import diagonal_product
    # 8 steps of |lower_bound| log2(e) from the middle row: 2^64 at lower_bound -5.545
    assert diagonal_product(-5.0, 16) and diagonal_product(-5.54, 16) and not diagonal_product(-5.55, 16)
    assert diagonal_product(-11.0, 8) and not diagonal_product(-12.0, 8)
    assert not diagonal_product(None, 16)


@triton.jit
def _inverse(l_ptr, out_ptr, BC: tl.constexpr):
    rb = tl.arange(0, BC)
    at = rb[:, None] * BC + rb[None, :]
    tl.store(out_ptr + at, prepare._unit_lower_inverse(tl.load(l_ptr + at), rb, BC, "ieee"))


def test_the_diagonal_blocks_inverse_is_the_inverse():
    # intra hands the solve Dinv = (I + L)^-1 of each diagonal [16, 16] block (kernels.kda.prepare
    # ._unit_lower_inverse): substitution inside the [4, 4] blocks, then (I - M)(I + M^2) D; every term
    # counts where the rows are correlated (M^2 and M^3 far from 0)
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(16, 8, generator=gen, dtype=torch.float64)
    lower = (0.6 * (x @ x.T) / 8).tril(-1)
    out = torch.full((16, 16), float("nan"), device=DEVICE)
    _inverse[(1,)](lower.float().to(DEVICE), out, BC=16)
    want = torch.linalg.inv(torch.eye(16, dtype=torch.float64) + lower)
    assert (out.double().cpu() - want).abs().max().item() < 1e-5 * want.abs().max().item()


def test_launch_table_refuses_what_its_kernels_cannot_run():
    from kernels.kda import tuning
    row = tuning.config("sm90", 128)
    with pytest.raises(ValueError, match="^columns: expected 64 or 128, got 32"):
        dataclasses.replace(row, columns=32)
    with pytest.raises(ValueError, match="^stage_columns: expected 64 or 128, got 256"):
        dataclasses.replace(row, stage_columns=256)
    with pytest.raises(ValueError, match="exact_rows: expected a divisor of 16, got 3"):
        dataclasses.replace(row, exact_rows=3)
    with pytest.raises(ValueError, match="^scan_columns: expected 16, 32 or 64, got 8"):
        dataclasses.replace(row, scan_columns=8)


def test_known_kda_spills_name_kernels_that_exist():
    # a spill reason is found by the kernel's name (verify.adapters.known_spill): a misspelt key would
    # name nothing, and the spills it means would be reported as new
    from kernels.kda import chunk, tuning
    kernels = {name for module in (prepare, chunk) for name, fn in vars(module).items()
               if isinstance(fn, triton.runtime.jit.KernelInterface)}
    named = {name for table in tuning.TABLES.values() for name in table.spills}
    assert {"kda_intra_kernel", "kda_scan_kernel"} <= named <= kernels


def test_head_dim_128_batched():
    q, k, v, g, beta = make_inputs(2, 70, 1, K=128, V=128, seed=5)
    o, fin = flash_kda_fwd(q, k, v, g, beta, output_final_state=True, out=nan_out(2, 70, 1, 128))
    ref_o, ref_fin = naive_kda(q, k, v, g, beta, output_final_state=True)
    check(o, ref_o)
    check(fin, ref_fin, STATE_BOUND, "final_state")


@pytest.mark.parametrize("state_v_first", [False, True])
def test_varlen_initial_state(state_v_first):
    lengths = [0, 1, 15, 70, 0]
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32, device=DEVICE)
    T = sum(lengths)
    q, k, v, g, beta = make_inputs(1, T, 2, seed=7)
    shape = (5, 2, 64, 64)
    h0 = rand_state(*shape)
    o, fin = flash_kda_fwd(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, output_final_state=True,
                           state_v_first=state_v_first, out=nan_out(1, T, 2, 64))
    ref_o, ref_fin = naive_kda(q, k, v, g, beta, cu_seqlens=cu, initial_state=h0, output_final_state=True,
                               state_v_first=state_v_first)
    check(o, ref_o)
    check(fin, ref_fin, STATE_BOUND, "final_state")
    # An empty sequence hands its initial state through unchanged.
    assert torch.equal(fin[0], h0[0]) and torch.equal(fin[4], h0[4])


def test_paged_state_cache():
    cu = torch.tensor([0, 15, 15, 85], dtype=torch.int64, device=DEVICE)
    q, k, v, g, beta = make_inputs(1, 85, 2, seed=11)
    slots, H, V, K = 5, 2, 64, 64
    big = rand_state(slots, H * V * K + 37, seed=12)
    cache = big[:, : H * V * K].view(slots, H, V, K)
    assert cache.stride(0) == H * V * K + 37
    before = big.clone()
    idx = torch.tensor([3, 0, 1], dtype=torch.int32, device=DEVICE)
    has = torch.tensor([True, False, True], device=DEVICE)
    ref_o, ref_cache = naive_kda(q, k, v, g, beta, cu_seqlens=cu, state_cache=cache, state_indices=idx,
                                 has_initial_state=has)
    o, fin = flash_kda_fwd(q, k, v, g, beta, cu_seqlens=cu, state_cache=cache, state_indices=idx,
                           has_initial_state=has, out=nan_out(1, 85, 2, 64))
    assert fin is None
    check(o, ref_o)
    for s in (3, 0, 1):
        check(cache[s], ref_cache[s], STATE_BOUND, f"slot {s}")
    # The empty sequence without an initial state leaves zeros in its slot.
    assert torch.equal(cache[0], torch.zeros_like(cache[0]))
    # Slots 2 and 4 and the padding between slots are untouched.
    for s in (2, 4):
        assert torch.equal(big[s], before[s])
    assert torch.equal(big[:, H * V * K:], before[:, H * V * K:])


@pytest.mark.parametrize(
    "gate, beta_sigmoid, qk_l2norm",
    [("softplus", True, True), ("lower_bound", False, True), ("log", True, False)],
)
def test_gate_modes(gate, beta_sigmoid, qk_l2norm):
    H, K = 2, 64
    q, k, v, g, beta = make_inputs(1, 80, H, seed=13, gate=gate)
    if qk_l2norm:
        k = k * 3.0
    A_log, dt_bias = gate_params(H, K) if gate != "log" else (None, None)
    kw = dict(gate=gate, A_log=A_log, dt_bias=dt_bias, lower_bound=-5.0 if gate == "lower_bound" else None,
              beta_sigmoid=beta_sigmoid, qk_l2norm=qk_l2norm, output_final_state=True)
    o, fin = flash_kda_fwd(q, k, v, g.bfloat16(), beta, out=nan_out(1, 80, H, 64), **kw)
    ref_o, ref_fin = naive_kda(q, k, v, g.bfloat16(), beta, **kw)
    check(o, ref_o)
    check(fin, ref_fin, STATE_BOUND, "final_state")


@pytest.mark.parametrize("case", ["log_minus_1000", "lower_bound_saturated", "lower_bound_steep"])
def test_strong_decay(case):
    # lower_bound_steep: -12 a step is past what the diagonal block's one product takes (its factors
    # would reach 2^(8 * 12 log2(e)) = 2^138, inf in fp32), so the block must take exact exponents
    H = 1
    q, k, v, g, beta = make_inputs(1, 100, H, seed=17)
    if case == "log_minus_1000":
        g = torch.full_like(g, -1000.0)
        g[:, ::7] = -0.01
        kw = dict(gate="log")
    else:
        g = torch.full_like(g, 60.0)
        A_log, dt_bias = gate_params(H, 64)
        kw = dict(gate="lower_bound", A_log=A_log.abs(), dt_bias=dt_bias,
                  lower_bound=-12.0 if case == "lower_bound_steep" else -5.0)
    h0 = rand_state(1, H, 64, 64)
    o, fin = flash_kda_fwd(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                           out=nan_out(1, 100, H, 64), **kw)
    ref_o, ref_fin = naive_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True, **kw)
    check(o, ref_o)
    assert torch.isfinite(fin).all()
    assert (fin.double().cpu() - ref_fin.cpu()).abs().max() < 1e-3


def test_segmented_matches_unsegmented():
    cu = torch.tensor([0, 200, 201, 201, 330], dtype=torch.int32, device=DEVICE)
    q, k, v, g, beta = make_inputs(1, 330, 1, seed=19, decay=0.05)
    h0 = rand_state(4, 1, 64, 64)
    kw = dict(cu_seqlens=cu, initial_state=h0, output_final_state=True)
    o0, f0 = flash_kda_fwd(q, k, v, g, beta, chunks_per_segment=0, out=nan_out(1, 330, 1, 64), **kw)
    ref_o, ref_f = naive_kda(q, k, v, g, beta, **kw)
    check(o0, ref_o)
    check(f0, ref_f, STATE_BOUND, "final_state")
    for cps in (1, 2, 3):
        o, f = flash_kda_fwd(q, k, v, g, beta, chunks_per_segment=cps, out=nan_out(1, 330, 1, 64), **kw)
        check(o, o0.double(), 2e-3, f"o (chunks_per_segment={cps})")
        check(f, f0.double(), 2e-3, f"final_state (chunks_per_segment={cps})")


def test_segmented_paged():
    cu = torch.tensor([0, 0, 150, 200], dtype=torch.int64, device=DEVICE)
    q, k, v, g, beta = make_inputs(1, 200, 2, seed=23, decay=0.05)
    cache = rand_state(4, 2, 64, 64, seed=24)
    idx = torch.tensor([2, 0, 3], device=DEVICE)
    has = torch.tensor([False, True, True], device=DEVICE)
    ref_o, ref_cache = naive_kda(q, k, v, g, beta, cu_seqlens=cu, state_cache=cache, state_indices=idx,
                                 has_initial_state=has)
    before = cache.clone()
    o, _ = flash_kda_fwd(q, k, v, g, beta, cu_seqlens=cu, state_cache=cache, state_indices=idx,
                         has_initial_state=has, chunks_per_segment=1, out=nan_out(1, 200, 2, 64))
    check(o, ref_o)
    check(cache, ref_cache, STATE_BOUND, "state_cache")
    assert torch.equal(cache[1], before[1])


@pytest.mark.parametrize("scan_columns", [16, 32, 64])
def test_every_scan_width_carries_every_state_column(scan_columns, monkeypatch):
    # pass B's programs each carry scan_columns of the state (the tables take 16 at K 128, 64 at K 64):
    # every column of S_in must reach the walk, from a dense initial state and from a paged one
    _with_launch_rows(monkeypatch, scan_columns=scan_columns)
    cu = torch.tensor([0, 70, 260], dtype=torch.int32, device=DEVICE)
    q, k, v, g, beta = make_inputs(1, 260, 1, seed=31, decay=0.05)
    h0 = rand_state(2, 1, 64, 64, seed=32)
    kw = dict(cu_seqlens=cu, initial_state=h0, output_final_state=True)
    o, fin = flash_kda_fwd(q, k, v, g, beta, chunks_per_segment=1, out=nan_out(1, 260, 1, 64), **kw)
    ref_o, ref_fin = naive_kda(q, k, v, g, beta, **kw)
    check(o, ref_o)
    check(fin, ref_fin, STATE_BOUND, "final_state")
    cache = rand_state(3, 1, 64, 64, seed=33)
    idx = torch.tensor([2, 0], device=DEVICE)
    has = torch.tensor([True, True], device=DEVICE)
    paged = dict(cu_seqlens=cu, state_cache=cache, state_indices=idx, has_initial_state=has)
    ref_o, ref_cache = naive_kda(q, k, v, g, beta, **paged)
    o, _ = flash_kda_fwd(q, k, v, g, beta, chunks_per_segment=1, out=nan_out(1, 260, 1, 64), **paged)
    check(o, ref_o)
    check(cache, ref_cache, STATE_BOUND, "state_cache")


def test_nan_poisoned_workspace_reused():
    q, k, v, g, beta = make_inputs(1, 150, 2, seed=29)
    h0 = rand_state(1, 2, 64, 64)
    for cps in (0, 2):
        ws = {}
        o1, f1 = flash_kda_fwd(q, k, v, g, beta, initial_state=h0, output_final_state=True, workspace=ws,
                               chunks_per_segment=cps)
        assert ws, "workspace: expected the scratch tensors to be kept"
        for t in ws.values():
            t.fill_(float("nan"))
        o2, f2 = flash_kda_fwd(q, k, v, g, beta, initial_state=h0, output_final_state=True, workspace=ws,
                               chunks_per_segment=cps, out=nan_out(1, 150, 2, 64))
        assert torch.isfinite(o2).all() and torch.isfinite(f2).all()
        assert torch.equal(o1, o2) and torch.equal(f1, f2)


def test_strided_bands_of_fused_projection():
    B, T, H, K = 1, 70, 2, 64
    gen = torch.Generator().manual_seed(31)
    fused = torch.randn(B, T, 3 * H * K + 8, generator=gen).bfloat16().to(DEVICE)
    q = fused[..., : H * K].view(B, T, H, K)
    k = fused[..., H * K: 2 * H * K].view(B, T, H, K)
    v = fused[..., 2 * H * K: 3 * H * K].view(B, T, H, K)
    g_fused = -torch.rand(B, T, 2 * H * K, generator=gen).to(DEVICE) * 0.3
    g = g_fused[..., H * K:].view(B, T, H, K)
    beta = torch.rand(B, T, 2 * H, generator=gen).bfloat16().to(DEVICE)[..., ::2]
    assert not q.is_contiguous() and not g.is_contiguous() and not beta.is_contiguous()
    o, _ = flash_kda_fwd(q, k, v, g, beta, qk_l2norm=True, out=nan_out(B, T, H, K))
    ref_o, _ = naive_kda(q, k, v, g, beta, qk_l2norm=True)
    check(o, ref_o)


# ---------------------------------------------------------------- argument checks


def _bad_cases():
    q, k, v, g, beta = make_inputs(1, 8, 1, seed=37)
    A_log, dt_bias = gate_params(1, 64)
    base = dict(q=q, k=k, v=v, g=g, beta=beta)
    cases = [
        ("q", dict(base, q=q.to(torch.int32)), TypeError),
        ("k", dict(base, k=k.float()), TypeError),
        ("q", dict(base, q=torch.zeros(1, 8, 1, 32, dtype=torch.bfloat16, device=DEVICE),
                   k=torch.zeros(1, 8, 1, 32, dtype=torch.bfloat16, device=DEVICE),
                   g=torch.zeros(1, 8, 1, 32, device=DEVICE)), ValueError),
        ("v", dict(base, v=torch.zeros(1, 8, 1, 96, dtype=torch.bfloat16, device=DEVICE)), ValueError),
        ("g", dict(base, g=g[:, :4]), ValueError),
        ("beta", dict(base, beta=beta[..., None]), ValueError),
        ("q", dict(base, q=torch.cat([q, q], -1)[..., ::2]), ValueError),
        ("gate", dict(base, gate="tanh"), ValueError),
        ("A_log", dict(base, gate="softplus", dt_bias=dt_bias), ValueError),
        ("dt_bias", dict(base, gate="softplus", A_log=A_log, dt_bias=dt_bias[:5]), ValueError),
        ("lower_bound", dict(base, gate="lower_bound", A_log=A_log, dt_bias=dt_bias, lower_bound=1.0), ValueError),
        ("A_log", dict(base, A_log=A_log), ValueError),
        ("cu_seqlens", dict(base, cu_seqlens=torch.tensor([0, 5, 3, 8], device=DEVICE)), ValueError),
        ("cu_seqlens", dict(base, cu_seqlens=torch.tensor([0, 8.0], device=DEVICE)), TypeError),
        ("q", dict(base, **{n: torch.cat([x, x]) for n, x in base.items()},
                   cu_seqlens=torch.tensor([0, 8], device=DEVICE)), ValueError),
        ("initial_state", dict(base, initial_state=torch.zeros(1, 1, 64, 32, device=DEVICE)), ValueError),
        ("initial_state", dict(base, initial_state=torch.zeros(1, 1, 64, 64, dtype=torch.bfloat16, device=DEVICE)),
         TypeError),
        ("state_indices", dict(base, state_cache=torch.zeros(2, 1, 64, 64, device=DEVICE),
                               state_indices=torch.tensor([2], device=DEVICE),
                               has_initial_state=torch.tensor([True], device=DEVICE)), ValueError),
        ("has_initial_state", dict(base, state_cache=torch.zeros(2, 1, 64, 64, device=DEVICE),
                                   state_indices=torch.tensor([1], device=DEVICE),
                                   has_initial_state=torch.tensor([1], device=DEVICE)), TypeError),
        ("state_cache", dict(base, state_cache=torch.zeros(2, 1, 64, 32, device=DEVICE),
                             state_indices=torch.tensor([1], device=DEVICE),
                             has_initial_state=torch.tensor([True], device=DEVICE)), ValueError),
        ("chunks_per_segment", dict(base, chunks_per_segment=-1), ValueError),
        ("out", dict(base, out=torch.empty(1, 8, 1, 64, device=DEVICE)), TypeError),
        ("workspace", dict(base, workspace=[]), TypeError),
        ("output_final_state", dict(base, output_final_state=1), TypeError),
        ("scale", dict(base, scale=float("nan")), ValueError),
        ("scale", dict(base, scale=float("inf")), ValueError),
        ("scale", dict(base, scale=0.0), ValueError),
        ("scale", dict(base, scale=-1.0), ValueError),
        ("scale", dict(base, scale="0.125"), TypeError),
        ("cu_seqlens", dict(base, cu_seqlens=torch.tensor([0, 3, 9], device=DEVICE)), ValueError),
        ("cu_seqlens_cpu", dict(base, cu_seqlens=torch.tensor([0, 8], device=DEVICE), cu_seqlens_cpu=[[0], [8]]),
         TypeError),
        ("cu_seqlens_cpu", dict(base, cu_seqlens=torch.tensor([0, 8], device=DEVICE), cu_seqlens_cpu=8), TypeError),
        ("state_indices", dict(base, state_cache=torch.zeros(2, 1, 64, 64, device=DEVICE),
                               state_indices=torch.tensor([-1], device=DEVICE),
                               has_initial_state=torch.tensor([True], device=DEVICE)), ValueError),
        # slots [1, 2] as every other element: the walk would read slots 1 and 0 (and write 0's state)
        ("state_indices", dict(base, cu_seqlens=torch.tensor([0, 3, 8], device=DEVICE),
                               state_cache=torch.zeros(3, 1, 64, 64, device=DEVICE),
                               state_indices=torch.tensor([1, 0, 2, 0], device=DEVICE)[::2],
                               has_initial_state=torch.tensor([True, True], device=DEVICE)), ValueError),
    ]
    return cases


@pytest.mark.parametrize("index", range(len(_bad_cases())))
def test_bad_inputs_name_the_argument(index):
    name, kwargs, error = _bad_cases()[index]
    args = [kwargs.pop(n) for n in ("q", "k", "v", "g", "beta")]
    with pytest.raises(error, match=rf"\b{name}\b"):
        flash_kda_fwd(*args, **kwargs)


def test_inputs_by_name():
    q, k, v, g, beta = make_inputs(1, 70, 2, seed=5)
    by_position = flash_kda_fwd(q, k, v, g, beta, output_final_state=True)
    by_name = flash_kda_fwd(q=q, k=k, v=v, g=g, beta=beta, output_final_state=True)
    assert all(torch.equal(a, b) for a, b in zip(by_position, by_name))
    with pytest.raises(TypeError, match=r"\bq\b"):  # Python's own message, naming the parameter
        flash_kda_fwd(k=k, v=v, g=g, beta=beta)


# ---------------------------------------------------------------- planner


def test_planner_unsegmented_when_walkers_fill_the_device():
    assert chunks_per_segment([256], num_heads=96, v_blocks=2, cu_count=132) == 0
    assert chunks_per_segment([256] * 4, num_heads=64, v_blocks=1, cu_count=256) == 0


def test_planner_fits_the_segmented_walk_in_one_wave():
    # 24 walkers (1 sequence x 12 heads x 2 V blocks) on 132 SMs: 5 segments (120 programs), not 6 (144,
    # two waves of one program an SM, each as long as the first)
    cps = chunks_per_segment([256], num_heads=12, v_blocks=2, cu_count=132)
    assert cps == 52 and -(-256 // cps) * 24 <= 132
    # 96 walkers: two segments each would take two waves, as long as the unsegmented walk's one, plus pass A
    assert chunks_per_segment([128], num_heads=48, v_blocks=2, cu_count=132) == 0


def test_planner_unsegmented_when_short():
    assert chunks_per_segment([8, 3], num_heads=1, v_blocks=1, cu_count=132) == 0
    # 16 chunks on 24 walkers: segments of 4 or 8 were slower than the one walk (1 x 1024 x 12)
    assert chunks_per_segment([16], num_heads=12, v_blocks=2, cu_count=132) == 0
    assert chunks_per_segment([17], num_heads=12, v_blocks=2, cu_count=132) == 8
    assert chunks_per_segment([], num_heads=4, v_blocks=1, cu_count=132) == 0
    assert chunks_per_segment([0, 0], num_heads=4, v_blocks=1, cu_count=132) == 0


def test_planner_segments_long_few_head_sequences():
    cps = chunks_per_segment([256], num_heads=4, v_blocks=2, cu_count=132)
    assert 1 <= cps < 256
    # floor(132 / 8) = 16 segments -> 16 chunks each
    assert cps == 16


def test_planner_caps_segment_length():
    assert chunks_per_segment([8192], num_heads=1, v_blocks=1, cu_count=2) == MAX_SEGMENT_CHUNKS


def test_planner_follows_cu_num(monkeypatch):
    from kernels import arch

    monkeypatch.setenv("CU_NUM", "4")
    assert arch.cu_count(torch.device("cpu")) == 4
    assert chunks_per_segment([64], num_heads=1, v_blocks=1, cu_count=arch.cu_count(torch.device("cpu"))) == 16


def test_planner_choice_is_used(monkeypatch):
    seen = []
    original = api._plan.chunks_per_segment

    def spy(*args):
        seen.append(original(*args))
        return seen[-1]

    monkeypatch.setattr(api._plan, "chunks_per_segment", spy)
    monkeypatch.setenv("CU_NUM", "1000")
    q, k, v, g, beta = make_inputs(1, 5, 1, seed=41)
    o, _ = flash_kda_fwd(q, k, v, g, beta)
    assert seen == [0] and torch.isfinite(o).all()


# ---------------------------------------------------------------- GPU only


@pytest.mark.gpu
@pytest.mark.parametrize("T, H, cps", [(16384, 96, None), (16384, 4, None), (4096, 2, 0)])
def test_gpu_long(T, H, cps):
    K = V = 128
    q, k, v, g, beta = make_inputs(1, T, H, K=K, V=V, seed=43, decay=0.02)
    h0 = rand_state(1, H, K, V)
    o, fin = flash_kda_fwd(q, k, v, g, beta, initial_state=h0, output_final_state=True, chunks_per_segment=cps,
                           out=nan_out(1, T, H, V))
    ref_o, ref_fin = naive_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    check(o, ref_o, 1e-2)
    check(fin, ref_fin, 1e-2, "final_state")


@pytest.mark.gpu
@pytest.mark.parametrize("cps", [0, 2])
def test_gpu_repeats_bit_for_bit(cps):
    """Twenty launches of one softplus-gated, segmented or unsegmented call give the same bits."""
    T, H, K = 2048, 8, 128
    q, k, v, g, beta = make_inputs(1, T, H, K=K, V=K, seed=47, gate="softplus")
    A_log, dt_bias = gate_params(H, K)
    h0 = rand_state(1, H, K, K)
    kwargs = dict(gate="softplus", A_log=A_log, dt_bias=dt_bias, beta_sigmoid=True, qk_l2norm=True,
                  initial_state=h0, output_final_state=True, chunks_per_segment=cps)
    first_o, first_s = (t.clone() for t in flash_kda_fwd(q, k, v, g, beta, out=nan_out(1, T, H, K), **kwargs))
    for _ in range(19):
        o, s = flash_kda_fwd(q, k, v, g, beta, out=nan_out(1, T, H, K), **kwargs)
        assert torch.equal(o, first_o) and torch.equal(s, first_s)


def _varlen(lengths, seed):
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32, device=DEVICE)
    return cu, make_inputs(1, sum(lengths), 2, seed=seed)


def test_host_offsets_plan_without_reading_the_device_and_metadata_is_kept():
    """cu_seqlens_cpu gives the same result; a second call of the same shapes copies no metadata."""
    lengths = [33, 0, 70]
    cu, (q, k, v, g, beta) = _varlen(lengths, 11)
    want, _ = flash_kda_fwd(q, k, v, g, beta, cu_seqlens=cu, out=nan_out(1, sum(lengths), 2, 64))
    kept = dict(api._meta._KEPT)
    got, _ = flash_kda_fwd(q, k, v, g, beta, cu_seqlens=cu, cu_seqlens_cpu=cu.cpu().tolist(),
                           out=nan_out(1, sum(lengths), 2, 64))
    assert torch.equal(got, want)
    assert api._meta._KEPT.keys() == kept.keys()  # nothing new copied from the host


def test_a_call_with_an_earlier_calls_sequences_builds_no_table(monkeypatch):
    """The chunk and unit tables are kept by the sequences they come from: the same sequences again
    build neither (the host time of a call no longer grows with its chunks); others build theirs."""
    cu, (q, k, v, g, beta) = _varlen([37, 0, 66], 15)
    host = [int(x) for x in cu.tolist()]
    want, _ = flash_kda_fwd(q, k, v, g, beta, cu_seqlens=cu, cu_seqlens_cpu=host, chunks_per_segment=1)

    def refuse(*args):
        raise AssertionError("a table was built again")

    monkeypatch.setattr(api._meta, "chunk_table", refuse)
    monkeypatch.setattr(api._meta, "unit_table", refuse)
    got, _ = flash_kda_fwd(q, k, v, g, beta, cu_seqlens=cu, cu_seqlens_cpu=host, chunks_per_segment=1)
    assert torch.equal(got, want)
    with pytest.raises(AssertionError, match="built again"):
        other = [0, 37, 38, 103]
        flash_kda_fwd(q, k, v, g, beta, cu_seqlens=torch.tensor(other, dtype=torch.int32, device=DEVICE),
                      cu_seqlens_cpu=other, chunks_per_segment=1)


def test_kept_metadata_stops_growing_and_is_never_evicted(monkeypatch):
    monkeypatch.setattr(api._meta, "_KEPT", {})
    monkeypatch.setattr(api._meta, "KEPT_MAX", 2)
    first = api._meta.to_device([(0, 0, 0, 5)], DEVICE)
    for n in range(1, 4):
        api._meta.to_device([(0, 0, 0, n)], DEVICE)
    assert len(api._meta._KEPT) == 2
    assert api._meta.to_device([(0, 0, 0, 5)], DEVICE) is first


@pytest.mark.parametrize("offsets, fragment", [
    ([0, 33, 33, 104], "expected the offsets of cu_seqlens"),
    ([0, 33, 103], "expected the offsets of cu_seqlens"),
])
def test_host_offsets_that_disagree_are_refused_when_checked(offsets, fragment):
    cu, (q, k, v, g, beta) = _varlen([33, 0, 70], 12)
    with pytest.raises(ValueError, match=fragment):
        flash_kda_fwd(q, k, v, g, beta, cu_seqlens=cu, cu_seqlens_cpu=offsets, validate=True)


def test_a_signature_is_checked_once_and_device_values_on_every_call(monkeypatch):
    """A second call of one argument signature skips the checks and the plan (kept with its launches),
    but what device tensors hold is checked again each call: host offsets against cu_seqlens
    (always under the interpreter, else with validate) and the paged state's slots."""
    cu = torch.tensor([0, 15, 15, 85], dtype=torch.int64, device=DEVICE)
    q, k, v, g, beta = make_inputs(1, 85, 2, seed=17)
    cache = rand_state(5, 2, 64, 64, seed=18)
    has = torch.tensor([True, False, True], device=DEVICE)
    kwargs = dict(cu_seqlens=cu, cu_seqlens_cpu=[0, 15, 15, 85], state_cache=cache, has_initial_state=has,
                  validate=True)
    want, _ = flash_kda_fwd(q, k, v, g, beta, state_indices=torch.tensor([3, 0, 1], device=DEVICE), **kwargs)

    def refuse(*args):
        raise AssertionError("checked and planned again")

    monkeypatch.setattr(api, "_checked", refuse)
    cache.copy_(rand_state(5, 2, 64, 64, seed=18))
    got, _ = flash_kda_fwd(q, k, v, g, beta, state_indices=torch.tensor([3, 0, 1], device=DEVICE), **kwargs)
    assert torch.equal(got, want)
    with pytest.raises(ValueError, match=r"\bstate_indices\b"):
        flash_kda_fwd(q, k, v, g, beta, state_indices=torch.tensor([3, 5, 1], device=DEVICE), **kwargs)
    with pytest.raises(ValueError, match=r"\bstate_indices\b"):
        flash_kda_fwd(q, k, v, g, beta, state_indices=torch.tensor([3, 3, 1], device=DEVICE), **kwargs)
    with pytest.raises(ValueError, match="cu_seqlens_cpu: expected the offsets of cu_seqlens"):
        flash_kda_fwd(q, k, v, g, beta, state_indices=torch.tensor([3, 0, 1], device=DEVICE),
                      **dict(kwargs, cu_seqlens=torch.tensor([0, 15, 16, 85], dtype=torch.int64, device=DEVICE)))


def test_host_offsets_without_cu_seqlens_are_refused():
    q, k, v, g, beta = make_inputs(1, 20, 1, seed=13)
    with pytest.raises(ValueError, match="cu_seqlens_cpu: expected None without cu_seqlens"):
        flash_kda_fwd(q, k, v, g, beta, cu_seqlens_cpu=[0, 20])


def _capture_case(varlen, cps, seed):
    """(inputs q, k, v, g, beta, initial state, keyword arguments) of a call that copies nothing from
    the host: varlen with host offsets (K = V = 64, log gate) or fixed length in two batch rows
    (K = V = 128, the bench's lower-bounded gate with beta through a sigmoid and q, k normalised)."""
    if varlen:
        lengths = [700, 0, 1300, 64]
        cu, inputs = _varlen(lengths, seed)
        kwargs = dict(cu_seqlens=cu, cu_seqlens_cpu=[int(x) for x in cu.tolist()])
        n, heads, dim = len(lengths), 2, 64
    else:
        n, heads, dim = 2, 3, 128
        inputs = make_inputs(n, 700, heads, K=dim, V=dim, seed=seed, gate="lower_bound")
        A_log, dt_bias = gate_params(heads, dim, seed=seed)
        kwargs = dict(gate="lower_bound", A_log=A_log, dt_bias=dt_bias, lower_bound=-5.0, beta_sigmoid=True,
                      qk_l2norm=True)
    kwargs.update(chunks_per_segment=cps, output_final_state=True)
    return inputs, rand_state(n, heads, dim, dim, seed=seed), kwargs


@pytest.mark.gpu
@pytest.mark.parametrize("varlen", [False, True], ids=["fixed", "varlen"])
@pytest.mark.parametrize("cps", [0, 2])
def test_gpu_call_is_captured_and_replays_on_new_inputs(varlen, cps):
    """A call that copies nothing from the host (fixed length, or varlen with host offsets; no paged
    state) is captured in a CUDA graph once a call of its shapes has run; the graph, replayed after new
    inputs and a new initial state are copied into the captured ones, gives the bits of an eager call on
    those new inputs."""
    first, h_first, kwargs = _capture_case(varlen, cps, seed=14)
    second, h_second, _ = _capture_case(varlen, cps, seed=15)
    kwargs["workspace"] = {}
    inputs, h0 = [x.clone() for x in first], h_first.clone()
    seen_o, _ = flash_kda_fwd(*inputs, initial_state=h0, **kwargs)  # the shapes' plan and metadata
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o, s = flash_kda_fwd(*inputs, initial_state=h0, **kwargs)
    for x, new in zip((*inputs, h0), (*second, h_second)):
        x.copy_(new)
    o.fill_(float("nan"))
    s.fill_(float("nan"))
    graph.replay()
    want_o, want_s = flash_kda_fwd(*second, initial_state=h_second, **kwargs)
    torch.cuda.synchronize()
    assert not torch.equal(want_o, seen_o)  # the new inputs give another output
    assert torch.equal(o, want_o) and torch.equal(s, want_s)


def test_state_slots_past_the_cache_are_clamped_in_the_kernel(monkeypatch):
    """The host refuses bad slots; the kernels clamp them as well, so a call that got past the check
    reads and writes only the cache's own slots: the guard slots around it stay as they were."""
    monkeypatch.setattr(api, "_check_slots", lambda *args: None)
    cu = torch.tensor([0, 20, 50, 64], dtype=torch.int64, device=DEVICE)
    q, k, v, g, beta = make_inputs(1, 64, 2, seed=21)
    big = rand_state(7, 2, 64, 64, seed=22)
    before = big.clone()
    cache = big[1:6]
    idx = torch.tensor([1 << 20, -5, 2], dtype=torch.int32, device=DEVICE)
    has = torch.tensor([True, True, False], device=DEVICE)
    o, _ = flash_kda_fwd(q, k, v, g, beta, cu_seqlens=cu, state_cache=cache, state_indices=idx,
                         has_initial_state=has, out=nan_out(1, 64, 2, 64))
    assert torch.isfinite(o).all()
    assert torch.equal(big[0], before[0]) and torch.equal(big[6], before[6])
    assert not torch.equal(big[5], before[5]) and not torch.equal(big[1], before[1])  # slots 4 and 0
