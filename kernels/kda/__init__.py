"""FlashKDA: the chunked Kimi Delta Attention forward in Triton (entry: flash_kda_fwd)."""

from kernels.kda.api import flash_kda_fwd

__all__ = ["flash_kda_fwd"]
