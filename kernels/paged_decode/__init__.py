"""fp8 paged-attention decode: one-pass and split-K Triton kernels."""

from kernels.paged_decode.api import paged_attention_decode

__all__ = ["paged_attention_decode"]
