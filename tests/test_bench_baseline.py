"""bench.baseline: another checkout's kernels load beside ours and leave ours in place."""

import shutil
import sys
from pathlib import Path

import pytest
import torch

from bench import baseline, kda

import kernels.kda as our_kda
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


def test_the_kda_entry_of_a_checkout_runs_beside_ours(tmp_path):
    shutil.copytree(Path(ours.__file__).parents[1], tmp_path / "kernels")
    theirs = baseline.load(str(tmp_path), "kernels.kda")
    assert theirs is not our_kda and Path(theirs.__file__).is_relative_to(tmp_path)
    assert theirs.flash_kda_fwd is not our_kda.flash_kda_fwd and sys.modules["kernels.kda"] is our_kda
    x = kda.inputs(kda.Shape(1, 70, 1), torch.device("cpu"))
    o_ours, s_ours = kda.ours(x)()
    o_theirs, s_theirs = kda.ours(x, theirs.flash_kda_fwd)()
    assert torch.equal(o_ours, o_theirs) and torch.equal(s_ours, s_theirs)
