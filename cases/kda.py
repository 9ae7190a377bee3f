"""KDA cases: a frozen spec with a stable id, the tensors it builds, the tiers' lists.

Id: `kda-b{B}-t{T}` (or `kda-L{l0_l1_..}` for varlen, B == 1), then
`-h{H}-k{K}-{gate}`, `-sig` (beta through a sigmoid in kernel), `-l2` (q/k L2
norm in kernel), the state (`none`, `dense`, `vfirst`, `paged`), an optional
tag naming the failure the case provokes, and last the schedule (`auto`,
`unsegmented`, `segmented{n}` chunks per segment). The seed comes from the id.

Tags: `strongdecay` (g = -1000 bursts on the log gate; a saturated lower-bound
gate), `rho09` / `rho1` (correlated keys, beta = sigmoid(4)), `nanws` (the
workspace NaN-filled before a second call), `bands` (q, k, v as views of one
fused projection, read in place).
"""

import math
import re
from dataclasses import dataclass

import torch

GATES = ("log", "softplus", "lower_bound")
STATES = ("none", "dense", "vfirst", "paged")
TAGS = ("", "strongdecay", "rho09", "rho1", "nanws", "bands")
LOWER_BOUND = -5.0
_ID = re.compile(
    r"kda-(?:b(?P<b>\d+)-t(?P<t>\d+)|L(?P<lens>\d+(?:_\d+)*))-h(?P<h>\d+)-k(?P<dim>\d+)"
    r"-(?P<gate>log|softplus|lower_bound)(?P<sig>-sig)?(?P<l2>-l2)?-(?P<state>none|dense|vfirst|paged)"
    r"(?:-(?P<tag>strongdecay|rho09|rho1|nanws|bands))?-(?P<schedule>auto|unsegmented|segmented\d+)"
)


@dataclass(frozen=True)
class KdaCase:
    """B sequences of T tokens (or varlen `lens` with B == 1), H heads, K = V = dim."""

    h: int
    dim: int
    gate: str = "log"
    beta_sigmoid: bool = False
    l2norm: bool = False
    state: str = "none"
    schedule: str = "auto"
    b: int = 1
    t: int = 0
    lens: tuple = ()
    tag: str = ""

    def __post_init__(self):
        if self.gate not in GATES or self.state not in STATES or self.tag not in TAGS:
            raise ValueError(f"KdaCase: unknown gate/state/tag in {self}")
        if not re.fullmatch(r"auto|unsegmented|segmented\d+", self.schedule):
            raise ValueError(f"KdaCase: schedule must be auto, unsegmented or segmented<n>, got {self.schedule!r}")
        if self.lens and self.b != 1:
            raise ValueError(f"KdaCase: varlen cases have b == 1, got {self}")

    @property
    def id(self) -> str:
        shape = "L" + "_".join(map(str, self.lens)) if self.lens else f"b{self.b}-t{self.t}"
        parts = [f"kda-{shape}-h{self.h}-k{self.dim}-{self.gate}"]
        if self.beta_sigmoid:
            parts.append("sig")
        if self.l2norm:
            parts.append("l2")
        parts.append(self.state)
        if self.tag:
            parts.append(self.tag)
        parts.append(self.schedule)
        return "-".join(parts)

    @classmethod
    def from_id(cls, case_id: str) -> "KdaCase":
        m = _ID.fullmatch(case_id)
        if m is None:
            raise ValueError(f"case id: expected a KDA id like kda-b1-t65-h1-k64-log-none-auto, got {case_id!r}")
        g = m.groupdict()
        lens = tuple(int(x) for x in g["lens"].split("_")) if g["lens"] else ()
        return cls(h=int(g["h"]), dim=int(g["dim"]), gate=g["gate"], beta_sigmoid=bool(g["sig"]),
                   l2norm=bool(g["l2"]), state=g["state"], schedule=g["schedule"], b=int(g["b"] or 1),
                   t=int(g["t"] or 0), lens=lens, tag=g["tag"] or "")

    @property
    def chunks_per_segment(self):
        """The kernel argument: None (auto), 0 (unsegmented) or n (segmented)."""
        if self.schedule == "auto":
            return None
        return 0 if self.schedule == "unsegmented" else int(self.schedule[len("segmented"):])

    @property
    def num_seqs(self) -> int:
        return len(self.lens) if self.lens else self.b


