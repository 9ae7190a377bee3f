"""Mutants: the production code with one fix taken back, and the kill matrix.

A mutant names one module, one exact snippet in it (which must occur exactly
once, so a refactor cannot silently turn the mutant into a no-op) and its
replacement: the code as it was before the fix. `applied(mutant)` loads a
modified copy of that module from a temporary file and swaps it in where the
public entry reaches it (a module attribute of the holder), for the duration
of a `with` block. Production code never sees a mutant unless this runs.

The kill matrix runs, for every mutant, its regression case with the real
code (must PASS) and with the mutant (must FAIL).
"""

import importlib
import importlib.util
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cases import regressions


@dataclass(frozen=True)
class Mutant:
    """name; module: the module mutated; holder.attr: where the public entry reaches it, replaced
    by the mutated module (or by its member `take`); old/new: the snippet with the fix and without.
    The regression of the same name is the case that must catch it."""

    name: str
    module: str
    holder: str
    attr: str
    old: str
    new: str
    take: str | None = None


_API = "kernels.paged_decode.api"
_KDA = "kernels.kda.api"

MUTANTS = (
    Mutant("capped-partitions", "kernels.paged_decode.plan", _API, "_plan",
           "part = max(partition_size, _cdiv(_cdiv(span, n_part), block_size) * block_size)",
           "part = partition_size"),
    Mutant("two-streams", "kernels.paged_decode.workspace", _API, "_workspace",
           "return _STORES.setdefault((device.type, device.index, stream), {})",
           "return _STORES.setdefault((device.type, device.index), {})"),
    Mutant("head-churn", "kernels.paged_decode.workspace", _API, "_workspace",
           'fits = _fits(store, "ml", device, ml_numel) and _fits(store, "acc", device, acc_numel)',
           'fits = _fits(store, "ml", device, ml_numel)'),
    Mutant("shape-churn", "kernels.paged_decode.plan", _API, "_plan",
           "p2=_next_pow2(n_part)", "p2=n_part"),
    Mutant("nan-unused-v-slots", "kernels.paged_decode.partition", _API, "_partition",
           "v_keep = key_ok[:, None]", "v_keep = page_ok[:, None]"),
    Mutant("empty-partitions", "kernels.paged_decode.reduce", _API, "_reduce",
           "seen = l_j > 0", "seen = l_j == l_j"),
    Mutant("cu-num-ignored", "kernels.arch", _API, "_arch",
           'env = os.environ.get("CU_NUM")', "env = None"),
    Mutant("v-scale-strides", _API, "kernels.paged_decode", "paged_attention_decode",
           "*ks_st, *vs_st, *ws_strides,", "*ks_st, *ks_st, *ws_strides,",
           take="paged_attention_decode"),
    Mutant("reduce-batch-stride", "kernels.paged_decode.reduce", _API, "_reduce",
           "ws_base = seq.to(tl.int64) * ws_seq + kvh * ws_head", "ws_base = kvh * ws_head"),
    Mutant("window-off-by-one", "kernels.paged_decode.partition", _API, "_partition",
           "row_lo = tl.maximum(row_hi - window, 0)", "row_lo = tl.maximum(row_hi - window + 1, 0)"),
    Mutant("graph-growth", "kernels.paged_decode.workspace", _API, "_workspace",
           'store.setdefault("retired", []).append(old)', "pass"),
    Mutant("kda-zero-seeded-pass-c", "kernels.kda.chunk", _KDA, "_chunk",
           "S = tl.load(sin_ptr + ((unit * H + h) * K + rk[:, None]) * V + cv[None, :])",
           "S = tl.zeros([K, BV], dtype=tl.float32)"),
    Mutant("kda-gate-cumsum-crosses-sequences", "kernels.kda.meta", _KDA, "_meta",
           "table.append((n, row, start, min(chunk, stop - start)))",
           "table.append((n, row, start, min(chunk, seq_len - start)))"),
    Mutant("kda-paged-state-transposed", "kernels.kda.chunk", _KDA, "_chunk",
           "cv[None, :] * cs2 + rk[:, None])", "cv[None, :] + rk[:, None] * cs2)"),
    Mutant("kda-scan-order", "kernels.kda.chunk", _KDA, "_chunk",
           'S = tl.dot(M, S, input_precision="tf32x3") + b', 'S = tl.dot(M, S + b, input_precision="tf32x3")'),
    Mutant("kda-neighbour-chunk-tile", "kernels.kda.chunk", _KDA, "_chunk",
           "wsc = cid.to(tl.int64) * H + h", "wsc = tl.maximum(cid - 1, 0).to(tl.int64) * H + h"),
)


