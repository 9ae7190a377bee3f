"""The implementations cases are judged on (`quantfloor run --impl SPEC`).

An implementation of an operator is a callable plus its capabilities: a dict
from case factors (the fields of `cases.decode.DecodeCase`: cache, scales,
block, hq, hkv, d, window, q, layout, dist, ...) to the values it supports.
A case outside them is SKIPPED with the reason, never judged and never a
pass; a case it raises on is a FAIL. SPEC is one of

    triton                   ours, every operator and kernel path (the default)
    torch                    a plain decode baseline (verify/decode_op.py)
    fla-chunk                fla-core's chunk_kda (verify/fla_kda.py; the `fla` extra)
    fla-recurrent            fla-core's fused_recurrent_kda
    decode=MODULE:FUNCTION   a user's decode, MODULE an importable name or a .py path
    kda=MODULE:FUNCTION      a user's KDA forward

A decode implementation is called as

    fn(out, query, key_cache, value_cache, block_tables, seq_lens, scale, k_scale, v_scale,
       sliding_window, layout=..., max_seq_len=...)

with the arguments of `kernels.paged_decode.paged_attention_decode`, and
writes `out`. A KDA implementation is called as

    fn(q, k, v, g, beta, scale=..., initial_state=..., output_final_state=..., cu_seqlens=...,
       gate=..., A_log=..., dt_bias=..., lower_bound=..., beta_sigmoid=..., qk_l2norm=...)

(the arguments of `kernels.kda.flash_kda_fwd` that name no layout of ours),
and returns (o, final_state); it runs the cases without paged or V-first
states. Capabilities come from the optional attribute `fn.quantfloor_caps`
(`{"layout": ("plain",), "d": (64, 128)}`, keys the fields of
`cases.decode.DecodeCase` or `cases.kda.KdaCase`); without it every case is
tried. Our kernel paths (decode onepass, split, auto; KDA schedules) are ours
alone: another implementation runs the `auto` cases, and the others are
skipped. Each operator's built-ins and the factors only ours take live in its
record (verify.operators).
"""

import importlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable


from verify import operators

OPERATORS = tuple(operators.OPERATORS)


@dataclass(frozen=True)
class Impl:
    """operator, name (its spec), version (of the package it comes from), fn (None: ours, through
    verify.adapters), caps ({case factor: supported values}; empty: every case is tried)."""

    operator: str
    name: str
    version: str
    fn: Callable | None = None
    caps: dict = field(default_factory=dict)

    def skip_reason(self, case) -> str | None:
        """Why `case` lies outside the capabilities, or None when it is to be judged."""
        for factor, supported in self.caps.items():
            value = getattr(case, factor, None)
            if value not in supported:
                return f"{self.name} supports {factor} in {tuple(supported)}, the case has {value!r}"
        return None


def _version(module_name: str) -> str:
    try:
        from importlib import metadata
        return metadata.version(module_name)
    except Exception:  # a module outside any installed distribution
        return "unversioned"


OURS = {op: Impl(op, "triton", _version("quantfloor")) for op in OPERATORS}


def _load(module: str):
    """The module named `module` (importable name or .py path); ValueError naming --impl if it cannot load."""
    try:
        if not module.endswith(".py"):
            return importlib.import_module(module)
        path = Path(module)
        if not path.is_file():
            raise ValueError(f"--impl: no file {module}")
        spec = importlib.util.spec_from_file_location(f"_quantfloor_impl_{path.stem}", path)
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
        return loaded
    except ValueError:
        raise
    except Exception as exc:  # the user's module failed to import or to run
        raise ValueError(f"--impl: cannot load {module}: {type(exc).__name__}: {exc}") from None


def parse(spec: str) -> Impl:
    """The implementation named by `spec` other than ours (see the module docstring); ValueError naming --impl."""
    for op in operators.OPERATORS.values():
        builtin = op.builtins.get(spec)
        if builtin is not None:
            if builtin.check is not None:
                builtin.check()  # refused here, naming what is missing
            return Impl(op.name, spec, _version(builtin.package), builtin.fn, dict(op.ours_alone))
    operator, _, target = spec.partition("=")
    module, _, name = target.rpartition(":")
    if operator not in OPERATORS or not module or not name:
        raise ValueError(f"--impl: expected triton, torch, fla-chunk, fla-recurrent, decode=MODULE:FUNCTION "
                         f"or kda=MODULE:FUNCTION, got {spec!r}")
    fn = getattr(_load(module), name, None)
    if not callable(fn):
        raise ValueError(f"--impl: {module} has no function {name!r}")
    caps = dict(getattr(fn, "quantfloor_caps", {}))
    for factor, values in operators.OPERATORS[operator].ours_alone.items():
        caps.setdefault(factor, values)
    top = module.split(".")[0] if not module.endswith(".py") else Path(module).stem
    return Impl(operator, spec, _version(top), fn, caps)


def select(specs) -> dict:
    """{operator: Impl} for the --impl specs given (at most one per operator), ours for the rest."""
    chosen = dict(OURS)
    named = set()
    for spec in specs or ():
        if spec == "triton":
            continue
        impl = parse(spec)
        if impl.operator in named:
            raise ValueError(f"--impl: one implementation per operator, got two for {impl.operator}")
        named.add(impl.operator)
        chosen[impl.operator] = impl
    return chosen
