"""Timing on a GPU: CUDA-graph replay, mirrored order, medians.

Each variant is captured once in a CUDA graph that repeats its call `calls`
times. `paired` times two variants in ABBA rounds; `interleaved` times any
number in rounds of the order forward then backward (A B C C B A). A round's
ratio of a variant is its time over the first variant's, both summed over the
round's two replays; results are medians over rounds, with the per-round
ratio spread. All variants live in one process on one device, so clocks,
cache state and launch overhead are shared.
"""

import statistics
import time
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


@dataclass(frozen=True)
class Timed:
    us: float  # median per-call time
    ratio: float  # median per-round ratio to the first variant
    spread: tuple  # (min, max) of the per-round ratios


def interleaved(fns: dict, *, calls: int = 10, rounds: int = 20) -> dict:
    """{name: Timed} for every variant of `fns` ({name: fn}), the first one the base of the ratios."""
    names = list(fns)
    graphs = {name: _graph(fns[name], calls) for name in names}
    for name in names + names[::-1]:
        _replay_ms(graphs[name])
    times = {name: [] for name in names}
    ratios = {name: [] for name in names}
    for _ in range(rounds):
        this = {name: 0.0 for name in names}
        for name in names + names[::-1]:
            ms = _replay_ms(graphs[name])
            times[name].append(ms)
            this[name] += ms
        for name in names:
            ratios[name].append(this[name] / this[names[0]])
    scale = 1000.0 / calls
    return {name: Timed(statistics.median(times[name]) * scale, statistics.median(ratios[name]),
                        (min(ratios[name]), max(ratios[name]))) for name in names}


def copy_tbps(*, gib: int = 1, rounds: int = 20) -> float:
    """Device-to-device copy bandwidth in TB/s (bytes read plus bytes written), median of graph replays."""
    n = gib << 30
    src = torch.randn(n // 4, device="cuda")
    dst = torch.empty_like(src)
    # An elementwise kernel, not cudaMemcpy: the driver's device-to-device memcpy reaches
    # about two thirds of what a kernel streaming the same bytes does (2.7 against 4.2 TB/s on an H200).
    graph = _graph(lambda: torch.neg(src, out=dst), 1)
    warm_ms = 0.0
    while warm_ms < 300:  # an idle GPU's clocks take a while to rise
        warm_ms += _replay_ms(graph)
    times = [_replay_ms(graph) for _ in range(rounds)]
    del src, dst, graph
    torch.cuda.empty_cache()
    return 2 * n / (statistics.median(times) * 1e-3) / 1e12


HOST_SLEEP_CYCLES = 400_000_000  # about 0.2 s of a GPU clock: longer than the timed calls take to enqueue


HOST_BATCHES = 5  # a single batch read 26 to 68 us across rows of one decode kernel on the H200, the median of 7
# batches 39 to 64 (bench/NOTES.md): a batch now and then runs behind whatever else the host does


def host_us(fn, calls: int, batches: int = HOST_BATCHES) -> float:
    """Host time of a plain call in us: the median over `batches` batches of `calls` calls enqueued
    back to back (no sync inside), each batch over its count, behind a kernel that keeps the device
    busy meanwhile (torch.cuda._sleep): the queue neither fills behind slow kernels (a launch would
    wait for room) nor starts empty on an idle device (the first launch to it costs more). The
    launches of all `calls` must fit the queue in front of the sleep: on the H200 800 launches did
    and 1200 did not (200 calls of a six-launch KDA forward read about 1 ms a call, the sleep shared
    out), so keep calls times the launches of a call at 800 or fewer."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(batches):
        torch.cuda._sleep(HOST_SLEEP_CYCLES)
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append(time.perf_counter() - start)
        torch.cuda.synchronize()
    return statistics.median(times) / calls * 1e6
