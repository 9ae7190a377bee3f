"""Adapters: the only place the verifier calls kernels.

An adapter takes a case and its built inputs, runs the kernel path the case
names, and returns the outputs to judge. Scratch is poisoned with NaN before
split calls, so a kernel that reads scratch it never wrote fails.
"""

import math
import os
from contextlib import contextmanager

import torch

from kernels import paged_decode

FORCE_SPLIT = {"onepass": False, "split": True, "auto": None}


@contextmanager
def environment(**values):
    """Set environment variables (None: leave as is) for the duration of a call."""
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is not None:
                os.environ[k] = str(v)
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def poisoned_decode_store(inputs) -> dict:
    """A caller-owned decode workspace whose buffers are already large enough and all NaN.

    Sized for the largest plan the case can produce (partition dim: the next
    power of two of the uncapped partition count), so the kernel writes into
    these very buffers and any element it reads without writing is NaN.
    """
    case = inputs.case
    span = max(case.lens) + case.block
    p2 = 1 << max(0, math.ceil(span / case.partition) - 1).bit_length()
    rows = (case.hq // case.hkv) * case.q
    m = len(case.lens) * case.hkv * p2 * rows
    device = inputs.out.device
    return {
        "ml": torch.full((2 * m,), float("nan"), device=device),
        "acc": torch.full((m * case.d,), float("nan"), device=device),
    }


def decode_call(inputs, *, path: str, workspace=None, out=None):
    """One paged_attention_decode call on `inputs` through kernel path `path`."""
    case = inputs.case
    out = inputs.out if out is None else out
    with environment(CU_NUM=case.cu or None):
        paged_decode.paged_attention_decode(
            out, inputs.query, inputs.key_cache, inputs.value_cache, inputs.block_tables, inputs.seq_lens,
            inputs.scale, inputs.k_scale, inputs.v_scale, case.window, layout=case.layout,
            max_seq_len=inputs.max_seq_len, partition_size=case.partition, force_split=FORCE_SPLIT[path],
            workspace=workspace)
    return out


def decode(inputs) -> torch.Tensor:
    """Run a decode case through its path, scratch poisoned; returns the output."""
    store = None if inputs.case.path == "onepass" else poisoned_decode_store(inputs)
    return decode_call(inputs, path=inputs.case.path, workspace=store)
