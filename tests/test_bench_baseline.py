"""bench.baseline: another checkout's kernels load beside ours and leave ours in place."""

import shutil
import sys
from pathlib import Path

import pytest

from bench import baseline

import kernels.paged_decode as ours


def test_a_checkout_loads_beside_ours(tmp_path):
    shutil.copytree(Path(ours.__file__).parents[1], tmp_path / "kernels")
    (tmp_path / "kernels" / "paged_decode" / "tuning.py").write_text(
        (tmp_path / "kernels" / "paged_decode" / "tuning.py").read_text() + "\nMARK = 'baseline'\n")
    theirs = baseline.load(str(tmp_path))
    assert theirs is not ours and Path(theirs.__file__).is_relative_to(tmp_path)
    assert theirs.api._tuning.MARK == "baseline" and not hasattr(ours.api._tuning, "MARK")
    assert sys.modules["kernels.paged_decode"] is ours


def test_a_directory_without_kernels_is_refused(tmp_path):
    with pytest.raises(ValueError, match="--baseline: expected a checkout holding kernels/__init__.py"):
        baseline.load(str(tmp_path))
