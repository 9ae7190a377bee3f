"""Decode cases: a frozen spec with a stable id, and the tensors it builds.

The id names every field, starts with the operator and ends with the kernel
path, e.g. `decode-e4m3fnuz-token-b16-hq32-hkv8-d128-w4096-L4149_1384-q1-shuffled-split`.
`DecodeCase.from_id` parses it back, and the RNG seed is derived from the id,
so the id alone rebuilds the same tensors. A value distribution other than
the default `gauss` is named after the layout
(`...-q1-shuffled-peaked-split`); `cases.decode_values` defines them all.

What `build` makes, adversarial by construction:
- query and K/V drawn by the case's distribution; `gauss` draws them signed,
  with a few outlier channels and a per-token magnitude spread (so per-token
  scales differ from token to token);
- block tables that are random permutations over a pool at least twice the
  blocks needed, with unused table columns pointing at random blocks;
- the unused slots of used blocks, and every unused block, filled with the
  format's NaN bytes; per-token scales there set to inf or NaN;
- per-token V scales stored with other strides than K's;
- the output pre-filled with NaN.
"""

import math
import re
from dataclasses import dataclass, fields, replace

import torch

from cases import decode_values
from cases.decode_values import DISTS
from reference import fp8, layouts

CACHES = ("e4m3fn", "e4m3fnuz", "bf16")
SCALES = ("tensor", "token")
LAYOUTS = ("shuffled", "plain")
PATHS = ("onepass", "split", "auto", "gluon")
# Paths only a GPU runs: the Gluon kernel is compiled for NVIDIA GPUs, and the Triton interpreter cannot run
# Gluon, so the CPU tier lists none of its cases.
GPU_PATHS = ("gluon",)
_TORCH_CACHE = {"e4m3fn": torch.float8_e4m3fn, "e4m3fnuz": torch.float8_e4m3fnuz, "bf16": torch.bfloat16}
_ID = re.compile(
    r"decode-(?P<cache>e4m3fnuz|e4m3fn|bf16)-(?P<scales>tensor|token)-b(?P<block>\d+)-hq(?P<hq>\d+)"
    r"-hkv(?P<hkv>\d+)-d(?P<d>\d+)-w(?P<window>-?\d+)-L(?P<lens>\d+(?:_\d+)*)-q(?P<q>\d+)"
    r"-(?P<layout>shuffled|plain)(?:-(?P<dist>" + "|".join(DISTS[1:]) + r"))?"
    r"(?:-p(?P<partition>\d+))?(?:-cu(?P<cu>\d+))?(?:-(?P<tag>[a-z0-9]+))?"
    r"-(?P<path>onepass|split|auto|gluon)"
)


