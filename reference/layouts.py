"""Paged KV-cache layouts, and gathering a sequence's tokens through its block table.

The logical layout is [num_blocks, block_size, Hkv, D] (nb, bs, Hkv, D). A cache
is stored in one of two layouts, with x = 16 // element_size (16 for 1-byte
codes and fp8, 8 for bf16/fp16), so that x elements make 16 bytes:

"plain"    : K and V both [nb, bs, Hkv, D], the logical layout itself.
"shuffled" : K [nb, Hkv, D//x, bs, x]   (needs D % x == 0)
             V [nb, Hkv, bs//x, D, x]   (needs bs % x == 0)

In a contiguous shuffled cache with strides s0 (block) and s1 (head), token
slot s, dim d of head h in block b sits at element offset

    K: b*s0 + h*s1 + (d//x)*bs*x + s*x + d%x
    V: b*s0 + h*s1 + (s//x)*D*x  + d*x + s%x

Token t of a sequence lives in block block_table_row[t // bs], slot t % bs.
"""

import torch

LAYOUTS = ("shuffled", "plain")


def vector_width(dtype: torch.dtype) -> int:
    """x = 16 // element_size: how many elements make one 16-byte vector."""
    size = torch.empty((), dtype=dtype).element_size()
    if 16 % size:
        raise ValueError(f"dtype: expected an element size dividing 16 bytes, got {dtype} ({size} bytes)")
    return 16 // size


def _check_layout(layout) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {', '.join(map(repr, LAYOUTS))}, got {layout!r}")


def _check_logical(logical, name: str) -> None:
    if not isinstance(logical, torch.Tensor) or logical.dim() != 4:
        got = list(logical.shape) if isinstance(logical, torch.Tensor) else type(logical).__name__
        raise ValueError(f"{name}: expected a tensor [num_blocks, block_size, Hkv, D], got {got}")


def _check_cache(cache, layout: str, name: str, shape_text: str) -> int:
    """Validate a stored cache's rank (and x for shuffled); return x."""
    _check_layout(layout)
    if not isinstance(cache, torch.Tensor):
        raise TypeError(f"{name}: expected a tensor, got {type(cache).__name__}")
    x = vector_width(cache.dtype)
    if layout == "plain":
        if cache.dim() != 4:
            raise ValueError(f"{name}: expected plain layout [nb, bs, Hkv, D], got shape {list(cache.shape)}")
    elif cache.dim() != 5 or cache.shape[-1] != x:
        raise ValueError(
            f"{name}: expected shuffled layout {shape_text} with x = {x} for {cache.dtype}, "
            f"got shape {list(cache.shape)}"
        )
    return x


