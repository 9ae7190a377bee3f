"""Floors at the precision the kernel computes in (verify.floors through the kernels' dot-dtype reports).

An unquantized path's floor is the error of a same-precision implementation whose
matrix-product operands take the dtype the kernel's own dots take on the device:
bf16 compiled, fp32 under the Triton interpreter. A bf16 floor for an fp32 path is
some 10^4 times too loose for a KDA state, so a state wrong by 1e-3 would pass.
"""

import functools

import pytest
import torch

from cases import decode as decode_cases
from cases import kda as kda_cases
from kernels import arch
from kernels import kda as kda_kernels
from kernels import paged_decode
from verify import adapters, floors, gate, runner
from verify.device import seed_of

# A per-token scaled bf16 cache over 200 and 33 keys: P rounded to bf16 shows.
DECODE_CASE = decode_cases.DecodeCase.from_id("decode-bf16-token-b16-hq8-hkv2-d64-w0-L200_33-q1-plain-onepass")
KDA_CASE = kda_cases.KdaCase(h=1, dim=64, b=1, t=65, state="dense")


def _reporting(monkeypatch, dtype):
    """Make both kernels report `dtype` as their dots' operand dtype."""
    monkeypatch.setattr(paged_decode, "dot_dtype", lambda query_dtype, device: dtype)
    monkeypatch.setattr(kda_kernels, "dot_dtype", lambda device: dtype)


def test_the_kernels_report_fp32_dots_exactly_where_they_run_interpreted(device):
    interpreted = arch.arch_name(device) == "cpu"
    for dtype in (torch.bfloat16, torch.float16):
        assert paged_decode.dot_dtype(dtype, device) == (torch.float32 if interpreted else dtype)
    assert kda_kernels.dot_dtype(device) == (torch.float32 if interpreted else torch.bfloat16)


def test_the_decode_floor_follows_the_reported_dot_dtype(device, monkeypatch):
    inputs = decode_cases.build(DECODE_CASE, device, seed_of(DECODE_CASE.id))
    reported = adapters.decode_dot_dtype(inputs)
    matched = floors.decode(inputs).floor
    floor_of = {}
    for dtype in (torch.float32, torch.bfloat16):
        _reporting(monkeypatch, dtype)
        floor_of[dtype] = floors.decode(inputs).floor
    assert floor_of[torch.bfloat16] > 2 * floor_of[torch.float32] > 0
    assert matched == floor_of[reported]


def test_the_kda_floors_follow_the_reported_dot_dtype(device, monkeypatch):
    inputs = kda_cases.build(KDA_CASE, device, seed_of(KDA_CASE.id))
    reported = adapters.kda_dot_dtype(inputs)
    outputs = {"o": inputs.out, "state": inputs.kwargs["initial_state"]}  # floors need only their shapes
    matched = floors.kda(inputs, outputs)[1]
    floor_of = {}
    for dtype in (torch.float32, torch.bfloat16):
        _reporting(monkeypatch, dtype)
        floor_of[dtype] = floors.kda(inputs, outputs)[1]
    assert floor_of[torch.bfloat16]["state"] > 1e3 * floor_of[torch.float32]["state"] > 0
    assert floor_of[torch.bfloat16]["o"] > floor_of[torch.float32]["o"] > 0
    assert matched == floor_of[reported]


@functools.lru_cache(maxsize=1)
def _kda_outputs(device):
    """The kernel's outputs on KDA_CASE, run once."""
    outputs, untouched = adapters.kda(kda_cases.build(KDA_CASE, device, seed_of(KDA_CASE.id)))
    assert untouched
    return outputs


def test_a_kda_state_off_by_1e_3_fails_the_matched_floor_and_passed_the_bf16_one(device, monkeypatch):
    inputs = kda_cases.build(KDA_CASE, device, seed_of(KDA_CASE.id))
    if adapters.kda_dot_dtype(inputs) != torch.float32:
        pytest.skip("the kernel's dots take bf16 here: its matched floor is the bf16 one")
    real = _kda_outputs(device)
    assert runner.case_verdict(KDA_CASE, device).passed
    state = real["state"].clone()
    state[0, 0, 3, 5] += 1e-3
    monkeypatch.setattr(adapters, "kda", lambda inputs: ({"o": real["o"], "state": state}, True))
    verdict = runner.case_verdict(KDA_CASE, device)
    assert not verdict.passed and verdict.reasons[0].startswith("state: max abs err")
    _reporting(monkeypatch, torch.bfloat16)
    assert runner.case_verdict(KDA_CASE, device).passed


def test_a_decode_output_off_by_a_few_floors_fails_the_matched_floor_and_passed_the_bf16_one(device, monkeypatch):
    inputs = decode_cases.build(DECODE_CASE, device, seed_of(DECODE_CASE.id))
    if adapters.decode_dot_dtype(inputs) != torch.float32:
        pytest.skip("the kernel's dots take bf16 here: its matched floor is the bf16 one")
    matched = floors.decode(inputs)
    with monkeypatch.context() as patch:
        _reporting(patch, torch.bfloat16)
        loose = floors.decode(inputs)
    ref8 = matched.ref8
    ref_max = float(ref8.abs().max())
    tight_bound, loose_bound = (gate.bound(j.floor, j.multiple, torch.bfloat16, ref_max) for j in (matched, loose))
    # One element, the largest, off by the middle of the two bounds (after its rounding to bf16).
    worst = ref8.abs().argmax()
    out = ref8.to(torch.bfloat16)
    out.view(-1)[worst] = (ref8.reshape(-1)[worst] + (tight_bound + loose_bound) / 2).to(torch.bfloat16)
    err = float((out.double() - ref8).abs().max())
    assert tight_bound < err < loose_bound
    monkeypatch.setattr(adapters, "decode", lambda inputs: out)
    assert not runner.case_verdict(DECODE_CASE, device).passed
    _reporting(monkeypatch, torch.bfloat16)
    assert runner.case_verdict(DECODE_CASE, device).passed