@dataclass
class KdaInputs:
    """The kernel's arguments for one case (bf16 activations, fp32 gate parameters and states)."""

    case: KdaCase
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor
    beta: torch.Tensor
    kwargs: dict  # every keyword argument but chunks_per_segment, workspace and out
    out: torch.Tensor


def _inverse_softplus(x: torch.Tensor) -> torch.Tensor:
    return x + torch.log(-torch.expm1(-x))


def build(case: KdaCase, device, seed: int) -> KdaInputs:
    """The tensors of `case`, drawn on the CPU from `seed`, then moved to `device`."""
    gen = torch.Generator().manual_seed(seed)
    H, D = case.h, case.dim
    if case.lens:
        B, T = 1, sum(case.lens)
    else:
        B, T = case.b, case.t

    def randn(*shape):
        return torch.randn(*shape, generator=gen)

    q = randn(B, T, H, D)
    if case.tag in ("rho09", "rho1"):
        rho = 0.9 if case.tag == "rho09" else 1.0
        common = randn(1, 1, H, D)
        k = rho * common + math.sqrt(1 - rho * rho) * randn(B, T, H, D)
    else:
        k = randn(B, T, H, D)
    if not case.l2norm:
        k = k / k.norm(dim=-1, keepdim=True)  # the delta rule needs beta * |k|^2 <= 2
    v = randn(B, T, H, D)

    kwargs = dict(gate=case.gate, beta_sigmoid=case.beta_sigmoid, qk_l2norm=case.l2norm, scale=D ** -0.5)
    if case.gate == "log":
        g = -torch.exp(0.5 * randn(B, T, H, D) - 3.0)
        if case.tag == "strongdecay":
            g = torch.where(torch.rand(B, T, H, D, generator=gen) < 0.1, torch.full_like(g, -1000.0), g)
    else:
        a_log = torch.log(1.0 + 15.0 * torch.rand(H, generator=gen))
        if case.gate == "softplus":
            dt_bias = _inverse_softplus(0.001 + 0.099 * torch.rand(H * D, generator=gen))
            g = 0.5 * randn(B, T, H, D)
        else:
            dt_bias = 0.1 * randn(H * D)
            g = randn(B, T, H, D) + (30.0 if case.tag == "strongdecay" else 0.0)
            kwargs["lower_bound"] = LOWER_BOUND
        kwargs["A_log"] = a_log.float().to(device)
        kwargs["dt_bias"] = dt_bias.float().to(device)

    correlated = case.tag in ("rho09", "rho1")
    if case.beta_sigmoid:
        beta = torch.full((B, T, H), 4.0) if correlated else randn(B, T, H)
    else:
        beta = torch.full((B, T, H), 1 / (1 + math.exp(-4.0))) if correlated else torch.sigmoid(randn(B, T, H))

    n = case.num_seqs
    if case.lens:
        kwargs["cu_seqlens"] = torch.tensor([0] + list(_cumsum(case.lens)), dtype=torch.int32, device=device)
    if case.state in ("dense", "vfirst"):
        kwargs["initial_state"] = (0.5 * randn(n, H, D, D)).to(device)
        kwargs["state_v_first"] = case.state == "vfirst"
    if case.state == "paged":
        slots = n + 2
        padded = torch.full((slots, H * D * D + 64), float("nan"))
        cache = padded[:, : H * D * D].view(slots, H, D, D)
        order = torch.randperm(slots, generator=gen)
        indices = order[:n]
        cache[order[: n + 1]] = 0.5 * randn(n + 1, H, D, D)  # slot order[n + 1] stays NaN: nobody's
        has_initial = torch.arange(n) % 2 == 0
        kwargs["state_cache"] = padded.to(device)[:, : H * D * D].view(slots, H, D, D)
        kwargs["state_indices"] = indices.to(torch.int32).to(device)
        kwargs["has_initial_state"] = has_initial.to(device)
    else:
        kwargs["output_final_state"] = True

    to = dict(device=device, dtype=torch.bfloat16)
    if case.tag == "bands":
        fused = torch.cat([q.reshape(B, T, H * D), k.reshape(B, T, H * D), v.reshape(B, T, H * D)], dim=-1)
        fused = fused.to(**to)
        q, k, v = (fused[..., i * H * D:(i + 1) * H * D].view(B, T, H, D) for i in range(3))
    else:
        q, k, v = q.to(**to), k.to(**to), v.to(**to)
    return KdaInputs(case=case, q=q, k=k, v=v, g=g.to(**to), beta=beta.to(**to), kwargs=kwargs,
                     out=torch.full((B, T, H, D), float("nan"), **to))


