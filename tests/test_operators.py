"""One place per operator (verify.operators): routing by id and case, and an operator added in one record."""

from dataclasses import dataclass

import pytest
import torch

from verify import gate, impls, operators, runner


def test_each_tier_case_lands_in_one_of_its_operators_suites():
    for op in operators.OPERATORS.values():
        cases = op.cases("cpu")
        assert cases, op.name
        for case in cases:
            assert operators.of_case(case) is op
            assert operators.of_id(case.id) is op
            assert op.suite_of(case) in op.suites


def test_an_id_of_no_operator_is_refused_by_name():
    assert operators.of_id("probe-two-streams") is None
    with pytest.raises(ValueError, match="expected one starting with decode- or kda-"):
        operators.parse_id("mla-b1-t4")


@dataclass(frozen=True)
class Toy:
    """A case of an operator the suite did not know: ids toy-<n>."""

    n: int

    @property
    def id(self) -> str:
        return f"toy-{self.n}"

    @classmethod
    def from_id(cls, case_id: str) -> "Toy":
        return cls(int(case_id.split("-")[1]))


def test_an_operator_is_added_by_its_record_alone(monkeypatch):
    toy = operators.Operator(
        name="toy", case_type=Toy, suites=("toy",), cases=lambda tier: [Toy(1), Toy(2)],
        suite_of=lambda case: "toy",
        verdict=lambda case, device, impl: gate.failed("toy", case.id, f"judged on {impl.name}"),
        work_units=lambda case: case.n, size=lambda case: (case.n,), moves=lambda case: [], heat=(),
        ours_alone={})
    monkeypatch.setitem(operators.OPERATORS, "toy", toy)
    monkeypatch.setitem(runner._IMPLS, "toy", impls.Impl("toy", "triton", "0"))
    jobs = [j for j in runner.jobs("cpu") if j.suite == "toy"]
    assert [j.case_id for j in jobs] == ["toy-1", "toy-2"]
    assert runner.job_for_id("toy-2").judge(torch.device("cpu")).reasons == ("judged on triton",)
    assert runner.work_units("toy-7") == 7
