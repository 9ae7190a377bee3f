"""Paired A/B timing on a GPU: CUDA-graph replay, ABBA order, median ratio.

Each variant is captured once in a CUDA graph that repeats its call `calls`
times; a round replays A, B, B, A and records each replay's time with CUDA
events. The ratio of a round is (time of B) / (time of A) over its two
replays of each; the result is the median over rounds, with the median times
per call. Both variants live in one process on one device, so clocks, cache
state and launch overhead are shared.
"""

import statistics
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Paired:
    a_us: float
    b_us: float
    ratio: float  # b / a: below 1 means B is faster
    spread: tuple  # (min, max) of the per-round ratios


def _graph(fn, calls: int):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph


def _replay_ms(graph) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def paired(fn_a, fn_b, *, calls: int = 10, rounds: int = 20) -> Paired:
    """Median per-call times (us) of A and B and the median B/A ratio over ABBA rounds."""
    ga, gb = _graph(fn_a, calls), _graph(fn_b, calls)
    for g in (ga, gb, ga, gb):
        _replay_ms(g)
    a_times, b_times, ratios = [], [], []
    for _ in range(rounds):
        a1 = _replay_ms(ga)
        b1 = _replay_ms(gb)
        b2 = _replay_ms(gb)
        a2 = _replay_ms(ga)
        a_times += [a1, a2]
        b_times += [b1, b2]
        ratios.append((b1 + b2) / (a1 + a2))
    scale = 1000.0 / calls
    return Paired(statistics.median(a_times) * scale, statistics.median(b_times) * scale,
                  statistics.median(ratios), (min(ratios), max(ratios)))
