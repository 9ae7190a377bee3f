"""Paged attention decode in float64: the reference the decode kernels are judged against.

For sequence i of length L = seq_lens[i] and query row p of Q (Q = 1 for plain
decode, Q > 1 for multi-token prediction), the row sits at absolute position
L - Q + p and sees the keys

    visible(p) = [max(0, hi - W), hi)  with  hi = L - Q + 1 + p   (window W > 0)
    visible(p) = [0, hi)                                           (W <= 0, full causal)

Query head h reads kv head h // G (G = Hq / Hkv). With k_j, v_j the dequantized
keys and values (value * scale, per tensor or per token),

    s_j = scale * (q . k_j),   out = sum_j softmax(s)_j v_j   over j in visible(p),

and a row that sees no key (and every row of a sequence with L = 0) is zero.
Caches come in the "shuffled" or "plain" layout of reference.layouts, as
float8_e4m3fn / float8_e4m3fnuz (decoded from their bits by reference.fp8),
or bfloat16, float16, float32, float64 (upcast). Tokens that no row sees, at positions >= L or before
the first row's window, are selected away before any arithmetic: whatever
their cache slots, per-token scales (NaN, inf) or block-table entries hold
(even ids outside the cache, as for blocks a sliding window has released),
they never reach the result.
"""

from numbers import Integral, Real

import torch

from reference import fp8, layouts

_CACHE_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.bfloat16, torch.float16, torch.float32,
                 torch.float64)
_OPERAND_DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)


def _check_cache_dtype(cache, name: str) -> None:
    if not isinstance(cache, torch.Tensor):
        raise TypeError(f"{name}: expected a tensor, got {type(cache).__name__}")
    if cache.dtype not in _CACHE_DTYPES:
        raise TypeError(
            f"{name}: expected dtype float8_e4m3fn, float8_e4m3fnuz, bfloat16, float16, float32 or float64, "
            f"got {cache.dtype}"
        )


def _values(cache_tokens: torch.Tensor) -> torch.Tensor:
    """Gathered cache elements -> float64 (fp8 decoded from its bits, the rest upcast)."""
    if cache_tokens.dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):
        return fp8.decode(cache_tokens.view(torch.uint8), fp8.format_of(cache_tokens.dtype))
    return cache_tokens.to(torch.float64)


def _per_token_scale(scale, name: str, shape, device) -> torch.Tensor:
    """A k/v scale as float64: a 0-d tensor (per-tensor) or [nb, bs, Hkv, 1] (per-token, logical layout).

    None -> 1; a number or a one-element tensor -> that value; a per-token
    [num_blocks, Hkv, block_size] tensor (any strides) -> permuted onto the
    logical cache layout so that it gathers like the cache.
    """
    if scale is None:
        return torch.ones((), dtype=torch.float64, device=device)
    if isinstance(scale, Real) and not isinstance(scale, bool):
        return torch.tensor(float(scale), dtype=torch.float64, device=device)
    if not isinstance(scale, torch.Tensor) or not scale.is_floating_point():
        got = scale.dtype if isinstance(scale, torch.Tensor) else type(scale).__name__
        raise TypeError(f"{name}: expected None, a number or a floating-point tensor, got {got}")
    if scale.numel() == 1:
        return scale.to(device=device, dtype=torch.float64).reshape(())
    nb, bs, hkv, _ = shape
    if tuple(scale.shape) != (nb, hkv, bs):
        raise ValueError(
            f"{name}: expected one element (per-tensor) or shape [num_blocks, Hkv, block_size] = "
            f"{[nb, hkv, bs]} (per-token), got {list(scale.shape)}"
        )
    return scale.to(device=device, dtype=torch.float64).permute(0, 2, 1).unsqueeze(-1)


