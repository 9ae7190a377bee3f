"""Adapters: the only place the verifier calls kernels.

An adapter takes a case and its built inputs, runs the kernel path the case
names, and returns the outputs to judge. Scratch is poisoned with NaN before
split calls, so a kernel that reads scratch it never wrote fails. The
`*_dot_dtype` functions pass on the operand dtype the kernel's dots take for a
case on its device, which verify.floors rounds its same-precision operands to.
`planned_launches` runs a case's calls on meta inputs for a named arch and
returns the launches they decide, without running a kernel, and `known_spill`
says why a launch table expects a kernel to spill there (verify.binaries).
"""

import os
from contextlib import contextmanager

import torch

from kernels import arch as kernel_arch
from kernels import kda as kda_kernels
from kernels import launch as kernel_launch
from kernels import paged_decode
from kernels.kda import tuning as kda_tuning
from kernels.paged_decode import plan as decode_plan
from kernels.paged_decode import tuning as decode_tuning

# Per kernel path: the split forced on or off (None: the plan decides) and the kernel (None: the arch's table).
FORCE_SPLIT = {"onepass": False, "split": True, "auto": None, "gluon": None}
KERNEL = {"onepass": "triton", "split": "triton", "auto": None, "gluon": "gluon"}
UNCAPPED_CU = 1 << 30  # so many CUs that the planner never caps the partition count


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

    Sized for the largest plan the case can produce (the uncapped partition
    count), so the kernel writes into these very buffers and any element it
    reads without writing is NaN.
    """
    case = inputs.case
    least = case.partition or decode_tuning.partition_sizes()[0]  # the most partitions any row makes
    largest = expected_split_plan(inputs, cu=UNCAPPED_CU, partition=least)
    rows = (case.hq // case.hkv) * case.q
    m = len(case.lens) * case.hkv * largest.p2 * rows
    device = inputs.out.device
    return {
        "ml": torch.full((2 * m,), float("nan"), device=device),
        "acc": torch.full((m * case.d,), float("nan"), device=device),
    }


def expected_split_plan(inputs, *, cu: int, partition: int | None = None):
    """The forced-split plan for `inputs` on `cu` CUs, as the kernel's planner makes it for an arch
    without a table, with partitions of `partition` keys (None: the case's)."""
    case = inputs.case
    return decode_plan.plan_decode(num_seqs=len(case.lens), num_kv_heads=case.hkv, max_seq_len=inputs.max_seq_len,
                                   num_queries=case.q, window=case.window, block_size=case.block,
                                   partition_size=partition or case.partition or None, cu=cu, arch="any",
                                   force_split=True,
                                   group=case.hq // case.hkv, head_dim=case.d)


def decode_call(inputs, *, path: str, workspace=None, out=None):
    """One paged_attention_decode call on `inputs` through kernel path `path`."""
    case = inputs.case
    out = inputs.out if out is None else out
    with environment(CU_NUM=case.cu or None):
        paged_decode.paged_attention_decode(
            out, inputs.query, inputs.key_cache, inputs.value_cache, inputs.block_tables, inputs.seq_lens,
            inputs.scale, inputs.k_scale, inputs.v_scale, case.window, layout=case.layout,
            max_seq_len=inputs.max_seq_len, partition_size=case.partition or None, force_split=FORCE_SPLIT[path],
            workspace=workspace, kernel=KERNEL[path])
    return out


def decode_unavailable(case, device) -> str | None:
    """Why our kernel cannot run `case`'s path on `device` (the Gluon kernel off its archs), else None."""
    if KERNEL[case.path] != "gluon":
        return None
    return paged_decode.gluon_unavailable(torch.device(device))


def decode_with(fn, inputs):
    """Run a decode case through another implementation `fn` (verify.impls); returns the output."""
    case = inputs.case
    fn(inputs.out, inputs.query, inputs.key_cache, inputs.value_cache, inputs.block_tables, inputs.seq_lens,
       inputs.scale, inputs.k_scale, inputs.v_scale, case.window, layout=case.layout, max_seq_len=inputs.max_seq_len)
    return inputs.out


def decode_dot_dtype(inputs) -> torch.dtype:
    """The operand dtype of the decode kernel's dots for `inputs` on their device, as the kernel reports it."""
    return paged_decode.dot_dtype(inputs.query.dtype, inputs.query.device)


def decode(inputs) -> torch.Tensor:
    """Run a decode case through its path, scratch poisoned; returns the output."""
    store = None if inputs.case.path == "onepass" else poisoned_decode_store(inputs)
    return decode_call(inputs, path=inputs.case.path, workspace=store)


def _copy_strided(t: torch.Tensor) -> torch.Tensor:
    """A copy with the same strides (a padded stride(0) stays padded)."""
    copy = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device)
    return copy.copy_(t)


def kda_dot_dtype(inputs) -> torch.dtype:
    """The operand dtype of the KDA kernel's dots (both outputs) on the inputs' device, as it reports it."""
    return kda_kernels.dot_dtype(inputs.q.device)


# The keyword arguments another KDA implementation takes (verify.impls).
KDA_KWARGS = ("scale", "initial_state", "output_final_state", "cu_seqlens", "gate", "A_log", "dt_bias",
              "lower_bound", "beta_sigmoid", "qk_l2norm")


def kda_with(fn, inputs) -> tuple[dict, bool]:
    """Run a KDA case through another implementation `fn` (verify.impls): ({"o", "state"}, True)."""
    kwargs = {k: v for k, v in inputs.kwargs.items() if k in KDA_KWARGS}
    o, final = fn(inputs.q, inputs.k, inputs.v, inputs.g, inputs.beta, **kwargs)
    return {"o": o, "state": final}, True


def kda(inputs) -> tuple[dict, bool]:
    """Run a KDA case; returns ({"o": o, "state": final or written slots}, other slots untouched).

    The paged cache is copied first (the kernel writes it in place). A `nanws`
    case runs twice, its workspace and output NaN-filled between the calls.
    """
    case = inputs.case
    kwargs = dict(inputs.kwargs)
    cache = kwargs.get("state_cache")
    calls = 2 if case.tag == "nanws" else 1
    workspace = {}
    for _ in range(calls):
        for t in workspace.values():
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                t.fill_(float("nan"))
        if cache is not None:
            kwargs["state_cache"] = _copy_strided(cache)
        o, final = kda_call(inputs, kwargs, workspace)
    if cache is None:
        return {"o": o, "state": final}, True
    written = kwargs["state_cache"]
    used = torch.zeros(cache.shape[0], dtype=torch.bool, device=cache.device)
    used[kwargs["state_indices"].long()] = True
    untouched = torch.equal(written[~used].view(torch.int32), cache[~used].view(torch.int32))
    return {"o": o, "state": written[kwargs["state_indices"].long()]}, untouched


def kda_call(inputs, kwargs: dict, workspace: dict):
    """One flash_kda_fwd call of a KDA case with keyword arguments `kwargs`, into a fresh
    NaN-filled output; returns (o, final_state)."""
    out = torch.full_like(inputs.out, float("nan"))
    return kda_kernels.flash_kda_fwd(inputs.q, inputs.k, inputs.v, inputs.g, inputs.beta,
                                     chunks_per_segment=inputs.case.chunks_per_segment, workspace=workspace,
                                     out=out, **kwargs)


def planned_launches(inputs, *, arch: str, cus: int) -> list:
    """The kernel launches (kernels.launch.Launch) our kernels would make for a case on `arch` with
    `cus` CUs, decided by the very calls `decode` or `kda` make, on the case's meta inputs
    (cases.*.build_meta), and recorded instead of run; none for a path that does not run there (the
    Gluon kernel off its archs)."""
    with kernel_arch.planned(arch, cus), kernel_launch.recorded() as launches:
        if hasattr(inputs, "key_cache"):
            if decode_unavailable(inputs.case, "meta") is None:
                decode(inputs)
        else:
            kda_call(inputs, dict(inputs.kwargs), {})
    return launches


def known_spill(arch: str, kernel: str, constexprs: dict, options: dict) -> str:
    """Why the launch tables of `arch` expect `kernel` with these constexprs and launch options to
    spill; '' when they expect no spill (kernels.paged_decode.tuning, kernels.kda.tuning)."""
    if kernel in ("decode_partition_kernel", "decode_partition_gluon"):
        return decode_tuning.spills(arch, constexprs["D"], constexprs["M_PAD"], constexprs["BLOCK_N"],
                                    constexprs["KEYS_M"], options["num_warps"], options.get("maxnreg"),
                                    "gluon" if kernel == "decode_partition_gluon" else "triton")
    if kernel.startswith("kda_"):
        return kda_tuning.tuning(arch).spills.get(kernel, "")
    return ""
