"""bench.timing.host_us: the host time of a plain call is a median of batches, not one batch."""

import time

from bench import timing


def test_host_time_is_the_median_of_its_batches(monkeypatch):
    """A batch that runs behind something else on the host (here the first, 40x slower) must not be
    the figure: one batch over its count read 20 ms a call here, the median reads the 0.5 ms the other
    batches take (the device calls are stood in for: no GPU is needed)."""
    monkeypatch.setattr(timing.torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(timing.torch.cuda, "_sleep", lambda cycles: None)
    calls = {"n": 0}

    def fn():
        calls["n"] += 1
        time.sleep(0.02 if calls["n"] <= 5 else 0.0005)  # the warm-up call and the first batch of 4

    us = timing.host_us(fn, 4, batches=5)
    assert calls["n"] == 1 + 4 * 5
    assert 400 < us < 5000  # 0.5 ms a call, with room for a busy host's sleeps
