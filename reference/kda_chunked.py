"""KDA forward in chunks (the WY / UT-transform form) at a production kernel's precision.

This is the same-precision floor for KDA kernels: the same algorithm family as a
chunked kernel, in plain torch, with every matrix-product operand rounded to
`operand_dtype` (bf16 by default) and the products, sums, the state and the gate
cumsum in float32. With operand_dtype=float64 everything is float64 and the result
equals the token recurrence of reference.kda.naive_kda up to float64 rounding.

Per sequence, head and chunk of C tokens (chunks never cross sequences; a sequence's
last chunk is completed with tokens of zero log-decay and zero beta, which change
nothing), with S the state entering the chunk (K x V), rows i, j = 0..C-1:

    gc_i      = g_0 + ... + g_i                                   (per channel)
    A_kk[i,j] = beta_i sum_c k_i[c] k_j[c] exp(gc_i[c] - gc_j[c])   for j <  i, else 0
    A_qk[i,j] =        sum_c q_i[c] k_j[c] exp(gc_i[c] - gc_j[c])   for j <= i, else 0
    T         = (I + A_kk)^-1                                     (unit lower triangular)
    w         = T (beta * k * exp(gc)),    u = T (beta * v)
    v_new     = u - w S                  (the chunk's delta-rule residuals, beta included)
    o         = scale * ((q * exp(gc)) S + A_qk v_new)
    S        <- diag(exp(gc_last)) S + (k * exp(gc_last - gc))^T v_new

Derivation: unrolling the recurrence inside the chunk, S_i = diag(exp(gc_i)) S +
sum_{j<=i} diag(exp(gc_i - gc_j)) k_j d_j^T with d_i = beta_i (v_i - (decayed S_{i-1})^T k_i),
so d_i + sum_{j<i} A_kk[i,j] d_j = beta_i v_i - beta_i (k_i * exp(gc_i))^T S, i.e.
(I + A_kk) d = beta v - (beta k exp(gc)) S and d = v_new; o_i = scale S_i^T q_i and
S_{C-1} give the last two lines.

Every exponent is formed before exp: gc_i - gc_j only where j <= i (-inf elsewhere),
gc and gc_last - gc are <= 0, so strong decay underflows to 0 and never meets an inf.
"""

import torch

from reference.kda import check_kda_arguments, load_states, prepare_inputs, store_states

OPERAND_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)


def chunk_kda_torch(
    q,
    k,
    v,
    g,
    beta,
    *,
    chunk_size=64,
    operand_dtype=torch.bfloat16,
    scale=None,
    initial_state=None,
    output_final_state=False,
    cu_seqlens=None,
    gate="log",
    A_log=None,
    dt_bias=None,
    lower_bound=None,
    beta_sigmoid=False,
    qk_l2norm=False,
    state_v_first=False,
    state_cache=None,
    state_indices=None,
    has_initial_state=None,
):
    """KDA forward by chunks of `chunk_size` tokens; arguments and layouts as naive_kda.

    Precision: q, k, v and every other matrix-product operand are rounded to
    `operand_dtype`; products accumulate, and the state, the gate cumsum and the
    UT solve stay, in float32 (float64 when operand_dtype is float64). The gate, beta
    and l2norm transforms come from reference.kda.prepare_inputs in float64 and are
    then cast to that dtype.

    Returns (o, final) in that dtype: o [B, T, H, V]; final as naive_kda returns it
    (dense states when output_final_state, the updated cache copy with state_cache,
    else None). Inputs are never written.
    """
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
        raise ValueError(f"chunk_size: expected a positive int, got {chunk_size!r}")
    if operand_dtype not in OPERAND_DTYPES:
        raise ValueError(
            "operand_dtype: expected torch.bfloat16, torch.float16, torch.float32 or torch.float64, "
            f"got {operand_dtype!r}"
        )
    seqs = check_kda_arguments(
        q,
        k,
        v,
        g,
        beta,
        scale=scale,
        initial_state=initial_state,
        output_final_state=output_final_state,
        cu_seqlens=cu_seqlens,
        state_v_first=state_v_first,
        state_cache=state_cache,
        state_indices=state_indices,
        has_initial_state=has_initial_state,
    )
    heads, dim_k, dim_v = q.shape[2], q.shape[3], v.shape[3]
    scale = dim_k**-0.5 if scale is None else float(scale)
    acc = torch.float64 if operand_dtype == torch.float64 else torch.float32

    def rnd(x):
        """A matrix-product operand: rounded to operand_dtype, multiplied in `acc`."""
        return x.to(operand_dtype).to(acc)

    inputs = prepare_inputs(
        q,
        k,
        v,
        g,
        beta,
        gate=gate,
        A_log=A_log,
        dt_bias=dt_bias,
        lower_bound=lower_bound,
        beta_sigmoid=beta_sigmoid,
        qk_l2norm=qk_l2norm,
    )
    # [N, L, H, ...] -> [N, H, chunks, C, ...]
    q, k, v, log_decay, beta = (
        seqs.gather(x, chunk_size).unflatten(1, (-1, chunk_size)).movedim(3, 1).to(acc) for x in inputs
    )
    q, k, v = rnd(q), rnd(k), rnd(v)
    state = load_states(
        seqs,
        heads,
        dim_k,
        dim_v,
        initial_state=initial_state,
        state_v_first=state_v_first,
        state_cache=state_cache,
        state_indices=state_indices,
        has_initial_state=has_initial_state,
        dtype=acc,
        device=q.device,
    )
    causal = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device).tril()
    strictly_lower = causal.tril(-1)
    eye = torch.eye(chunk_size, dtype=acc, device=q.device)
    out = q.new_empty(*q.shape[:4], dim_v)
    for c in range(q.shape[2]):
        q_c, k_c, v_c, beta_c = q[:, :, c], k[:, :, c], v[:, :, c], beta[:, :, c, :, None]
        gc = log_decay[:, :, c].cumsum(-2)  # [N, H, C, K]
        pair_exponent = gc[..., :, None, :] - gc[..., None, :, :]  # [N, H, i, j, K]: gc_i - gc_j
        pair_decay = torch.where(causal[..., None], pair_exponent, float("-inf")).exp()
        k_decayed = rnd(k_c[..., None, :, :] * pair_decay)  # k_j * exp(gc_i - gc_j)
        a_qk = torch.einsum("nhic,nhijc->nhij", q_c, k_decayed)
        a_kk = torch.where(strictly_lower, beta_c * torch.einsum("nhic,nhijc->nhij", k_c, k_decayed), 0.0)
        ut = torch.linalg.solve_triangular(eye + a_kk, eye, upper=False, unitriangular=True)
        w = rnd(ut) @ rnd(beta_c * k_c * gc.exp())
        u = rnd(ut) @ rnd(beta_c * v_c)
        v_new = u - rnd(w) @ rnd(state)
        out[:, :, c] = scale * (rnd(q_c * gc.exp()) @ rnd(state) + rnd(a_qk) @ rnd(v_new))
        gc_last = gc[..., -1:, :]  # [N, H, 1, K]
        state = state * gc_last.exp().transpose(-1, -2) + rnd(k_c * (gc_last - gc).exp()).transpose(-1, -2) @ rnd(v_new)
    final = store_states(
        state,
        output_final_state=output_final_state,
        state_v_first=state_v_first,
        state_cache=state_cache,
        state_indices=state_indices,
    )
    return seqs.scatter(out.movedim(1, 3).flatten(1, 2)), final
