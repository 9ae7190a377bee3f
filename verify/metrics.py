"""Error metrics of one output against its float64 reference."""

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Errors:
    """max_abs: max |out - ref| over finite elements; rms_ratio: rms(out - ref) / rms(ref);
    nonfinite: elements of out that are NaN/inf (unwritten poison included);
    worst: index of the largest error (or of the first non-finite element)."""

    max_abs: float
    rms_ratio: float
    nonfinite: int
    worst: tuple
    ref_max: float


def compare(out: torch.Tensor, ref: torch.Tensor) -> Errors:
    """Errors of `out` against `ref` (same shape; compared in float64)."""
    if out.shape != ref.shape:
        raise ValueError(f"out: expected shape {tuple(ref.shape)} (the reference's), got {tuple(out.shape)}")
    o = out.detach().to(torch.float64)
    r = ref.detach().to(torch.float64)
    finite = torch.isfinite(o)
    nonfinite = int((~finite).sum())
    diff = torch.where(finite, (o - r).abs(), torch.zeros_like(o))
    ref_max = float(r.abs().max()) if r.numel() else 0.0
    if r.numel() == 0:
        return Errors(0.0, 0.0, 0, (), 0.0)
    if nonfinite:
        worst = tuple(int(i) for i in (~finite).nonzero()[0])
    else:
        worst = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
    max_abs = float(diff.max())
    num = float(diff.pow(2).mean().sqrt())
    den = float(r.pow(2).mean().sqrt())
    rms_ratio = num / den if den > 0 else (0.0 if num == 0 else float("inf"))
    return Errors(max_abs, rms_ratio, nonfinite, worst, ref_max)
