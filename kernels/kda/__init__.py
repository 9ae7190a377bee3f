"""FlashKDA: the chunked Kimi Delta Attention forward in Triton (entry: flash_kda_fwd)."""

from kernels.kda.api import dot_dtype, flash_kda_fwd

__all__ = ["dot_dtype", "flash_kda_fwd"]