def _check_tables(block_tables, seq_lens, num_seqs: int, device):
    """Validate the types and shapes of block_tables [num_seqs, max_blocks] and seq_lens [num_seqs].

    Returns both as int64 on `device`.
    """
    for name, table, dims in (("block_tables", block_tables, 2), ("seq_lens", seq_lens, 1)):
        if not isinstance(table, torch.Tensor) or table.is_floating_point() or table.is_complex():
            got = table.dtype if isinstance(table, torch.Tensor) else type(table).__name__
            raise TypeError(f"{name}: expected an integer tensor, got {got}")
        if table.dim() != dims or table.shape[0] != num_seqs:
            lead = "[num_seqs, max_blocks]" if dims == 2 else "[num_seqs]"
            raise ValueError(f"{name}: expected shape {lead} with num_seqs = {num_seqs}, got {list(table.shape)}")
    lens = seq_lens.to(device=device, dtype=torch.int64)
    if bool((lens < 0).any()):
        raise ValueError(f"seq_lens: expected lengths >= 0, got {lens.tolist()}")
    return block_tables.to(device=device, dtype=torch.int64), lens


def _check_read_blocks(tables, first, lens, num_blocks: int, block_size: int) -> None:
    """Every table entry whose block holds a token in [first, L) must name a block of the cache."""
    capacity = tables.shape[1] * block_size
    if bool((lens > capacity).any()):
        raise ValueError(
            f"seq_lens: expected lengths <= max_blocks * block_size = {capacity}, got {lens.tolist()}"
        )
    start = torch.arange(tables.shape[1], device=tables.device) * block_size
    read = (start < lens[:, None]) & (start + block_size > first[:, None])
    bad = read & ((tables < 0) | (tables >= num_blocks))
    if bool(bad.any()):
        seq, col = (int(v) for v in bad.nonzero()[0])
        raise ValueError(
            f"block_tables: expected block ids in [0, {num_blocks}) for every block a query can see, "
            f"got {int(tables[seq, col])} at sequence {seq}, column {col}"
        )


