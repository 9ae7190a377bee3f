"""Probes: regressions that need more than one call to show.

Each probe runs real kernel calls through the adapters, judges every output
with the gate, adds its own check (an allocation count, a plan, a bystander
buffer), and returns one Verdict named after the regression.
"""

import dataclasses
import math
import time

import torch

from cases import decode as decode_cases
from cases.decode import DecodeCase
from kernels.paged_decode import api
from verify import adapters, floors, gate
from verify.device import seed_of
from verify.verdict import Verdict

SUITE = "regressions"


def _case(**kw) -> DecodeCase:
    base = dict(cache="e4m3fn", scales="token", block=16, hq=8, hkv=1, d=64, window=0, lens=(100,), q=1,
                layout="shuffled", path="split", partition=64, cu=1024)
    base.update(kw)
    return DecodeCase(**base)


def _judge_all(reg, runs, started, *, extra_reasons=(), detail=None) -> Verdict:
    """One verdict over several (inputs, out) runs: the worst by err/floor, plus extra reasons."""
    verdicts = []
    judged_of = {}  # the references of each distinct inputs, computed once
    for inputs, out in runs:
        if id(inputs) not in judged_of:
            judged_of[id(inputs)] = floors.decode(inputs)
        judged = judged_of[id(inputs)]
        verdicts.append(gate.judge(SUITE, reg.id, {"out": (out, judged.ref8)}, judged.floor, judged.multiple,
                                   zero_rows=inputs.empty_rows))
    worst = max(verdicts, key=lambda v: (not v.passed, v.err_floor if not math.isnan(v.err_floor) else math.inf))
    reasons = tuple(extra_reasons) + tuple(r for v in verdicts for r in v.reasons)
    merged = dict(worst.detail)
    merged.update(detail or {})
    return dataclasses.replace(worst, passed=not reasons, reasons=reasons, detail=merged,
                               seconds=time.perf_counter() - started)


def _inputs(case: DecodeCase, device, salt: str = ""):
    return decode_cases.build(case, device, seed_of(case.id + salt))


def head_churn(reg, device) -> Verdict:
    """A head-128 split call after a head-64 one, same partition shape, one scratch store."""
    started = time.perf_counter()
    store = {}
    runs = []
    for d in (64, 128):
        inputs = _inputs(_case(d=d, lens=(300, 120)), device)
        runs.append((inputs, adapters.decode_call(inputs, path="split", workspace=store)))
    return _judge_all(reg, runs, started, detail={"allocations": store.get("allocations", 0)})


def arrivals_reset(reg, device) -> Verdict:
    """Split calls one after another on one scratch store, each into a NaN output: six of one shape
    (5 partitions a row tile), then one with another count of row tiles (MTP). Each call must find
    the row tiles' counters at zero. A counter a call leaves at c > 0 moves the fold of the next
    call c arrivals early (a race the device may win) and, once c reaches the partition count,
    leaves no program to fold: six calls make that certain, whatever the timing."""
    started = time.perf_counter()
    store = {}
    runs = []
    for case in (_case(lens=(300, 120)),) * 6 + (_case(hq=32, hkv=2, q=4, lens=(200, 90, 60)),):
        inputs = _inputs(case, device, str(len(runs)))
        out = torch.full_like(inputs.out, float("nan"))
        runs.append((inputs, adapters.decode_call(inputs, path="split", workspace=store, out=out)))
    return _judge_all(reg, runs, started)


def shape_churn(reg, device) -> Verdict:
    """Partition counts 12/16/20 alternating over 7 calls allocate scratch at most twice."""
    started = time.perf_counter()
    store = {}
    counts = (12, 16, 20, 12, 16, 20, 12)
    built = {}
    runs = []
    for n in counts:
        if n not in built:
            built[n] = _inputs(_case(lens=(n * 64 - 15,)), device)
        inputs = built[n]
        runs.append((inputs, adapters.decode_call(inputs, path="split", workspace=store).clone()))
    allocations = store.get("allocations", 0)
    extra = [] if allocations <= 2 else [f"{allocations} scratch allocations over {len(counts)} calls (at most 2)"]
    return _judge_all(reg, runs, started, extra_reasons=extra, detail={"allocations": allocations})


