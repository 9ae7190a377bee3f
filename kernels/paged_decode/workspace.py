"""Scratch for the split-K decode: per (device, stream), grow-only.

A store is a plain dict holding flat fp32 buffers "ml" (m and l of every
partition row) and "acc" (their accumulators), the int32 arrival counters
"count" of the row tiles (zero when allocated; the last program to arrive at
one sets it back to zero: kernels.paged_decode.reduce), plus bookkeeping:

- `acquire` hands out views of the right shapes; a buffer is reused when it
  lives on the right device, has its dtype and holds at least the elements asked for (so a
  head-128 call after a head-64 call with the same partition shape grows
  "acc" instead of writing past it);
- buffers only grow, and a replaced buffer stays referenced in "retired",
  because a captured CUDA graph may still point at it;
- "allocations" counts the calls that had to allocate, for tests to read;
- "views" keeps the views handed out, by shape, until a buffer is replaced, so a
  call of a shape seen before costs a dict lookup.

Calls in flight on two streams must not share scratch, so the default stores
are keyed by (device, stream). The partition dim of the views is rounded up
to a power of two by the caller, so alternating partition counts reuse one
buffer.
"""

import torch

from kernels import arch

_STORES: dict[tuple, dict] = {}


def default_store(device: torch.device, stream: int | None = None) -> dict:
    """The scratch store of `device`'s current stream (CPU: one per device); `stream`: that stream's
    raw handle where the caller has it (kernels.arch.raw_stream)."""
    if not isinstance(device, torch.device):
        device = torch.device(device)
    if stream is None:
        stream = arch.raw_stream(device)
    return _STORES.setdefault((device.type, device.index, stream), {})


# Each buffer's maker and dtype: the counters must start at zero, the rest is written before it is read.
_BUFFERS = {"ml": (torch.empty, torch.float32), "acc": (torch.empty, torch.float32),
            "count": (torch.zeros, torch.int32)}


def _fits(store: dict, name: str, device: torch.device, numel: int) -> bool:
    buf = store.get(name)
    return (buf is not None and buf.device == device and buf.dtype == _BUFFERS[name][1]
            and buf.numel() >= numel)


def _replace(store: dict, name: str, device: torch.device, numel: int) -> None:
    old = store.get(name)
    if old is not None:
        store.setdefault("retired", []).append(old)
    make, dtype = _BUFFERS[name]
    store[name] = make(numel, dtype=dtype, device=device)
    store["views"] = {}


def acquire(store: dict, device: torch.device, ml_shape: tuple, acc_shape: tuple, counters: int):
    """Views (m, l, acc, count) of shapes ml_shape, ml_shape, acc_shape and (counters,) from `store`."""
    key = (device, ml_shape, acc_shape, counters)
    views = store.get("views", {}).get(key)
    if views is not None:
        return views
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    ml_numel = 2 * _numel(ml_shape)
    acc_numel = _numel(acc_shape)
    sizes = (("ml", ml_numel), ("acc", acc_numel), ("count", counters))
    fits = _fits(store, "ml", device, ml_numel) and _fits(store, "acc", device, acc_numel)
    if not (fits and _fits(store, "count", device, counters)):
        store["allocations"] = store.get("allocations", 0) + 1
        for name, numel in sizes:
            if not _fits(store, name, device, numel):
                _replace(store, name, device, numel)
    half = ml_numel // 2
    ml = store["ml"]
    views = (
        ml[:half].view(ml_shape),
        ml[half:ml_numel].view(ml_shape),
        store["acc"][:acc_numel].view(acc_shape),
        store["count"][:counters],
    )
    store.setdefault("views", {})[key] = views
    return views


def _numel(shape: tuple) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
