"""The adversarial KDA tags build what they claim, and the tiers run each through every schedule and state."""

import itertools

import pytest
import torch

from cases import kda as kda_cases
from cases.kda import KdaCase
from reference.kda import gate_log_decay
from verify.device import seed_of

FP32_EXP_UNDERFLOW = -104.0  # exp(x) is 0 in fp32 for x below about -103.97
PROFILE_FIELDS = ("gate", "beta_sigmoid", "l2norm", "tag", "dtype")
NEW_ROWS = ("nodecay", "zerokey", "beta01", "bigvalues", "slowdecay", "fp16")


def _build(**fields) -> kda_cases.KdaInputs:
    case = KdaCase(h=2, dim=64, b=1, t=200, **fields)
    return kda_cases.build(case, torch.device("cpu"), seed_of(case.id))


def _log_decay(inputs) -> torch.Tensor:
    kw = inputs.kwargs
    return gate_log_decay(inputs.g, gate=kw["gate"], A_log=kw.get("A_log"), dt_bias=kw.get("dt_bias"),
                          lower_bound=kw.get("lower_bound"))


@pytest.mark.parametrize("gate", kda_cases.GATES)
def test_nodecay_log_decay_is_exactly_zero(gate):
    inputs = _build(gate=gate, tag="nodecay")
    assert torch.equal(_log_decay(inputs), torch.zeros_like(inputs.g, dtype=torch.float64))
    if gate != "log":  # in fp32 too: the kernel's exp(-|x|) and exp(-rate x) under- and overflow
        x = inputs.g.float() + inputs.kwargs["dt_bias"].view(2, 64)
        assert x.max() < FP32_EXP_UNDERFLOW


def test_zerokey_zeroes_random_rows_a_whole_chunk_and_both_ends():
    inputs = _build(l2norm=True, tag="zerokey")
    zero = (inputs.k == 0).all(-1)[0]  # [T, H]
    assert zero[0].all() and zero[-1].all()
    middle = (200 // kda_cases.CHUNK) // 2 * kda_cases.CHUNK
    assert zero[middle:middle + kda_cases.CHUNK].all()
    others = torch.ones(200, dtype=torch.bool)
    others[[0, -1]] = False
    others[middle:middle + kda_cases.CHUNK] = False
    assert 0.05 < zero[others].float().mean() < 0.3
    assert not (inputs.q == 0).all(-1).any()


@pytest.mark.parametrize("sig", [False, True])
def test_beta01_holds_exact_zeros_and_ones(sig):
    inputs = _build(beta_sigmoid=sig, tag="beta01")
    x = inputs.beta.float()
    beta = 1.0 / (1.0 + torch.exp(-x)) if sig else x  # the kernel's sigmoid, in fp32
    assert (beta == 0).float().mean() > 0.2 and (beta == 1).float().mean() > 0.2
    assert ((beta > 0) & (beta < 1)).float().mean() > 0.2
    if sig:
        assert torch.equal(torch.sigmoid(x.double())[beta == 1], torch.ones_like(x.double()[beta == 1]))
        assert torch.sigmoid(x.double())[beta == 0].max() < 1e-50


def test_bigvalues_v_around_1e4_past_float16_and_states_to_match():
    inputs = _build(l2norm=True, state="dense", tag="bigvalues")
    v = inputs.v.float().abs()
    assert 5e3 < v.mean() < 3e4
    assert v.max() > torch.finfo(torch.float16).max
    assert inputs.kwargs["initial_state"].abs().mean() > 1e3
    assert inputs.q.float().norm(dim=-1).min() > 1e4  # raw q and k large: the kernel normalizes them
    with pytest.raises(ValueError, match="bigvalues"):
        KdaCase(h=1, dim=64, t=1, dtype="f16", tag="bigvalues")


@pytest.mark.parametrize("gate", kda_cases.GATES)
def test_slowdecay_keeps_most_channels_within_a_percent_of_one(gate):
    decay = _log_decay(_build(gate=gate, tag="slowdecay")).exp()  # [B, T, H, K]
    per_channel = decay.median(dim=1).values.flatten()
    slow = (per_channel > 0.99) & (per_channel < 1)
    assert slow.float().mean() > 0.8
    assert (per_channel < 0.97).any()
    assert ((decay > 0.99) & (decay < 1)).float().mean() > 0.7


def test_fp16_cases_hand_float16_to_the_kernel():
    inputs = _build(dtype="f16", gate="lower_bound", beta_sigmoid=True)
    for x in (inputs.q, inputs.k, inputs.v, inputs.g, inputs.beta, inputs.out):
        assert x.dtype == torch.float16
    assert _build().q.dtype == torch.bfloat16
    assert "-f16-" in KdaCase(h=1, dim=64, t=1, dtype="f16").id
    assert "bf16" not in KdaCase(h=1, dim=64, t=1).id


def _cells(cases):
    return {(c.tag or c.dtype, c.schedule, c.state) for c in cases}


@pytest.mark.parametrize("tier", ["cpu", "gpu"])
def test_tiers_run_every_row_through_every_schedule_and_state(tier):
    cases = kda_cases.kda_cases(tier)
    rows = kda_cases.CPU_ROWS if tier == "cpu" else tuple(kda_cases.MATRIX_ROWS)
    assert set(NEW_ROWS) <= set(rows)
    names = {"fp16": "f16"}
    want = {(names.get(r, r), s, st) for r, s, st in
            itertools.product(rows, kda_cases.SCHEDULES, kda_cases.MATRIX_STATES)}
    assert want <= _cells(cases)
    assert {"unsegmented", "segmented1", "segmented2", "segmented8"} <= set(kda_cases.SCHEDULES)
    assert {"none", "dense"} <= set(kda_cases.MATRIX_STATES)
    if tier == "gpu":  # every profile of a row in every cell
        defaults = KdaCase(h=1, dim=64)
        held = {(c.gate, c.beta_sigmoid, c.l2norm, c.tag, c.dtype, c.schedule, c.state) for c in cases}
        for profiles in kda_cases.MATRIX_ROWS.values():
            for fields in profiles:
                profile = tuple(fields.get(f, getattr(defaults, f)) for f in PROFILE_FIELDS)
                for cell in itertools.product(kda_cases.SCHEDULES, kda_cases.MATRIX_STATES):
                    assert profile + cell in held, (profile, cell)


def test_cpu_matrix_has_segments_to_hand_states_across():
    for case in kda_cases.matrix_cases("cpu"):
        chunks = -(-case.t // kda_cases.CHUNK)
        if case.schedule.startswith("segmented"):
            assert chunks > case.chunks_per_segment, case.id


def test_new_ids_parse_back():
    for tier in ("cpu", "gpu"):
        for case in kda_cases.matrix_cases(tier):
            assert KdaCase.from_id(case.id) == case
