"""Host-built int32 metadata of the KDA forward: chunks, segments and walk units.

Sequence n is tokens [bos_n, bos_n + len_n) of batch row row_n (varlen: row 0 and
bos_n = cu_seqlens[n]; batched: row n and bos_n = 0). It is cut into chunks of at
most `chunk` tokens that never cross into another sequence:
  chunks [NC, 4]: (sequence, batch row, first token, length), sequence-major.
The walk runs over units, a unit being a run of one sequence's chunks:
  units [NU, 4]: (sequence, first chunk, chunks, 1 if the sequence's last unit).
Unsegmented, a unit is a whole sequence. Segmented with cps chunks per segment,
sequence n has max(1, ceil(chunks_n / cps)) segments (an empty sequence keeps one
empty segment, which carries its initial state to its final state), and
seg_off [N + 1] gives each sequence's first segment.
`chunks` and `units` give both tables on the device, kept by the sequences they
come from, so that a call with an earlier call's sequences builds neither.
"""

import torch


def chunk_table(bounds, rows, chunk: int, seq_len: int):
    """Chunk rows and each sequence's first chunk, from per-sequence (bos, length),
    batch rows and the row length seq_len (T)."""
    table = []
    first = []
    for n, ((bos, length), row) in enumerate(zip(bounds, rows)):
        first.append(len(table))
        stop = bos + length
        for start in range(bos, stop, chunk):
            table.append((n, row, start, min(chunk, stop - start)))
    first.append(len(table))
    return table, first


def unit_table(first, cps: int):
    """Walk units and seg_off from each sequence's first chunk; cps = 0 for whole sequences."""
    units = []
    seg_off = []
    for n in range(len(first) - 1):
        count = first[n + 1] - first[n]
        seg_off.append(len(units))
        if cps == 0:
            units.append((n, first[n], count, 1))
            continue
        segments = max(1, -(-count // cps))
        for s in range(segments):
            units.append((n, first[n] + s * cps, min(cps, count - s * cps), int(s == segments - 1)))
    seg_off.append(len(units))
    return units, seg_off



# Metadata tensors kept on their device, by (rows, width, device). Never evicted: a captured CUDA
# graph may still read one. Past KEPT_MAX entries a table is copied afresh on each call (a call
# that copies cannot be captured, and says so) instead of the store growing without end.
KEPT_MAX = 1024
_KEPT: dict = {}


def _keep(store: dict, key, build):
    """store[key], from build() the first time; stored only while the store holds fewer than
    KEPT_MAX entries, and never evicted."""
    kept = store.get(key)
    if kept is None:
        kept = build()
        if len(store) < KEPT_MAX:
            store[key] = kept
    return kept


def to_device(rows, device, width: int = 4) -> torch.Tensor:
    """int32 tensor [len(rows), width] of metadata rows (or a flat list with width 1) on `device`.

    Kept per (rows, device): a call with the shapes of an earlier one copies nothing from the
    host, so it can be captured in a CUDA graph (a copy from host memory cannot). Callers
    only read these tensors."""
    key = (tuple(tuple(r) for r in rows) if width > 1 else tuple(rows), width, torch.device(device))
    return _keep(_KEPT, key, lambda: torch.tensor(rows, dtype=torch.int32).view(-1, width).to(device))


# Tables on their device by the sequences they were built from, kept like to_device's tensors: a
# call with an earlier call's sequences builds no table and hashes no rows, only its (bos, length)
# pairs.
_CHUNKS: dict = {}
_UNITS: dict = {}


def chunks(bounds, rows, chunk: int, seq_len: int, device):
    """(chunk_table's rows on `device` [NC, 4], each sequence's first chunk as a tuple)."""
    def build():
        table, first = chunk_table(bounds, rows, chunk, seq_len)
        return to_device(table, device), tuple(first)
    return _keep(_CHUNKS, (tuple(bounds), tuple(rows), chunk, seq_len, torch.device(device)), build)


def units(first, cps: int, device):
    """(unit_table's units on `device` [NU, 4], its seg_off on `device` [N + 1])."""
    def build():
        table, seg_off = unit_table(first, cps)
        return to_device(table, device), to_device(seg_off, device, width=1).view(-1)
    return _keep(_UNITS, (tuple(first), cps, torch.device(device)), build)
