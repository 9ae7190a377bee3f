"""bench.kda on a machine without a GPU: its varlen offsets, its inputs, and its refusal."""

import pytest
import torch

from bench import kda


def test_varlen_offsets_are_mixed_lengths_that_pack_the_tokens():
    for count in (8, 64):
        cu = kda._offsets(16384, count, 99)
        lengths = [b - a for a, b in zip(cu, cu[1:])]
        assert cu[0] == 0 and cu[-1] == 16384 and len(lengths) == count
        assert min(lengths) >= 1 and max(lengths) > 2 * min(lengths)
        assert kda._offsets(16384, count, 99) == cu


def test_inputs_are_shared_and_the_varlen_rows_carry_both_offsets():
    x = kda.inputs(kda.Shape(1, 96, 2, seqs=3), torch.device("cpu"))
    assert x["q"].shape == (1, 96, 2, kda.DIM) and x["beta"].shape == (1, 96, 2)
    assert x["cu_t"].dtype == torch.int64 and x["cu_t"].tolist() == x["cu"]
    assert x["A_log"].shape == (2,) and x["dt_bias"].shape == (2 * kda.DIM,)
    assert kda.inputs(kda.Shape(2, 64, 2), torch.device("cpu"))["cu_t"] is None


def test_shape_bytes_count_inputs_output_and_final_states():
    s = kda.Shape(1, 1024, 12)
    assert s.bytes == 1024 * 12 * (5 * 128 + 1) * 2 + 12 * 128 * 128 * 4
    assert kda.Shape(1, 16384, 32, seqs=8).sequences == 8


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_it_says_so(capsys):
    assert kda.main([]) == 2
    assert "needs a GPU" in capsys.readouterr().err


def test_summary_gives_the_geomean_of_the_peers_time_over_ours_and_the_rows_ours_loses():
    rows = [dict(shape="a", ours_over_fla=0.5), dict(shape="b", ours_over_fla=2.0), dict(shape="c", ours_over_fla=0.125)]
    assert kda.summary(rows, "fla") == "fla / ours: geomean 2.000 over 3 rows; ours slower at b"
    assert kda.summary(rows[:1], "fla").endswith("ours slower at no row")


def test_segment_lists_are_ints_from_zero_on():
    assert kda.segment_list("0,4,16") == (0, 4, 16)
    for bad in ("", "4,x", "-1", "2.5"):
        with pytest.raises(Exception, match="expected comma-separated ints >= 0"):
            kda.segment_list(bad)


def test_schedule_reads_what_the_walk_launches_as_without_running_it():
    """1024 tokens are 16 chunks: the planner keeps one sequence unsegmented on a CPU's one unit
    of compute, and 4 chunks a segment forced make 4 segments."""
    x = kda.inputs(kda.Shape(1, 1024, 2), torch.device("cpu"))
    assert kda.schedule(kda.ours(x)) == "unsegmented"
    assert kda.schedule(kda.ours(x, chunks_per_segment=4)) == "4 segments"
    assert kda.schedule(kda.ours(x, chunks_per_segment=0)) == "unsegmented"


def test_segments_takes_neither_a_baseline_nor_kernels(capsys):
    for extra in (["--baseline", "."], ["--kernels"]):
        with pytest.raises(SystemExit) as exc:
            kda.main(["--segments", *extra])
        assert exc.value.code == 2
        assert "--segments times our forward alone" in capsys.readouterr().err


def test_segments_row_times_auto_against_each_forced_schedule(monkeypatch):
    """The row of --segments, its timing stood in for (CUDA graphs need a GPU): auto and each forced
    value timed together, what each launches as, and each output against auto's."""
    from bench.timing import Timed

    seen = {}

    def fake_interleaved(fns, *, calls, rounds):
        seen.update(fns=list(fns), calls=calls, rounds=rounds)
        return {name: Timed(10.0 + i, 1.0 + i / 10, (1.0, 1.2)) for i, name in enumerate(fns)}

    monkeypatch.setattr(kda, "interleaved", fake_interleaved)
    row = kda.segments(kda.Shape(1, 256, 1), torch.device("cpu"), 2, (0, 2))
    assert seen == dict(fns=["auto", "cps 0", "cps 2"], calls=3, rounds=2)
    assert row["auto_chose"] == "unsegmented" and row["best"] == "auto"
    sched = row["schedules"]
    assert sched["cps 2"]["launches"] == "2 segments" and sched["cps 0"]["launches"] == "unsegmented"
    assert sched["auto"]["rms_o"] == 0.0 and sched["cps 0"]["rms_o"] == 0.0
    assert sched["cps 2"]["rms_o"] < 1e-2
    assert sched["cps 2"]["us"] == 12.0 and sched["cps 2"]["ratio_to_auto"] == 1.2
