"""The kill matrix: each mutant (one fix taken back) FAILS its regression case,
and the real code PASSES it."""

import pytest

from verify import mutants


def pytest_generate_tests(metafunc):
    if "mutant" in metafunc.fixturenames:
        tier = metafunc.config.quantfloor_tier
        chosen = [m for m in mutants.MUTANTS if tier != "cpu" or not mutants.regression_of(m).gpu]
        metafunc.parametrize("mutant", chosen, ids=[m.name for m in chosen])


# Time limit on top of each case's size term for endless-loop, whose mutant runs until it is
# stopped (its real case takes a few seconds); every other mutant gets the runner's default, so
# a slow, busy machine does not turn a real case into a timeout.
ENDLESS_BASE_S = 30.0


def test_mutant_is_killed(mutant, tier):
    base = ENDLESS_BASE_S if mutant.name == "endless-loop" else None
    (row,) = mutants.kill_matrix(tier, names=[mutant.name], timeout_base=base)
    assert row.real.passed, f"real code fails {row.case_id}: {row.real.reasons}"
    assert not row.mutated.passed, f"mutant {mutant.name} survived {row.case_id}"


def test_every_mutant_snippet_occurs_once():
    for mutant in mutants.MUTANTS:
        with mutants.applied(mutant) as module:
            assert module is not None


def test_mutant_is_not_left_behind(device):
    from kernels.paged_decode import api

    before = api._plan
    with mutants.applied(mutants.by_name("capped-partitions")):
        assert api._plan is not before
    assert api._plan is before


def test_a_mutant_whose_snippet_moved_is_refused_not_counted_killed(monkeypatch):
    """Planted in a worker, a snippet that no longer occurs fails the case for that alone, which would
    read as killed: the matrix refuses such a mutant before any worker starts."""
    real = mutants.by_name("kda-beta-sigmoid-overflow")
    stale = mutants.Mutant("stale-snippet", real.module, real.holder, real.attr, "no such code", "x")
    monkeypatch.setattr(mutants, "MUTANTS", (*mutants.MUTANTS, stale))
    monkeypatch.setattr(mutants, "regression_of", lambda m: mutants.regressions.by_name(real.name))
    with pytest.raises(RuntimeError, match="mutant stale-snippet: expected the snippet exactly once"):
        mutants.kill_matrix("cpu", names=["stale-snippet"])
