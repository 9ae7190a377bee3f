"""References and floors: what each case is judged against.

ref  : the float64 reference on the original, unquantized inputs;
ref8 : the float64 reference on exactly the values the kernel sees;
floor: fp8 caches: max|ref - ref8|, the error quantization alone makes;
       unquantized (bf16 caches, KDA): max|same-precision torch - ref8|, the
       error a straightforward implementation makes whose matrix-product
       operands are rounded to the dtype the kernel's own dots take on this
       device (as the kernel reports it through verify.adapters: bf16 on a
       GPU, fp32 under the Triton interpreter), its output stored in the
       kernel's output dtype as the kernel's is. A floor at a precision the
       kernel does not compute in would let its errors pass unseen.
"""

from dataclasses import dataclass

import torch

from reference import kda as ref_kda
from reference import kda_chunked
from reference import paged_decode as ref_decode
from verify import adapters, tolerances
from verify.metrics import compare


@dataclass(frozen=True)
class Judged:
    """ref8 and the floor of one case, and the multiple of the floor it may reach."""

    ref8: torch.Tensor
    floor: float
    multiple: float


def decode(inputs) -> Judged:
    """ref8, floor and multiple of a decode case's inputs (cases.decode.DecodeInputs)."""
    case = inputs.case
    common = dict(scale=inputs.scale, sliding_window=case.window)
    ref8 = ref_decode.paged_decode(inputs.query, inputs.key_cache, inputs.value_cache, inputs.block_tables,
                                   inputs.seq_lens, k_scale=inputs.k_scale, v_scale=inputs.v_scale,
                                   layout=case.layout, **common)
    if case.cache == "bf16":
        other = ref_decode.paged_decode(inputs.query, inputs.key_cache, inputs.value_cache, inputs.block_tables,
                                        inputs.seq_lens, k_scale=inputs.k_scale, v_scale=inputs.v_scale,
                                        layout=case.layout, operand_dtype=adapters.decode_dot_dtype(inputs),
                                        **common)
        other = other.to(inputs.out.dtype)  # a same-precision implementation stores its output in it too
        multiple = tolerances.SAME_PRECISION_MULTIPLE
    else:
        other = ref_decode.paged_decode(inputs.query_original, inputs.original_k, inputs.original_v,
                                        inputs.block_tables, inputs.seq_lens, layout="plain", **common)
        multiple = tolerances.FP8_FLOOR_FRACTION
    floor = float((other.to(torch.float64) - ref8).abs().max()) if ref8.numel() else 0.0
    return Judged(ref8=ref8, floor=floor, multiple=multiple)


def kda(inputs, outputs: dict) -> tuple[dict, dict, dict]:
    """({name: (out, ref8)}, {name: floor}, {name: floor's RMS ratio}) of a KDA case, for the
    kernel's `outputs`.

    outputs: {"o": o, "state": final states} where "state" is the dense final
    state, or for a paged cache the slots the sequences wrote. ref8 is the
    float64 recurrence on the kernel's bf16 inputs; the floor of each output is
    the error against it of the chunked torch implementation whose operands are
    rounded to the kernel's dot dtype (both outputs come out of the same dots).
    """
    args = (inputs.q, inputs.k, inputs.v, inputs.g, inputs.beta)
    ref_o, ref_state = ref_kda.naive_kda(*args, **inputs.kwargs)
    low_o, low_state = kda_chunked.chunk_kda_torch(*args, operand_dtype=adapters.kda_dot_dtype(inputs),
                                                   **inputs.kwargs)
    refs = {"o": ref_o, "state": ref_state}
    lows = {"o": low_o.to(inputs.out.dtype), "state": low_state}  # its output stored in the kernel's dtype
    if "state_cache" in inputs.kwargs:
        idx = inputs.kwargs["state_indices"].long()
        refs["state"], lows["state"] = ref_state[idx], low_state[idx]
    judged, floor, floor_rms = {}, {}, {}
    for name, out in outputs.items():
        judged[name] = (out, refs[name])
        low = compare(lows[name], refs[name])
        floor[name], floor_rms[name] = low.max_abs, low.rms_ratio
    return judged, floor, floor_rms
