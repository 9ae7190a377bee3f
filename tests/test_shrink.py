"""Shrinking: a planted mutant's long failing case comes down to a short one that fails the
same way, a passing case and a probe are refused, and every move makes a case smaller."""

import pytest
import torch

from cases.decode import DecodeCase
from cases.kda import KdaCase
from verify import gate, mutants, runner, shrink

LONG = "decode-e4m3fn-token-b32-hq32-hkv8-d128-w100-L300_200-q4-shuffled-cu256-split"


def _judged(out, *, zero_rows=None, rms_max=None):
    ref = torch.ones(2, 4)
    return gate.judge("decode-onepass", "x", {"out": (out, ref)}, 0.1, 0.25, zero_rows=zero_rows, rms_max=rms_max)


def test_reason_classes_read_the_gates_own_reasons():
    ones = torch.ones(2, 4)
    holed = ones.clone()
    holed[0, 0] = float("nan")
    assert shrink.reason_class(_judged(ones)) == ""
    assert shrink.reason_class(_judged(ones + 1)) == "bound"
    assert shrink.reason_class(_judged(holed)) == "nonfinite"
    assert shrink.reason_class(_judged(ones + 1, zero_rows=torch.tensor([True, False]))) == "zero-rows"
    assert shrink.reason_class(_judged(ones + 0.01, rms_max=1e-6)) == "rms"
    raised = gate.failed("decode-onepass", "x", "raised ValueError: query: expected head size D in (64, 128, 256)")
    assert shrink.reason_class(raised) == "raised:ValueError:query"
    assert shrink.reason_class(gate.failed("decode-onepass", "x", "raised RuntimeError: out of memory")) \
        == "raised:RuntimeError"


def test_every_move_is_a_valid_strictly_smaller_case():
    case = DecodeCase.from_id(LONG)
    found = shrink.candidates(case)
    assert all(shrink.size(c) < shrink.size(case) for c in found)
    assert [shrink.size(c) for c in found] == sorted(shrink.size(c) for c in found)
    assert {(c.hq, c.hkv) for c in found} >= {(1, 1), (4, 1), (16, 4), (28, 7)}
    assert {c.lens for c in found} >= {(300,), (200,), (99, 200), (100, 200), (101, 200), (300, 103), (150, 100)}
    assert {c.q for c in found} == {1, 2, 3, 4} and {c.d for c in found} == {64, 128}
    assert {c.window for c in found} == {1, 50, 99, 100} and {c.block for c in found} == {16, 32}
    kda = KdaCase(h=4, dim=128, b=3, t=130, state="dense")
    shorter = shrink.candidates(kda)
    assert {c.t for c in shorter} >= {1, 65, 127, 128, 129, 130} and {c.b for c in shorter} == {1, 2, 3}
    assert {c.h for c in shorter} == {1, 2, 3, 4} and {c.dim for c in shorter} == {64, 128}
    assert all(shrink.size(c) < shrink.size(kda) for c in shorter)


def test_a_planted_mutant_shrinks_to_a_short_case_that_fails_the_same_way(device):
    mutant = mutants.by_name("reduce-batch-stride")
    original = mutants.regression_of(mutant).case  # three sequences, 1050 keys, 8 query heads
    with mutants.applied(mutant):
        result = shrink.shrink(original.id, device, max_evals=100)
    reason = result.original.reason  # NaN: the fold reads sequence 0's scratch where it wrote none
    assert not result.original.verdict.passed and reason == "nonfinite"
    assert result.steps and not result.capped
    sizes = [shrink.size(shrink.parse(s.case_id)) for s in (result.original,) + result.steps]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == len(sizes)
    smallest = shrink.parse(result.smallest.case_id)
    assert all(s.reason == reason and not s.verdict.passed for s in result.steps)
    assert sum(smallest.lens) < 100 and len(smallest.lens) == 2  # the fold needs a second sequence
    assert smallest.hq == smallest.hkv == 1 and smallest.path == "split" and smallest.tag == original.tag
    assert runner.case_verdict(smallest, device).passed  # the real code: the failure is the mutant's


def test_a_passing_case_and_a_probe_are_refused(device):
    case_id = mutants.regression_of(mutants.by_name("window-off-by-one")).case.id
    result = shrink.shrink(case_id, device)
    assert result.original.verdict.passed and result.steps == () and result.evaluations == 1
    with pytest.raises(ValueError, match="a probe .* has no shape to shrink"):
        shrink.shrink("probe-head-churn", device)
    with pytest.raises(ValueError, match="max_evals: expected an integer >= 1, got 0"):
        shrink.shrink(case_id, device, max_evals=0)


def _fake_verdict(case, device):
    """A stand-in judge: 100 keys or more fail the bound, fewer (but some) fail as non-finite."""
    keys = sum(case.lens)
    reason = "out: max abs err 9 > bound 1 (0.25 x floor 1 + eps) at (0,)" if keys >= 100 else \
        "out: 3 elements not written or not finite (first at (0,))"
    return gate.failed(runner.suite_of(case), case.id, reason) if keys else \
        gate.judge(runner.suite_of(case), case.id, {"out": (torch.zeros(1), torch.zeros(1))}, 1.0, 0.25)


def test_only_a_failure_of_the_same_class_is_taken_and_the_cap_holds(monkeypatch, device):
    monkeypatch.setattr(runner, "case_verdict", _fake_verdict)
    result = shrink.shrink(LONG, device)
    smallest = shrink.parse(result.smallest.case_id)
    assert not result.capped and smallest.lens == (100,) and result.smallest.reason == "bound"
    assert (smallest.hq, smallest.hkv, smallest.q, smallest.d, smallest.window, smallest.block) == (1, 1, 1, 64, 1, 16)
    capped = shrink.shrink(LONG, device, max_evals=3)
    assert capped.capped and capped.evaluations == 3 and len(capped.steps) <= 2
