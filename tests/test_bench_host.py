"""bench.host on a machine without a GPU: its interleaved rounds, its lines, and its refusal."""

import pytest
import torch

from bench import host


def test_rounds_time_every_variant_forward_then_backward_and_take_medians(monkeypatch):
    order = []
    times = {"a": iter([10.0, 30.0, 20.0, 99.0]), "b": iter([5.0, 6.0, 7.0, 8.0])}

    def fake_host_us(fn, calls, batches):
        order.append(fn())
        return next(times[order[-1]])

    monkeypatch.setattr(host, "host_us", fake_host_us)
    got = host.rounds({"a": lambda: "a", "b": lambda: "b"}, calls=3, count=2)
    assert order == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert got == {"a": 25.0, "b": 6.5}


def test_a_line_gives_each_time_and_ours_over_base():
    text = host.line("decode", "1x8192/w4096", {"ours": 30.0, "base": 40.0})
    assert "ours 30.0 | base 40.0 | ours / base 0.750" in text
    assert "ours / base" not in host.line("kda", "1x1024x12", {"ours": 90.0})


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_it_says_so(capsys):
    assert host.main([]) == 2
    assert "needs a GPU" in capsys.readouterr().err


def test_rounds_below_one_are_refused_naming_the_option(capsys):
    with pytest.raises(SystemExit) as exit_:
        host.main(["--rounds", "0"])
    assert exit_.value.code == 2
    assert "--rounds: expected at least 1, got 0" in capsys.readouterr().err


def test_without_launches_skips_every_bound_launch_while_the_call_runs_and_restores_it():
    from kernels import launch

    real = launch.Bound.__call__
    bound = launch.Bound(object(), (1,), launch.slots(2), {}, {})  # a real call of it would fail
    seen = []

    def call():
        seen.append(launch.Bound.__call__ is real)
        return bound(1, 2, stream=0)  # launches nothing, asks for nothing

    assert host.without_launches(call)() is None
    assert seen == [False] and launch.Bound.__call__ is real

    def failing():
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        host.without_launches(failing)()
    assert launch.Bound.__call__ is real


def test_parts_adds_our_call_without_launches_and_leaves_the_base_alone():
    fns = {"ours": lambda: "ours", "base": lambda: "base"}
    assert host._variants(fns, False) is fns
    got = host._variants(fns, True)
    assert list(got) == ["ours", "base", "ours, no launches"] and got["ours, no launches"]() == "ours"