def _cumsum(lens):
    total = 0
    for n in lens:
        total += n
        yield total


def kda_cases(tier: str) -> list[KdaCase]:
    """The KDA cases of a tier: small shapes under the interpreter, up to T = 16384, H = 96 on a GPU."""
    small = [
        KdaCase(h=1, dim=64, b=1, t=1),
        KdaCase(h=2, dim=64, b=2, t=63, gate="softplus", beta_sigmoid=True, l2norm=True),
        KdaCase(h=1, dim=64, b=1, t=65, state="dense"),
        KdaCase(h=1, dim=128, b=1, t=65, gate="lower_bound", beta_sigmoid=True, state="vfirst"),
        KdaCase(h=2, dim=64, b=1, t=192, gate="softplus", l2norm=True, state="dense"),
        KdaCase(h=1, dim=64, b=1, t=200, gate="lower_bound"),
        KdaCase(h=1, dim=64, b=1, t=320, beta_sigmoid=True, l2norm=True, state="dense"),
        KdaCase(h=2, dim=64, lens=(0, 1, 15, 64, 65, 128), gate="softplus", beta_sigmoid=True, state="dense"),
        KdaCase(h=1, dim=64, lens=(15, 0, 130, 1), state="paged"),
        KdaCase(h=1, dim=64, b=1, t=200, tag="strongdecay"),
        KdaCase(h=1, dim=64, b=1, t=200, gate="lower_bound", tag="strongdecay", state="dense"),
        KdaCase(h=1, dim=64, b=1, t=130, l2norm=True, beta_sigmoid=True, tag="rho09"),
        KdaCase(h=1, dim=64, b=1, t=130, l2norm=True, beta_sigmoid=True, tag="rho1"),
        KdaCase(h=2, dim=64, b=1, t=100, state="dense", tag="nanws"),
        KdaCase(h=2, dim=64, b=1, t=70, gate="softplus", tag="bands"),
    ]
    segmented = []
    for n in (1, 2, 3, 8):
        segmented.append(KdaCase(h=1, dim=64, b=1, t=520, state="dense", schedule=f"segmented{n}"))
    segmented.append(KdaCase(h=1, dim=64, b=1, t=520, state="dense", schedule="unsegmented"))
    segmented.append(KdaCase(h=1, dim=64, lens=(200, 0, 300), state="paged", schedule="segmented2"))
    if tier == "cpu":
        return small + segmented
    large = [
        KdaCase(h=96, dim=128, b=1, t=16384, gate="softplus", beta_sigmoid=True, l2norm=True, state="dense"),
        KdaCase(h=12, dim=128, b=1, t=16384, gate="softplus", beta_sigmoid=True, l2norm=True, state="dense"),
        KdaCase(h=4, dim=128, b=1, t=16384, gate="lower_bound", beta_sigmoid=True, l2norm=True),
        KdaCase(h=64, dim=128, b=1, t=8192, gate="softplus", beta_sigmoid=True, l2norm=True),
        KdaCase(h=16, dim=128, b=4, t=4096, state="vfirst"),
        KdaCase(h=12, dim=128, lens=(2000, 0, 1, 6000, 333), gate="softplus", beta_sigmoid=True, l2norm=True,
                state="paged"),
        KdaCase(h=24, dim=128, b=1, t=4096, gate="softplus", tag="bands"),
        KdaCase(h=12, dim=64, b=1, t=8192, state="dense", schedule="segmented8"),
        KdaCase(h=12, dim=64, b=1, t=8192, state="dense", schedule="unsegmented"),
    ]
    return small + segmented + large
