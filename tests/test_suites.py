"""Every case of the tier's suites, one test each, judged by the gate.

Test ids are the case ids, so `pytest -k <part of an id>` selects cases the
same way `quantfloor run -k` does.
"""

import pytest

from verify import runner


def pytest_generate_tests(metafunc):
    if "job" in metafunc.fixturenames:
        jobs = runner.jobs(metafunc.config.quantfloor_tier)
        metafunc.parametrize("job", jobs, ids=[j.case_id for j in jobs])


def test_case_passes_the_gate(job, device):
    verdict = job.judge(device)
    if verdict.skipped:  # outside what the implementation under test (--impl) declares it supports
        pytest.skip(verdict.reasons[0])
    assert verdict.passed, f"{job.case_id}: " + "; ".join(verdict.reasons)