def by_name(name: str) -> Mutant:
    for m in MUTANTS:
        if m.name == name:
            return m
    raise ValueError(f"mutant: expected one of {[m.name for m in MUTANTS]}, got {name!r}")


def _mutated_module(mutant: Mutant, folder: Path):
    original = importlib.import_module(mutant.module)
    source = Path(original.__file__).read_text()
    count = source.count(mutant.old)
    if count != 1:
        raise RuntimeError(f"mutant {mutant.name}: expected the snippet exactly once in {mutant.module}, "
                           f"found it {count} times: {mutant.old!r}")
    mutated = source.replace(mutant.old, mutant.new)
    path = folder / f"{mutant.module.rsplit('.', 1)[-1]}_{mutant.name.replace('-', '_')}.py"
    path.write_text(mutated)
    name = f"_quantfloor_mutant_{mutant.name.replace('-', '_')}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@contextmanager
def applied(mutant: Mutant):
    """Run the block with `mutant` in place of the real code (its source in a temporary folder)."""
    with tempfile.TemporaryDirectory(prefix="quantfloor-mutant-") as folder:
        module = _mutated_module(mutant, Path(folder))
        holder = importlib.import_module(mutant.holder)
        saved = getattr(holder, mutant.attr)
        setattr(holder, mutant.attr, getattr(module, mutant.take) if mutant.take else module)
        try:
            yield module
        finally:
            setattr(holder, mutant.attr, saved)
            sys.modules.pop(module.__name__, None)


def regression_of(mutant: Mutant):
    return regressions.by_name(mutant.name)


@dataclass(frozen=True)
class KillRow:
    """One mutant's line of the kill matrix: its case judged with the real code and with the mutant."""

    mutant: str
    case_id: str
    real: object
    mutated: object

    @property
    def killed(self) -> bool:
        return self.real.passed and not self.mutated.passed


def kill_matrix(tier: str, device, *, names=None) -> list[KillRow]:
    """Run every mutant of the tier (GPU-only regressions need the gpu tier) against its case."""
    from verify import runner

    rows = []
    for mutant in MUTANTS:
        if names and mutant.name not in names:
            continue
        reg = regression_of(mutant)
        if reg.gpu and tier == "cpu":
            continue
        real = runner.regression_verdict(reg, device)
        with applied(mutant):
            mutated = runner.regression_verdict(reg, device)
        rows.append(KillRow(mutant.name, reg.id, real, mutated))
    return rows


def format_kill_matrix(rows: list[KillRow]) -> str:
    """A fixed-width table: mutant, case, real err/floor, mutant err/floor, verdict."""
    head = f"{'mutant':<22} {'real':>9} {'mutant':>9}  {'result':<8} case"
    lines = [head, "-" * len(head)]
    for r in rows:
        result = "killed" if r.killed else ("REAL-FAIL" if not r.real.passed else "SURVIVED")
        lines.append(f"{r.mutant:<22} {_ratio(r.real):>9} {_ratio(r.mutated):>9}  {result:<8} {r.case_id}")
        if not r.mutated.passed:
            lines.append(f"{'':<22} mutant: {r.mutated.reasons[0][:110]}")
    return "\n".join(lines)


def _ratio(verdict) -> str:
    x = verdict.err_floor
    if x != x:
        return "nan"
    return "inf" if x == float("inf") else f"{x:.3g}"
