"""Compile targets of `quantfloor compile`, and the occupancy their resource limits allow.

A target is a Triton backend target (backend, arch, wave size), the CU count
of the part the launches are planned for (it decides the auto path's split),
and the per-CU (per-SM) limits that turn a binary's registers and LDS/shared
bytes into resident waves.

AMD (gfx942 MI300X, gfx950 MI355X, gfx1250), waves per SIMD:

    vgpr_limit = floor(VGPR_FILE / roundup(vgprs + agprs, VGPR_GRANULE))
    lds_limit  = floor(LDS_PER_CU / roundup(lds, LDS_GRANULE)) * warps / SIMDS_PER_CU
    waves      = min(vgpr_limit, lds_limit, compiler's occupancy)

vgprs + agprs is the binary's `.vgpr_count` (it counts the AGPRs of the
unified file, and `.agpr_count` is reported beside it); the compiler's
occupancy is the `; Occupancy:` line LLVM prints in the amdgcn text, which
also holds the SGPR limit and the arch's cap on waves per SIMD (8), but not
Triton's LDS, which is allocated at launch. Sources: gfx942 and gfx950 have a
unified file of 512 VGPRs per lane per SIMD (arch VGPRs and AGPRs together),
allocated in granules of 8 (LLVM AMDGPU backend, AMDGPUBaseInfo: total VGPRs
and VGPR allocation granule; AMD's CDNA3/CDNA4 ISA guides); gfx1250 (wave32)
has 1024 per lane: its backend reports occupancy 8 at 128 VGPRs, 5 at 192,
4 at 256, 3 at 330 and 2 at 508 (measured with this command's compiler).
LDS per CU: 64 KiB on gfx942, 160 KiB on gfx950, 320 KiB on gfx1250, in
granules of 512, 1280 and 2048 bytes (LLVM AMDGPUUsage, the LDS_SIZE field of
COMPUTE_PGM_RSRC2). A workgroup's waves spread over the CU's 4 SIMDs.

NVIDIA (sm90, H200), warps per SM:

    regs_per_warp  = roundup(regs * 32, 256)
    blocks by regs = floor(65536 / regs_per_warp / warps)   (whole warps per block)
    blocks by smem = floor(228 KiB / (shared + 1 KiB))     (1 KiB reserved per block)
    blocks         = min(by regs, by smem, floor(64 / warps), 32)
    warps          = blocks * warps_per_block

shared is the launch's dynamic shared memory plus the cubin's static SHARED,
and may not pass 227 KiB per block (CUDA C++ Programming Guide, technical
specifications of compute capability 9.0; CUDA occupancy calculator:
register allocation unit 256, warp granularity).
"""

from dataclasses import dataclass


def _roundup(value: int, granule: int) -> int:
    return -(-value // granule) * granule


@dataclass(frozen=True)
class Target:
    """name: what --target takes; backend/arch/warp_size: Triton's GPUTarget; cus: CUs (SMs) of
    the part planned for (part); the rest: per-CU limits (module docstring)."""

    name: str
    backend: str
    arch: object
    warp_size: int
    cus: int
    part: str
    vgpr_file: int = 0
    vgpr_granule: int = 0
    lds_per_cu: int = 0
    lds_granule: int = 0
    simds_per_cu: int = 4

    @property
    def amd(self) -> bool:
        return self.backend == "hip"

    @property
    def unit(self) -> str:
        """What `occupancy` counts."""
        return "waves/SIMD" if self.amd else "warps/SM"


TARGETS = {
    "gfx942": Target("gfx942", "hip", "gfx942", 64, 304, "MI300X", vgpr_file=512, vgpr_granule=8,
                     lds_per_cu=64 * 1024, lds_granule=512),
    "gfx950": Target("gfx950", "hip", "gfx950", 64, 256, "MI355X", vgpr_file=512, vgpr_granule=8,
                     lds_per_cu=160 * 1024, lds_granule=1280),
    # No gfx1250 part's CU count is public here; its split plans assume 256 CUs, like MI355X.
    "gfx1250": Target("gfx1250", "hip", "gfx1250", 32, 256, "gfx1250 (256 CUs assumed)", vgpr_file=1024,
                      vgpr_granule=8, lds_per_cu=320 * 1024, lds_granule=2048),
    "sm90": Target("sm90", "cuda", 90, 32, 132, "H200"),
}

SM90_REGS = 65536
SM90_REG_UNIT = 256
SM90_SHARED = 228 * 1024
SM90_SHARED_PER_BLOCK = 227 * 1024
SM90_RESERVED_SHARED = 1024
SM90_WARPS = 64
SM90_BLOCKS = 32


def parse(text: str) -> list[Target]:
    """The targets of a comma list ('gfx942,sm90'), in its order; a ValueError names --target."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in TARGETS]
    if unknown or not names:
        raise ValueError(f"--target: expected a comma list of {', '.join(TARGETS)}, got {text!r}")
    return [TARGETS[n] for n in dict.fromkeys(names)]


def amd_waves(target: Target, *, vgprs: int, lds: int, warps: int, compiler: int) -> int:
    """Waves per SIMD of an AMD binary (module docstring): vgprs counts AGPRs too."""
    limits = [compiler, target.vgpr_file // max(_roundup(vgprs, target.vgpr_granule), target.vgpr_granule)]
    if lds:
        groups = target.lds_per_cu // _roundup(lds, target.lds_granule)
        limits.append(groups * warps // target.simds_per_cu)
    return max(0, min(limits))


def nvidia_warps(*, regs: int, shared: int, warps: int) -> int:
    """Warps per SM of an sm90 binary (module docstring); 0 when its shared memory cannot launch."""
    if shared > SM90_SHARED_PER_BLOCK:
        return 0
    per_warp = _roundup(max(regs, 1) * 32, SM90_REG_UNIT)
    blocks = min(SM90_REGS // per_warp // warps, SM90_SHARED // (shared + SM90_RESERVED_SHARED),
                 SM90_WARPS // warps, SM90_BLOCKS)
    return blocks * warps


def unlaunchable(target: Target, lds: int) -> str:
    """Why a binary with `lds` bytes of LDS (shared memory) a workgroup cannot launch on `target`, or ''."""
    if target.amd and lds > target.lds_per_cu:
        return f"cannot launch: {lds} bytes of LDS a workgroup, the CU has {target.lds_per_cu}"
    if not target.amd and lds > SM90_SHARED_PER_BLOCK:
        return f"cannot launch: {lds} bytes of shared memory a block, sm90 allows {SM90_SHARED_PER_BLOCK}"
    return ""
