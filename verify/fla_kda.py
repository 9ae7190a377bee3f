"""fla-core's KDA kernels as implementations to judge (`--impl fla-chunk`, `--impl fla-recurrent`).

Each takes the KDA arguments of verify.impls and maps them onto fla.ops.kda:

    gate="log"          g is the log-decay                 use_gate_in_kernel=False
    gate="softplus"     -exp(A_log) * softplus(g + dt_bias)  use_gate_in_kernel=True
    gate="lower_bound"  lb * sigmoid(exp(A_log) * (g + dt_bias))
                                                           use_gate_in_kernel=True, lower_bound=lb
                                                           (chunk: safe_gate=True, lb in [-5, 0))
    beta_sigmoid        beta = sigmoid(beta) in kernel      use_beta_sigmoid_in_kernel
    qk_l2norm           q, k L2-normalised in kernel        use_qk_l2norm_in_kernel
    cu_seqlens          int64 sequence offsets

and returns (o, final_state) with final_state [N, H, K, V] fp32, as ours does.
fla-core is the optional `fla` extra; without it the spec is refused by name.
"""

import torch

PACKAGE = "fla-core"


def check() -> None:
    """ValueError naming --impl and the package when fla-core cannot be imported here."""
    _fla_kda()


def _fla_kda():
    try:
        from fla.ops import kda
    except Exception as exc:  # not installed, or it failed to import
        raise ValueError(f"--impl fla-chunk/fla-recurrent: needs {PACKAGE} (pip install 'quantfloor[fla]'), "
                         f"got {type(exc).__name__}: {exc}") from None
    return kda


def _options(gate, A_log, dt_bias, lower_bound, beta_sigmoid, qk_l2norm, cu_seqlens) -> dict:
    """FLA's keyword arguments for our gate, beta and norm options (the table above)."""
    options = dict(use_gate_in_kernel=gate != "log", use_beta_sigmoid_in_kernel=bool(beta_sigmoid),
                   use_qk_l2norm_in_kernel=bool(qk_l2norm),
                   cu_seqlens=None if cu_seqlens is None else cu_seqlens.to(torch.int64))
    if gate != "log":
        options.update(A_log=A_log, dt_bias=dt_bias, lower_bound=lower_bound)
    return options


def chunk(q, k, v, g, beta, *, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None,
          gate="log", A_log=None, dt_bias=None, lower_bound=None, beta_sigmoid=False, qk_l2norm=False):
    """fla.ops.kda.chunk_kda on our arguments: (o, final_state)."""
    options = _options(gate, A_log, dt_bias, lower_bound, beta_sigmoid, qk_l2norm, cu_seqlens)
    options["safe_gate"] = gate == "lower_bound"
    return _fla_kda().chunk_kda(q, k, v, g, beta, scale=scale, initial_state=initial_state,
                                output_final_state=output_final_state, **options)


def recurrent(q, k, v, g, beta, *, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None,
              gate="log", A_log=None, dt_bias=None, lower_bound=None, beta_sigmoid=False, qk_l2norm=False):
    """fla.ops.kda.fused_recurrent_kda on our arguments: (o, final_state)."""
    options = _options(gate, A_log, dt_bias, lower_bound, beta_sigmoid, qk_l2norm, cu_seqlens)
    return _fla_kda().fused_recurrent_kda(q, k, v, g, beta, scale=scale, initial_state=initial_state,
                                          output_final_state=output_final_state, **options)