def paged_decode(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    scale: float,
    k_scale=None,
    v_scale=None,
    sliding_window: int = 0,
    layout: str = "shuffled",
    operand_dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """Attention of each query row over its sequence's visible cached tokens, in float64.

    query        : [num_seqs, Hq, D] or [num_seqs, Q, Hq, D] (multi-token prediction)
    key_cache    : K in `layout` ("shuffled" [nb, Hkv, D//x, bs, x] or "plain" [nb, bs, Hkv, D])
    value_cache  : V in `layout` ("shuffled" [nb, Hkv, bs//x, D, x] or "plain" [nb, bs, Hkv, D])
    block_tables : [num_seqs, max_blocks] integer block ids (entries for blocks no row sees are ignored)
    seq_lens     : [num_seqs] integer lengths, the current query tokens included
    scale        : softmax scale on q . k
    k_scale, v_scale : None, a number, a one-element tensor, or [nb, Hkv, bs] per-token
    sliding_window   : W > 0 keeps the W latest keys (the row's own included); W <= 0 is full causal
    operand_dtype    : float64 (the reference). bf16/fp16/fp32 give the same-precision implementation
                       the floor of unquantized caches is measured with: the dequantized q, k, v and
                       the probabilities are rounded to it before each product, the products and
                       the softmax stay in float64 (so what differs is the operand rounding alone).

    Returns float64 [num_seqs, Hq, D] or [num_seqs, Q, Hq, D] (as query) on query's device.
    """
    if not isinstance(query, torch.Tensor) or not query.is_floating_point():
        got = query.dtype if isinstance(query, torch.Tensor) else type(query).__name__
        raise TypeError(f"query: expected a floating-point tensor, got {got}")
    if query.dim() not in (3, 4):
        raise ValueError(f"query: expected [num_seqs, Hq, D] or [num_seqs, Q, Hq, D], got {list(query.shape)}")
    _check_cache_dtype(key_cache, "key_cache")
    _check_cache_dtype(value_cache, "value_cache")
    if isinstance(scale, bool) or not isinstance(scale, Real):
        raise TypeError(f"scale: expected a python number, got {type(scale).__name__}")
    if isinstance(sliding_window, bool) or not isinstance(sliding_window, Integral):
        raise TypeError(f"sliding_window: expected an int, got {type(sliding_window).__name__}")
    if operand_dtype not in _OPERAND_DTYPES:
        raise TypeError(f"operand_dtype: expected one of {_OPERAND_DTYPES}, got {operand_dtype}")
    device = query.device
    keys = layouts.unpack_k(key_cache, layout)
    values = layouts.unpack_v(value_cache, layout)
    if keys.shape != values.shape:
        raise ValueError(
            f"value_cache: expected the key cache's logical shape [nb, bs, Hkv, D] = {list(keys.shape)}, "
            f"got {list(values.shape)}"
        )
    nb, bs, hkv, d = keys.shape
    q = query.to(torch.float64)
    if q.dim() == 3:
        q = q.unsqueeze(1)
    num_seqs, q_len, hq, qd = q.shape
    if qd != d:
        raise ValueError(f"query: expected head dim D = {d} of the caches, got {qd}")
    if hkv == 0 or hq % hkv:
        raise ValueError(f"query: expected Hq to be a multiple of the caches' Hkv = {hkv}, got Hq = {hq}")
    tables, lens = _check_tables(block_tables, seq_lens, num_seqs, device)
    k_token_scale = _per_token_scale(k_scale, "k_scale", keys.shape, device)
    v_token_scale = _per_token_scale(v_scale, "v_scale", keys.shape, device)

    # Row p sees [lo_p, hi_p); row 0 has the lowest lo, the last row the highest hi (= L).
    hi = lens[:, None] - q_len + 1 + torch.arange(q_len, device=device)  # [num_seqs, Q]
    lo = hi - int(sliding_window) if sliding_window > 0 else torch.zeros_like(hi)
    _check_read_blocks(tables, lo[:, 0], lens, nb, bs)
    max_len = int(lens.max()) if num_seqs else 0
    if max_len == 0:
        return torch.zeros(query.shape, dtype=torch.float64, device=device)

    pos = torch.arange(max_len, device=device)
    read = (pos >= lo[:, :1]) & (pos < lens[:, None])  # [num_seqs, max_len]: tokens some row sees
    read = read[:, :, None, None]

    def dequantized(cache_logical, token_scale):
        raw = _values(layouts.gather_sequences(cache_logical.to(device), tables, max_len))
        raw = torch.where(read, raw, torch.zeros_like(raw))
        if token_scale.dim():
            token_scale = layouts.gather_sequences(token_scale, tables, max_len)
            token_scale = torch.where(read, token_scale, torch.ones_like(token_scale))
        return raw * token_scale  # [num_seqs, max_len, Hkv, D]

    k = dequantized(keys, k_token_scale)
    v = dequantized(values, v_token_scale)

    visible = (pos >= lo[..., None]) & (pos < hi[..., None])  # [num_seqs, Q, max_len]
    visible = visible[:, :, None, None, :]  # onto scores [num_seqs, Q, Hkv, G, max_len]
    def rounded(x):
        return x.to(operand_dtype).to(torch.float64)

    qg = q.reshape(num_seqs, q_len, hkv, hq // hkv, d)
    scores = scale * torch.einsum("sqhgd,slhd->sqhgl", rounded(qg), rounded(k))
    scores = torch.where(visible, scores, torch.full_like(scores, float("-inf")))
    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    weights = torch.where(visible, torch.exp(scores - row_max), torch.zeros_like(scores))
    total = weights.sum(dim=-1, keepdim=True)
    probs = weights / torch.where(total > 0, total, torch.ones_like(total))
    out = torch.einsum("sqhgl,slhd->sqhgd", rounded(probs), rounded(v)).reshape(num_seqs, q_len, hq, d)
    return out if query.dim() == 4 else out.squeeze(1)