@dataclass(frozen=True)
class DecodeCase:
    """One decode problem and the kernel path that runs it.

    lens: sequence lengths (the batch); q: query tokens per sequence (MTP);
    partition: split-K partition size (0 = the launch table's); cu: CU_NUM for the call (0 = the
    device's own); tag: a name for adversarial or regression cases (never a
    distribution's name, which the id could not tell apart); dist: the value
    distribution (cases.decode_values.DISTS).
    """

    cache: str
    scales: str
    block: int
    hq: int
    hkv: int
    d: int
    window: int
    lens: tuple
    q: int
    layout: str
    path: str
    partition: int = 0
    cu: int = 0
    tag: str = ""
    dist: str = "gauss"

    def __post_init__(self):
        if self.cache not in CACHES or self.scales not in SCALES or self.layout not in LAYOUTS \
                or self.path not in PATHS:
            raise ValueError(f"DecodeCase: unknown cache/scales/layout/path in {self}")
        if self.dist not in DISTS or self.tag in DISTS:
            raise ValueError(f"DecodeCase: expected dist in {DISTS} and a tag that is not one, "
                             f"got dist={self.dist!r}, tag={self.tag!r}")
        if self.hq % self.hkv or not self.lens or min(self.lens) < 0:
            raise ValueError(f"DecodeCase: expected Hq % Hkv == 0 and lengths >= 0, got {self}")

    @property
    def id(self) -> str:
        parts = [f"decode-{self.cache}-{self.scales}-b{self.block}-hq{self.hq}-hkv{self.hkv}-d{self.d}",
                 f"w{self.window}", "L" + "_".join(map(str, self.lens)), f"q{self.q}", self.layout]
        if self.dist != "gauss":
            parts.append(self.dist)
        if self.partition:
            parts.append(f"p{self.partition}")
        if self.cu:
            parts.append(f"cu{self.cu}")
        if self.tag:
            parts.append(self.tag)
        parts.append(self.path)
        return "-".join(parts)

    @classmethod
    def from_id(cls, case_id: str) -> "DecodeCase":
        match = _ID.fullmatch(case_id)
        if match is None:
            raise ValueError(f"case id: expected a decode id like {_example()}, got {case_id!r}")
        g = match.groupdict()
        ints = {f.name for f in fields(cls) if f.type in (int, "int")}
        kw = {k: v for k, v in g.items() if v is not None}
        kw["lens"] = tuple(int(x) for x in kw["lens"].split("_"))
        for k in list(kw):
            if k in ints:
                kw[k] = int(kw[k])
        return cls(**kw)

    def with_path(self, path: str) -> "DecodeCase":
        return replace(self, path=path)

    @property
    def cache_dtype(self) -> torch.dtype:
        return _TORCH_CACHE[self.cache]


def _example() -> str:
    return DecodeCase("e4m3fn", "tensor", 16, 8, 1, 64, 0, (5, 3), 1, "shuffled", "onepass").id


@dataclass
class DecodeInputs:
    """Everything one decode case feeds the kernel and the references.

    original_k / original_v : float32 logical [nb, bs, Hkv, D] before quantization
    query_original          : float32 [S, Q, Hq, D]; `query` is it rounded to bf16
    key_cache / value_cache : the kernel's caches in the case's layout and dtype
    k_scale / v_scale       : one-element fp32 tensors or per-token [nb, Hkv, bs]
    out                     : NaN-poisoned output, shaped like `query`
    empty_rows              : bool [S, Q], rows that see no key (must come back zero)
    """

    case: DecodeCase
    query: torch.Tensor
    query_original: torch.Tensor
    original_k: torch.Tensor
    original_v: torch.Tensor
    key_cache: torch.Tensor
    value_cache: torch.Tensor
    k_scale: torch.Tensor
    v_scale: torch.Tensor
    block_tables: torch.Tensor
    seq_lens: torch.Tensor
    max_seq_len: int
    scale: float
    out: torch.Tensor
    empty_rows: torch.Tensor


def _pool_values(gen, used: torch.Tensor, shape, device) -> torch.Tensor:
    """Values for a block pool of `shape` on `device`: drawn for the blocks in use, zero in the
    others (whose slots are poisoned anyway, so drawing them would only cost time)."""
    live = used.any(1).nonzero()[:, 0]
    x = torch.zeros(shape, device=device)
    x[live.to(device)] = decode_values.gauss_values(gen, (len(live),) + tuple(shape[1:]), 3).to(device)
    return x


def _table_geometry(lens, block):
    """(blocks each sequence needs, block table width, block pool size: twice the needed blocks + 1)."""
    needed = [math.ceil(n / block) for n in lens]
    return needed, max(1, max(needed)), 2 * sum(needed) + 1


