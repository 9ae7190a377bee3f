"""fp8 paged-attention decode: one-pass and split-K Triton kernels."""

from kernels.paged_decode.api import dot_dtype, paged_attention_decode

__all__ = ["dot_dtype", "paged_attention_decode"]
