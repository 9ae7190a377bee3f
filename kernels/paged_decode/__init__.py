"""fp8 paged-attention decode: one-pass and split-K Triton kernels, and a Gluon one for NVIDIA GPUs."""

from kernels.paged_decode.api import dot_dtype, gluon_unavailable, paged_attention_decode

__all__ = ["dot_dtype", "gluon_unavailable", "paged_attention_decode"]