def _block_tables(gen, lens, block):
    """Random permutation over a pool twice the needed blocks (+1), padded with random ids."""
    needed, width, pool = _table_geometry(lens, block)
    perm = torch.randperm(pool, generator=gen)
    tables = torch.randint(0, pool, (len(lens), width), generator=gen, dtype=torch.int64)
    used = torch.zeros(pool, block, dtype=torch.bool)
    start = 0
    for i, (n, nblk) in enumerate(zip(lens, needed)):
        ids = perm[start:start + nblk]
        start += nblk
        tables[i, :nblk] = ids
        for j, b in enumerate(ids.tolist()):
            used[b, : min(block, n - j * block)] = True
    return tables.to(torch.int32), pool, used


def _poison_codes(codes: torch.Tensor, used: torch.Tensor, cache: str) -> torch.Tensor:
    """Fill every unused slot ([nb, bs] mask False) of logical codes with NaN."""
    mask = ~used[:, :, None, None]
    if cache == "bf16":
        return torch.where(mask, torch.full_like(codes, float("nan")), codes)
    nan = fp8.FORMATS[cache].nan_code
    return torch.where(mask, torch.full_like(codes, nan), codes)


def _quantize(values, used, case: DecodeCase, gen, per_token_transposed: bool, scale=None):
    """(logical cache values in the kernel dtype, scale tensor) with unused slots poisoned.

    scale None: fp8 takes the amax scale, bf16 a drawn per-token scale (or 1 per tensor);
    a given scale ([1] or per-token [nb, Hkv, bs]) stores values / scale, fp8 saturating.
    """
    nb, bs, hkv, _ = values.shape
    if scale is not None:
        scale = scale.float().to(values.device)
        per_elem = scale.permute(0, 2, 1)[..., None] if scale.numel() > 1 else scale.reshape(())
        clean = torch.where(used[:, :, None, None], values, torch.zeros_like(values)).double()
        if case.cache == "bf16":
            stored = _poison_codes((clean / per_elem.double()).to(torch.bfloat16), used, "bf16")
        else:
            codes = fp8.encode(clean / per_elem.double(), case.cache)
            stored = _poison_codes(codes, used, case.cache).view(case.cache_dtype)
        scale = scale.reshape(1) if scale.numel() == 1 else scale
    elif case.cache == "bf16":
        if case.scales == "token":
            scale = torch.exp(0.3 * torch.randn(nb, hkv, bs, generator=gen)).float().to(values.device)
            stored = (values / scale.permute(0, 2, 1)[..., None]).to(torch.bfloat16)
        else:
            scale = torch.tensor([1.0], device=values.device)
            stored = values.to(torch.bfloat16)
        stored = _poison_codes(stored, used, "bf16")
    else:
        quantize = fp8.quantize_per_token if case.scales == "token" else fp8.quantize_per_tensor
        clean = values.masked_fill(~used[:, :, None, None], 0.0)  # one temporary the size of the cache
        codes, scale = quantize(clean, case.cache)
        stored = _poison_codes(codes, used, case.cache).view(case.cache_dtype)
        scale = scale.reshape(-1) if scale.dim() == 0 else scale
    if case.scales == "token":
        bad = torch.where(torch.rand(scale.shape, generator=gen) < 0.5, float("inf"), float("nan"))
        bad = bad.to(scale.device)
        scale = torch.where(used[:, None, :].expand_as(scale), scale, bad).float()
        if per_token_transposed:
            scale = _v_scale_layout(scale)
    return stored, scale