def cu_num(reg, device) -> Verdict:
    """With CU_NUM=48 the split plan (seen through the scratch it sizes) is the plan for 48 CUs."""
    started = time.perf_counter()
    case = _case(hq=8, hkv=8, lens=(1000, 1000, 1000, 1000), cu=48)
    inputs = _inputs(case, device)
    store = {}
    out = adapters.decode_call(inputs, path="split", workspace=store)
    want = adapters.expected_split_plan(inputs, cu=48)
    rows = case.hq // case.hkv
    want_acc = 4 * 8 * want.p2 * rows * case.d
    got_acc = store["acc"].numel()
    extra = [] if got_acc == want_acc else [
        f"scratch sized for another CU count: acc holds {got_acc} elements, the plan for CU_NUM=48 needs {want_acc}"]
    return _judge_all(reg, [(inputs, out)], started, extra_reasons=extra,
                      detail={"acc_elements": got_acc, "expected": want_acc})


def two_streams(reg, device) -> Verdict:
    """Two same-shape split calls in flight on two streams, default scratch.

    The default store seen from each stream must be its own. Then the race:
    the second stream starts later each round (a sleep swept over the first
    call's duration), so some round lands its partition writes inside the
    first call's window between its partial writes and its fold if the two share scratch.
    """
    started = time.perf_counter()
    case = _case(hq=32, hkv=8, d=128, lens=(16384,) * 4, window=0, partition=256, cu=132)
    a, b = _inputs(case, device, "a"), _inputs(case, device, "b")
    streams = (torch.cuda.Stream(device), torch.cuda.Stream(device))
    stores = []
    for stream in streams:
        with torch.cuda.stream(stream):
            stores.append(api._workspace.default_store(device))
    extra = []
    if stores[0] is stores[1]:
        extra.append("the default scratch of two streams is one store: calls in flight on both share it")
    runs = []
    for delay in range(0, 400_000, 20_000):  # cycles: 0 to ~200 us at 2 GHz
        outs = []
        for inputs, stream, wait in zip((a, b), streams, (0, delay)):
            out = torch.full_like(inputs.out, float("nan"))
            with torch.cuda.stream(stream):
                if wait:
                    torch.cuda._sleep(wait)
                adapters.decode_call(inputs, path="split", out=out)
            outs.append(out)
        torch.cuda.synchronize(device)
        runs += [(a, outs[0]), (b, outs[1])]
    return _judge_all(reg, runs, started, extra_reasons=extra)


def graph_growth(reg, device) -> Verdict:
    """Capture a split call in a CUDA graph, grow the scratch, replay: output and bystanders intact."""
    started = time.perf_counter()
    small = _inputs(_case(hq=8, hkv=2, lens=(900, 400), cu=132), device)
    large = _inputs(_case(hq=8, hkv=2, d=256, lens=(4000, 3000), cu=132), device)
    store = {}
    out = torch.full_like(small.out, float("nan"))
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        adapters.decode_call(small, path="split", workspace=store, out=out)
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()  # so the blocks the growth releases are the ones bystanders get
    old_sizes = [store[name].numel() for name in ("ml", "acc")]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        adapters.decode_call(small, path="split", workspace=store, out=out)
    before = torch.cuda.memory_allocated(device)
    grown = adapters.decode_call(large, path="split", workspace=store)
    torch.cuda.synchronize(device)
    added = torch.cuda.memory_allocated(device) - before
    kept = sum(t.numel() * 4 for name, t in store.items() if name in ("ml", "acc"))
    grown = grown.clone()
    torch.cuda.synchronize(device)
    bystanders = [torch.full((n,), 7.0, device=device) for n in old_sizes]
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize(device)
    extra = []
    if added < kept:
        extra.append(f"growing the scratch released {kept - added} bytes that the captured graph still writes")
    if not all(bool((b == 7.0).all()) for b in bystanders):
        extra.append("graph replay wrote into memory the grown scratch had released")
    return _judge_all(reg, [(small, out.clone()), (large, grown)], started, extra_reasons=extra,
                      detail={"allocations": store.get("allocations", 0)})