def pack_k(logical: torch.Tensor, layout: str) -> torch.Tensor:
    """Logical K [nb, bs, Hkv, D] -> a contiguous K cache in `layout` (a new tensor)."""
    _check_layout(layout)
    _check_logical(logical, "logical")
    if layout == "plain":
        return logical.clone(memory_format=torch.contiguous_format)
    nb, bs, hkv, d = logical.shape
    x = vector_width(logical.dtype)
    if d % x:
        raise ValueError(f"logical: shuffled K needs D % x == 0 (x = {x} for {logical.dtype}), got D = {d}")
    shuffled = logical.reshape(nb, bs, hkv, d // x, x).permute(0, 2, 3, 1, 4)
    return shuffled.clone(memory_format=torch.contiguous_format)


def pack_v(logical: torch.Tensor, layout: str) -> torch.Tensor:
    """Logical V [nb, bs, Hkv, D] -> a contiguous V cache in `layout` (a new tensor)."""
    _check_layout(layout)
    _check_logical(logical, "logical")
    if layout == "plain":
        return logical.clone(memory_format=torch.contiguous_format)
    nb, bs, hkv, d = logical.shape
    x = vector_width(logical.dtype)
    if bs % x:
        raise ValueError(
            f"logical: shuffled V needs block_size % x == 0 (x = {x} for {logical.dtype}), got block_size = {bs}"
        )
    shuffled = logical.reshape(nb, bs // x, x, hkv, d).permute(0, 3, 1, 4, 2)
    return shuffled.clone(memory_format=torch.contiguous_format)


def unpack_k(cache: torch.Tensor, layout: str) -> torch.Tensor:
    """K cache in `layout` -> logical [nb, bs, Hkv, D] (may share storage with the cache)."""
    _check_cache(cache, layout, "cache", "[nb, Hkv, D//x, bs, x]")
    if layout == "plain":
        return cache
    nb, hkv, d_chunks, bs, x = cache.shape
    return cache.permute(0, 3, 1, 2, 4).reshape(nb, bs, hkv, d_chunks * x)


def unpack_v(cache: torch.Tensor, layout: str) -> torch.Tensor:
    """V cache in `layout` -> logical [nb, bs, Hkv, D] (may share storage with the cache)."""
    _check_cache(cache, layout, "cache", "[nb, Hkv, bs//x, D, x]")
    if layout == "plain":
        return cache
    nb, hkv, bs_chunks, d, x = cache.shape
    return cache.permute(0, 2, 4, 1, 3).reshape(nb, bs_chunks * x, hkv, d)


def _check_table(table, name: str, dims: int) -> None:
    if not isinstance(table, torch.Tensor) or table.dim() != dims or table.is_floating_point() or table.is_complex():
        got = (
            f"{table.dtype} tensor of shape {list(table.shape)}"
            if isinstance(table, torch.Tensor)
            else type(table).__name__
        )
        raise ValueError(f"{name}: expected a {dims}-d integer tensor, got {got}")


def gather_tokens(logical: torch.Tensor, block_table_row: torch.Tensor, n_tokens: int) -> torch.Tensor:
    """Tokens 0..n_tokens-1 of one sequence -> [n_tokens, Hkv, D].

    token t = logical[block_table_row[t // bs], t % bs].
    """
    _check_logical(logical, "logical")
    _check_table(block_table_row, "block_table_row", 1)
    nb, bs = logical.shape[:2]
    if n_tokens < 0 or n_tokens > block_table_row.shape[0] * bs:
        raise ValueError(
            f"n_tokens: expected 0..{block_table_row.shape[0] * bs} "
            f"({block_table_row.shape[0]} blocks of {bs}), got {n_tokens}"
        )
    t = torch.arange(n_tokens, device=logical.device)
    blocks = block_table_row.to(device=logical.device, dtype=torch.int64)[t // bs]
    if n_tokens and not bool(((blocks >= 0) & (blocks < nb)).all()):
        raise ValueError(f"block_table_row: expected block ids in [0, {nb}) for the first {n_tokens} tokens")
    return logical[blocks, t % bs]


def gather_sequences(logical: torch.Tensor, block_tables: torch.Tensor, max_len: int) -> torch.Tensor:
    """Tokens 0..max_len-1 of every sequence -> [num_seqs, max_len, Hkv, D].

    out[i, t] = logical[block_tables[i, t // bs], t % bs]. Table entries outside
    [0, num_blocks) count as padding and read block 0, so positions past a
    sequence's own blocks hold arbitrary cache contents: callers mask them.
    """
    _check_logical(logical, "logical")
    _check_table(block_tables, "block_tables", 2)
    nb, bs = logical.shape[:2]
    if max_len < 0 or max_len > block_tables.shape[1] * bs:
        raise ValueError(
            f"max_len: expected 0..{block_tables.shape[1] * bs} "
            f"({block_tables.shape[1]} blocks of {bs}), got {max_len}"
        )
    t = torch.arange(max_len, device=logical.device)
    blocks = block_tables.to(device=logical.device, dtype=torch.int64)[:, t // bs]
    blocks = torch.where((blocks >= 0) & (blocks < nb), blocks, torch.zeros_like(blocks))
    return logical[blocks, (t % bs).expand_as(blocks)]