def build(case: DecodeCase, device, seed: int) -> DecodeInputs:
    """The tensors of `case` on `device`, drawn from `seed` (on the CPU, so every device gets the
    same values; quantization and packing then run on `device`)."""
    gen = torch.Generator().manual_seed(seed)
    lens = case.lens
    tables, pool, used = _block_tables(gen, lens, case.block)
    shape = (pool, case.block, case.hkv, case.d)
    q_shape = (len(lens), case.q, case.hq, case.d)
    if case.dist == "gauss":
        k = _pool_values(gen, used, shape, device)
        v = _pool_values(gen, used, shape, device)
        query_original = decode_values.gauss_values(gen, q_shape, 3) * 0.5
        used = used.to(device)
        k_stored, k_scale = _quantize(k, used, case, gen, per_token_transposed=False)
        v_stored, v_scale = _quantize(v, used, case, gen, per_token_transposed=True)
    else:
        drawn = decode_values.draw(case, gen, tables, used, shape, q_shape)
        k, v, query_original = drawn.k.to(device), drawn.v.to(device), drawn.query
        keep = drawn.keep.to(device)
        k_stored, k_scale = _quantize(k, keep, case, gen, per_token_transposed=False, scale=drawn.k_scale)
        v_stored, v_scale = _quantize(v, keep, case, gen, per_token_transposed=True, scale=drawn.v_scale)
    key_cache = layouts.pack_k(k_stored, case.layout)
    value_cache = layouts.pack_v(v_stored, case.layout)
    query = query_original.to(torch.bfloat16)
    if case.q == 1:
        query, query_original = query[:, 0], query_original[:, 0]
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    hi = seq_lens[:, None] - case.q + 1 + torch.arange(case.q)
    empty_rows = hi <= 0
    to = dict(device=device)
    return DecodeInputs(
        case=case,
        query=query.to(**to),
        query_original=query_original.to(**to),
        original_k=k.to(**to),
        original_v=v.to(**to),
        key_cache=key_cache.to(**to),
        value_cache=value_cache.to(**to),
        k_scale=k_scale.to(**to),
        v_scale=v_scale.to(**to),
        block_tables=tables.to(**to),
        seq_lens=seq_lens.to(**to),
        max_seq_len=max(lens),
        scale=case.d ** -0.5,
        out=torch.full(query.shape, float("nan"), dtype=torch.bfloat16, **to),
        empty_rows=empty_rows.to(**to),
    )


def _v_scale_layout(scale: torch.Tensor) -> torch.Tensor:
    """A per-token V scale [nb, Hkv, bs] stored slot-major, so its strides differ from K's."""
    return scale.permute(0, 2, 1).contiguous().permute(0, 2, 1)


def build_meta(case: DecodeCase) -> DecodeInputs:
    """The inputs of `case` as `build` makes them, on torch's meta device: every shape, stride,
    dtype and storage offset, no values (what a launch is decided from; kernels.arch.planned)."""
    meta = dict(device="meta")
    _, width, pool = _table_geometry(case.lens, case.block)
    num_seqs = len(case.lens)
    q_shape = (num_seqs, case.q, case.hq, case.d) if case.q > 1 else (num_seqs, case.hq, case.d)
    logical = (pool, case.block, case.hkv, case.d)
    stored = torch.empty(logical, dtype=case.cache_dtype, **meta)
    if case.scales == "token":
        k_scale = torch.empty(pool, case.hkv, case.block, **meta)
        v_scale = _v_scale_layout(k_scale)
    else:
        k_scale, v_scale = torch.empty(1, **meta), torch.empty(1, **meta)
    lens = torch.tensor(case.lens)
    empty_rows = (lens[:, None] - case.q + 1 + torch.arange(case.q)) <= 0
    return DecodeInputs(
        case=case,
        query=torch.empty(q_shape, dtype=torch.bfloat16, **meta),
        query_original=torch.empty(q_shape, **meta),
        original_k=torch.empty(logical, **meta),
        original_v=torch.empty(logical, **meta),
        key_cache=layouts.pack_k(stored, case.layout),
        value_cache=layouts.pack_v(stored, case.layout),
        k_scale=k_scale,
        v_scale=v_scale,
        block_tables=torch.empty(num_seqs, width, dtype=torch.int32, **meta),
        seq_lens=torch.empty(num_seqs, dtype=torch.int32, **meta),
        max_seq_len=max(case.lens),
        scale=case.d ** -0.5,
        out=torch.empty(q_shape, dtype=torch.bfloat16, **meta),
        empty_rows=empty_rows.to(**meta),
    )
