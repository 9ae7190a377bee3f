"""The gate on synthetic outputs: what passes, what fails and why."""

import math

import torch

from verify import gate, tolerances


def _pair(n=64):
    ref = torch.randn(2, 3, n, dtype=torch.float64)
    return ref.to(torch.bfloat16), ref


def test_a_rounded_copy_passes_a_quarter_of_the_floor():
    out, ref = _pair()
    v = gate.judge("s", "c", {"out": (out, ref)}, 0.1, tolerances.FP8_FLOOR_FRACTION)
    assert v.passed and v.max_abs <= v.detail["bound"]


def test_an_error_past_the_bound_fails_and_says_where():
    out, ref = _pair()
    out = out.clone()
    out[1, 2, 5] += 1.0
    v = gate.judge("s", "c", {"out": (out, ref)}, 0.1, tolerances.FP8_FLOOR_FRACTION)
    assert not v.passed and "max abs err" in v.reasons[0] and "(1, 2, 5)" in v.reasons[0]
    assert v.err_floor > 9


def test_an_unwritten_element_fails_as_not_finite():
    out, ref = _pair()
    out = out.clone()
    out[0, 0, 0] = float("nan")
    v = gate.judge("s", "c", {"out": (out, ref)}, 10.0, 1.0)
    assert not v.passed and "not written or not finite" in v.reasons[0] and math.isnan(v.err_floor)


def test_rows_that_see_no_key_must_be_exactly_zero():
    ref = torch.zeros(2, 3, 8, dtype=torch.float64)
    ref[0] = 1.0
    out = ref.to(torch.bfloat16).clone()
    empty = torch.tensor([[False] * 3, [True] * 3])
    assert gate.judge("s", "c", {"out": (out, ref)}, 0.5, 0.25, zero_rows=empty).passed
    out[1, 2, 7] = 1e-3
    v = gate.judge("s", "c", {"out": (out, ref)}, 0.5, 0.25, zero_rows=empty)
    assert not v.passed and any("see no key" in r for r in v.reasons)


def test_zero_floor_demands_exactness_and_rms_cap_bites():
    ref = torch.zeros(4, 4, dtype=torch.float64)
    assert gate.judge("s", "c", {"o": (ref.float(), ref)}, 0.0, 4.0).passed
    assert not gate.judge("s", "c", {"o": (ref.float() + 1e-6, ref)}, 0.0, 4.0).passed
    ref = torch.randn(64, 64, dtype=torch.float64)
    noisy = ref * (1 + 0.01 * torch.randn_like(ref))
    v = gate.judge("s", "c", {"o": (noisy.float(), ref)}, 1.0, 4.0, rms_max=tolerances.KDA_RMS_RATIO_MAX)
    assert not v.passed and "rms ratio" in v.reasons[0]


def test_kda_rms_cap_follows_an_ill_conditioned_floor_only_upwards():
    assert tolerances.kda_rms_cap(0.0) == tolerances.KDA_RMS_RATIO_MAX
    assert tolerances.kda_rms_cap(1e-3) == tolerances.KDA_RMS_RATIO_MAX
    assert tolerances.kda_rms_cap(0.012) == tolerances.KDA_RMS_FLOOR_MULTIPLE * 0.012
    ref = torch.randn(64, 64, dtype=torch.float64)
    noisy = (ref * (1 + 0.01 * torch.randn_like(ref))).float()
    caps = {"o": tolerances.kda_rms_cap(0.012), "state": tolerances.kda_rms_cap(0.0)}
    v = gate.judge("s", "c", {"o": (noisy, ref), "state": (noisy, ref)}, 1.0, 4.0, rms_max=caps)
    assert not v.passed and len(v.reasons) == 1 and v.reasons[0].startswith("state: rms ratio")


def test_per_output_floors_and_the_worst_is_reported():
    a_out, a_ref = _pair()
    b_ref = torch.randn(5, dtype=torch.float64)
    b_out = (b_ref + 0.3).float()
    v = gate.judge("s", "c", {"o": (a_out, a_ref), "state": (b_out, b_ref)}, {"o": 0.1, "state": 1.0}, 4.0)
    assert v.passed and v.floor == 1.0 and abs(v.err_floor - 0.3) < 1e-6 and v.detail["worst"].startswith("state")
