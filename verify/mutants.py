"""Mutants: the production code with one fix taken back, and the kill matrix.

A mutant names one module, one exact snippet in it (which must occur exactly
once, so a refactor cannot silently turn the mutant into a no-op) and its
replacement: the code as it was before the fix. `applied(mutant)` loads a
modified copy of that module from a temporary file and swaps it in where the
public entry reaches it (a module attribute of the holder), for the duration
of a `with` block. Production code never sees a mutant unless this runs.

The kill matrix runs, for every mutant, its regression case with the real
code (must PASS) and with the mutant (must FAIL), each in an isolated worker.
Two mutants stand for kernels that misbehave outright: `wild-output-store`
writes far outside the output (a segmentation fault under the interpreter,
an illegal address on a GPU) and `endless-loop` spins forever; they
prove that such a case fails with its own reason and the run goes on.
"""

import importlib
import importlib.util
import sys
import tempfile
import textwrap
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from cases import regressions


@dataclass(frozen=True)
class Mutant:
    """name; module: the module mutated; holder.attr: where the public entry reaches it, replaced
    by the mutated module (or by its member `take`); through: where a kernel module takes its
    helpers from the mutated one, the module loaded again against it and put at holder.attr
    instead; old/new: the snippet with the fix and without. The regression of the same name is the
    case that must catch it."""

    name: str
    module: str
    holder: str
    attr: str
    old: str
    new: str
    take: str | None = None
    through: str | None = None


_API = "kernels.paged_decode.api"
_PARTITION = "kernels.paged_decode.partition"
_GLUON = "kernels.paged_decode.gluon_partition"
_KDA = "kernels.kda.api"
# The per-token K scale load of the decode partition kernel (k-scale-folded-fp16 moves it).
_KS_LOAD = ("        ks_off = page * ks_blk + kvh * ks_head + slot * ks_slot\n"
            "        ks = tl.load(k_scale_ptr + ks_off[:, None] + lanes[None, :] * ks_slot, mask=page_ok[:, None])\n")

# The one-slice score product, and the sliced one that follows it (k-scale-folded-fp16 replaces both).
_K_DOT = ("        if KEYS_M:\n"
          "            s = tl.dot(k, q)  # [keys, rows]\n"
          "        else:\n"
          "            s = tl.dot(q, tl.trans(k))  # [rows, keys]\n")
_SLICED_SCORES = ("    else:\n"
                  "        if KEYS_M:\n"
                  "            s = tl.zeros([BLOCK_N, q.shape[0]], tl.float32)\n"
                  "        else:\n"
                  "            s = tl.zeros([q.shape[0], BLOCK_N], tl.float32)\n"
                  "        for c in tl.static_range(D // DV):\n"
                  "            cols = c * DV + tl.arange(0, DV)\n"
                  "            k = tl.load(k_ptr + k_row + key_dims(cols, k_dhi, k_dlo, K_DX)[None, None, :], "
                  "mask=page_ok[:, None, None])\n"
                  "            k = tl.reshape(to_dot(k, FP8_MODE, DOT), [BLOCK_N, DV])\n"
                  "            q_c = load_query(q_ptr, q, row_ok, c * DV, DV, KA)\n"
                  "            if DOT == tl.float16:\n"
                  "                q_c = q_c * tl.expand_dims(q_shift, KA)\n"
                  "            if KEYS_M:\n"
                  "                s += tl.dot(k, q_c.to(DOT))\n"
                  "            else:\n"
                  "                s += tl.dot(q_c.to(DOT), tl.trans(k))\n")

_DECODE = (
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
           "p2=pow2_at_least(n_part)", "p2=n_part"),
    Mutant("wild-output-store", "kernels.paged_decode.partition", _API, "_partition",
           "o_off = seq.to(tl.int64) * s_oi + tl.expand_dims(tok * s_op",
           "o_off = seq.to(tl.int64) * s_oi + (1 << 44) + tl.expand_dims(tok * s_op"),
    # The spin reads memory as volatile: a loop without effects would be deleted by the
    # GPU compiler (it may assume loops end), and the kernel would finish correct.
    Mutant("endless-loop", "kernels.paged_decode.partition", _API, "_partition",
           "    part_hi = tl.minimum(part_lo + part_size, kv_hi)\n",
           "    part_hi = tl.minimum(part_lo + part_size, kv_hi)\n    spin = part_lo\n"
           "    while spin <= part_hi:\n        spin += tl.minimum(tl.load(seq_lens_ptr + seq, volatile=True), 0)\n"),
    Mutant("nan-unused-v-slots", "kernels.paged_decode.partition", _API, "_partition",
           "v = tl.where(tl.expand_dims(keys, KA) < kv_hi, v, 0.0)",
           "v = tl.where(tl.expand_dims(keys, KA) < table_hi, v, 0.0)"),
    Mutant("nan-unused-v-scales", "kernels.paged_decode.partition", _API, "_partition",
           "vs = tl.where(keys < kv_hi, vs, 0.0)", "vs = vs"),
    Mutant("empty-partitions", "kernels.paged_decode.reduce", _API, "_partition",
           "mask=wrote[:, None] & cell_ok", "mask=in_part[:, None] & cell_ok", through=_PARTITION),
    Mutant("arrivals-not-reset", "kernels.paged_decode.reduce", _API, "_partition",
           '        tl.atomic_xchg(count_ptr + group, 0, sem="relaxed", scope="gpu")\n', "        pass\n",
           through=_PARTITION),
    Mutant("fold-before-last-arrival", "kernels.paged_decode.reduce", _API, "_partition",
           "last = ticket == arrivals - 1", "last = ticket == arrivals - 2", through=_PARTITION),
    Mutant("cu-num-ignored", "kernels.arch", _API, "_arch",
           'env = os.environ.get("CU_NUM")', "env = None"),
    Mutant("v-scale-strides", _API, "kernels.paged_decode", "paged_attention_decode",
           "*call.ks_st, *call.vs_st, *ws_strides)", "*call.ks_st, *call.ks_st, *ws_strides)",
           take="paged_attention_decode"),
    Mutant("reduce-batch-stride", _PARTITION, _API, "_partition",
           "fold_partitions(out_ptr, m_ws_ptr, l_ws_ptr, acc_ws_ptr, ws_tile,",
           "fold_partitions(out_ptr, m_ws_ptr, l_ws_ptr, acc_ws_ptr, kvh * ws_head,"),
    Mutant("window-off-by-one", "kernels.paged_decode.partition", _API, "_partition",
           "row_lo = tl.maximum(row_hi - window, 0)", "row_lo = tl.maximum(row_hi - window + 1, 0)"),
    Mutant("graph-growth", "kernels.paged_decode.workspace", _API, "_workspace",
           'store.setdefault("retired", []).append(old)', "pass"),
    # The decoders the CPU (fields moved code by code) and sm90 (four codes at a time in PTX) run for
    # bit-decoded fp8 with fp16 operands, flushed where both return; the fp32 one has a test.
    Mutant("fp8-subnormals-flushed", "kernels.paged_decode.partition", _API, "_partition",
           "    return value\n", "    return tl.where((raw & 0x78) == 0, 0.0, value)\n"),
    Mutant("row-tiles-ignored", "kernels.paged_decode.partition", _API, "_partition",
           "rows = (head_tile % ROW_TILES) * M_PAD + tl.arange(0, M_PAD)", "rows = tl.arange(0, M_PAD)"),
    Mutant("reduce-over-kv-heads-only", _PARTITION, _API, "_partition",
           "if last_to_arrive(count_ptr, seq * (tl.num_programs(1) // SLICES) + head_tile, n_part * SLICES):",
           "if last_to_arrive(count_ptr, seq * (tl.num_programs(1) // (SLICES * ROW_TILES)) + kvh,\n"
           "                          n_part * SLICES * ROW_TILES):"),
    Mutant("head-padding-unmasked", "kernels.paged_decode.partition", _API, "_partition",
           "        cell_ok = cell_ok & tl.expand_dims(dims < D_REAL, RA)\n", "        cell_ok = cell_ok\n"),
    Mutant("running-max-from-zero", "kernels.paged_decode.partition", _API, "_partition",
           'm_i = tl.full([M_PAD], float("-inf"), tl.float32)', "m_i = tl.zeros([M_PAD], tl.float32)"),
    Mutant("running-max-frozen", "kernels.paged_decode.partition", _API, "_partition",
           "m_new = tl.maximum(m_i, tl.max(s, axis=KA))",
           'm_new = tl.where(m_i == float("-inf"), tl.max(s, axis=KA), m_i)'),
    Mutant("accumulator-fp16", "kernels.paged_decode.partition", _API, "_partition",
           "acc = acc * tl.expand_dims(alpha, KA) + pv",
           "acc = (acc * tl.expand_dims(alpha, KA) + pv).to(tl.float16).to(tl.float32)"),
    Mutant("cache-through-fp16", "kernels.paged_decode.partition", _API, "_partition",
           "return raw.to(tl.float32)", "return raw.to(tl.float16).to(tl.float32)"),
    Mutant("k-scale-folded-fp16", "kernels.paged_decode.partition", _API, "_partition",
           "        k = tl.reshape(to_dot(k, FP8_MODE, DOT), [BLOCK_N, D])\n" + _K_DOT + _SLICED_SCORES +
           "    s = s * tl.expand_dims(qk_scale, KA)\n"
           "    if PER_TOKEN_SCALE:\n" + _KS_LOAD +
           "        s = s * tl.expand_dims(tl.reshape(ks, [BLOCK_N]), RA)\n",
           "        if PER_TOKEN_SCALE:\n" + textwrap.indent(_KS_LOAD, "    ") +
           "            k = tl.reshape(to_f32(k, FP8_MODE) * ks[:, :, None], [BLOCK_N, D]).to(tl.float16)\n"
           "            q = q.to(tl.float32).to(tl.float16)\n"
           "        else:\n"
           "            k = tl.reshape(to_dot(k, FP8_MODE, DOT), [BLOCK_N, D])\n" + _K_DOT +
           "    s = s * tl.expand_dims(qk_scale, KA)\n"),
    Mutant("dim-slices-overlap", "kernels.paged_decode.partition", _API, "_partition",
           "dim_lo = (head_tile % SLICES) * DV", "dim_lo = (head_tile % SLICES) * 0"),
    # A shift of 1 leaves the query as it comes, and its undoing a no-op.
    Mutant("fp16-query-unscaled", "kernels.paged_decode.partition", _API, "_partition",
           "q_shift = pow2_into(tl.max(tl.abs(q), axis=KA), 15)",
           "q_shift = pow2_into(tl.max(tl.abs(q), axis=KA) * 0.0 + 1.0, 1)"),
)
_TWINS = {m.name: m for m in _DECODE}
_GLUON_TWINS = (
    # The Gluon kernel's twins (cases.regressions.GLUON_TWINS): the same fixes taken back in its source, or
    # in the helpers it takes from partition.py (through it), or in the entry it shares.
    Mutant("gluon-wild-output-store", _GLUON, _API, "_gluon",
           "o_off = (seq.to(gl.int64) * s_oi + gl.expand_dims(",
           "o_off = (seq.to(gl.int64) * s_oi + (1 << 44) + gl.expand_dims("),
    Mutant("gluon-endless-loop", _GLUON, _API, "_gluon",
           "    part_hi = gl.minimum(part_lo + part_size, kv_hi)\n",
           "    part_hi = gl.minimum(part_lo + part_size, kv_hi)\n    spin = part_lo\n"
           "    while spin <= part_hi:\n        spin += gl.minimum(gl.load(seq_lens_ptr + seq, volatile=True), 0)\n"),
    Mutant("gluon-nan-unused-v-slots", _GLUON, _API, "_gluon",
           "v_raw = gl.where(gl.expand_dims(v_keys, 0) < kv_hi, v_raw, gl.zeros_like(v_raw))",
           "v_raw = gl.where(gl.expand_dims(v_keys, 0) < table_hi, v_raw, gl.zeros_like(v_raw))"),
    Mutant("gluon-nan-unused-v-scales", _GLUON, _API, "_gluon",
           "vs = gl.where(keys < kv_hi, vs, 0.0)", "vs = vs"),
    Mutant("gluon-empty-partitions", _GLUON, _API, "_gluon",
           "mask=gl.expand_dims(wrote, 1) & cell_ok", "mask=gl.expand_dims(in_part, 1) & cell_ok"),
    Mutant("gluon-staged-empty-partitions", _GLUON, _API, "_gluon",
           "wrote = (j < n_part) & (part_base + j * part_size < kv_hi) & (r < ROW_HI)",
           "wrote = (j < n_part) & (r < ROW_HI)"),
    replace(_TWINS["v-scale-strides"], name="gluon-v-scale-strides"),
    Mutant("gluon-reduce-batch-stride", _GLUON, _API, "_gluon",
           "fold_args = (out_ptr, m_ws_ptr, l_ws_ptr, acc_ws_ptr, ws_tile,",
           "fold_args = (out_ptr, m_ws_ptr, l_ws_ptr, acc_ws_ptr, kvh * ws_head,"),
    Mutant("gluon-window-off-by-one", _GLUON, _API, "_gluon",
           "row_lo = gl.maximum(row_hi - window, 0)", "row_lo = gl.maximum(row_hi - window + 1, 0)"),
    replace(_TWINS["fp8-subnormals-flushed"], name="gluon-fp8-subnormals-flushed", attr="_gluon", through=_GLUON),
    Mutant("gluon-running-max-from-zero", _GLUON, _API, "_gluon",
           'm_i = gl.full([M_PAD], float("-inf"), gl.float32, layout=ROWV)',
           "m_i = gl.zeros([M_PAD], gl.float32, layout=ROWV)"),
    Mutant("gluon-running-max-frozen", _GLUON, _API, "_gluon",
           "m_new = gl.maximum(m_i, gl.max(s, axis=0))",
           'm_new = gl.where(m_i == float("-inf"), gl.max(s, axis=0), m_i)'),
    Mutant("gluon-accumulator-fp16", _GLUON, _API, "_gluon",
           "            acc = mma_v2(v_op, gl.convert_layout(p_dot, OP_B), acc)\n",
           "            acc = mma_v2(v_op, gl.convert_layout(p_dot, OP_B), acc).to(gl.float16).to(gl.float32)\n"),
    replace(_TWINS["cache-through-fp16"], name="gluon-cache-through-fp16", attr="_gluon", through=_GLUON),
    Mutant("gluon-fp16-query-unscaled", _GLUON, _API, "_gluon",
           "q_shift = pow2_into(gl.max(gl.abs(q), axis=1), 15)",
           "q_shift = pow2_into(gl.max(gl.abs(q), axis=1) * 0.0 + 1.0, 1)"),
    Mutant("gluon-row-tiles-ignored", _GLUON, _API, "_gluon",
           "row0 = (head_tile % ROW_TILES) * M_PAD", "row0 = (head_tile % ROW_TILES) * 0"),
    Mutant("gluon-reduce-over-kv-heads-only", _GLUON, _API, "_gluon",
           "if last_to_arrive(count_ptr, seq * (gl.num_programs(1) // SLICES) + head_tile, n_part * SLICES):",
           "if last_to_arrive(count_ptr, seq * (gl.num_programs(1) // (SLICES * ROW_TILES)) + kvh,\n"
           "                          n_part * SLICES * ROW_TILES):"),
    Mutant("gluon-head-padding-unmasked", _GLUON, _API, "_gluon",
           "out_ok = gl.expand_dims(row_ok, 0) & gl.expand_dims(out_dims < D_REAL, 1)",
           "out_ok = gl.expand_dims(row_ok, 0) & gl.expand_dims(out_dims >= 0, 1)"),
    Mutant("gluon-dim-slices-overlap", _GLUON, _API, "_gluon",
           "dim_lo = (head_tile % SLICES) * DV", "dim_lo = (head_tile % SLICES) * 0"),
)
_KDA_MUTANTS = (
    Mutant("kda-zero-seeded-pass-c", "kernels.kda.chunk", _KDA, "_chunk",
           "S = tl.load(sin_ptr + ((unit * H + h) * K + rk[:, None]) * V + cv[None, :])",
           "S = tl.zeros([K, BV], dtype=tl.float32)"),
    Mutant("kda-gate-cumsum-crosses-sequences", "kernels.kda.meta", _KDA, "_meta",
           "table.append((n, row, start, min(chunk, stop - start)))",
           "table.append((n, row, start, min(chunk, seq_len - start)))"),
    Mutant("kda-paged-state-transposed", "kernels.kda.chunk", _KDA, "_chunk",
           "cv[None, :] * cs2 + rk[:, None])", "cv[None, :] + rk[:, None] * cs2)"),
    Mutant("kda-scan-order", "kernels.kda.chunk", _KDA, "_chunk",
           "S = tl.dot(M, S, input_precision=PRECISION) + b", "S = tl.dot(M, S + b, input_precision=PRECISION)"),
    Mutant("kda-walk-column-blocks-collapsed", "kernels.kda.chunk", _KDA, "_chunk",
           "v0 = (tl.program_id(0) % (V // BV)) * BV", "v0 = (tl.program_id(0) % 1) * BV"),
    Mutant("kda-transition-column-blocks-collapsed", "kernels.kda.chunk", _KDA, "_chunk",
           "col0 = (tl.program_id(0) % ((K + V) // BV)) * BV", "col0 = (tl.program_id(0) % 1) * BV"),
    Mutant("kda-neighbour-chunk-tile", "kernels.kda.chunk", _KDA, "_chunk",
           "wsc = cid.to(tl.int64) * H + h", "wsc = tl.maximum(cid - 1, 0).to(tl.int64) * H + h"),
    Mutant("kda-diagonal-reference-first-row", "kernels.kda.prepare", _KDA, "_prepare",
           "(i0 + (s + 1) * SB - 1) * K + ck)", "(i0 + s * SB) * K + ck)"),
    Mutant("kda-diagonal-product-unbounded-gate", "kernels.kda.plan", _KDA, "_plan",
           "return lower_bound is not None and rows", "return lower_bound is None or rows"),
    Mutant("kda-log-gate-clamped-below-zero", "kernels.kda.prepare", _KDA, "_prepare",
           "        out = g\n", "        out = tl.minimum(g, -1e-3)\n"),
    Mutant("kda-l2norm-without-epsilon", "kernels.kda.prepare", _KDA, "_prepare",
           "inv = tl.math.rsqrt(tl.sum(x * x, 1) + 1e-6)", "inv = tl.math.rsqrt(tl.sum(x * x, 1))"),
    Mutant("kda-beta-sigmoid-overflow", "kernels.kda.prepare", _KDA, "_prepare",
           "beta = 1.0 / (1.0 + tl.exp(-beta))", "beta = tl.exp(beta) / (1.0 + tl.exp(beta))"),
    Mutant("kda-v-staged-in-fp16", "kernels.kda.prepare", _KDA, "_prepare",
           "v = _rows(v_ptr, bidx, t0, h, sv_b, sv_t, sv_h, rows, valid, vb * BK + cb)",
           "v = _rows(v_ptr, bidx, t0, h, sv_b, sv_t, sv_h, rows, valid, vb * BK + cb).to(tl.float16).to(tl.float32)"),
    Mutant("kda-slow-decay-flushed", "kernels.kda.prepare", _KDA, "_prepare",
           "        out = g\n", "        out = tl.where(g > -0.0009765625, 0.0, g)\n"),
    Mutant("kda-fp16-read-as-bf16", "kernels.kda.prepare", _KDA, "_prepare",
           "    return tl.load(at, mask=valid[:, None], other=0.0).to(tl.float32)",
           "    return tl.load(at, mask=valid[:, None], other=0.0).to(tl.bfloat16, bitcast=True).to(tl.float32)"),
)
MUTANTS = _DECODE + _GLUON_TWINS + _KDA_MUTANTS


def by_name(name: str) -> Mutant:
    for m in MUTANTS:
        if m.name == name:
            return m
    raise ValueError(f"mutant: expected one of {[m.name for m in MUTANTS]}, got {name!r}")


def mutated_source(mutant: Mutant) -> str:
    """The source of the mutant's module with its snippet replaced; an error when the snippet does not
    occur exactly once (the code it takes back has moved: the mutant must follow it)."""
    original = importlib.import_module(mutant.module)
    source = Path(original.__file__).read_text()
    count = source.count(mutant.old)
    if count != 1:
        raise RuntimeError(f"mutant {mutant.name}: expected the snippet exactly once in {mutant.module}, "
                           f"found it {count} times: {mutant.old!r}")
    return source.replace(mutant.old, mutant.new)


def _loaded(name: str, path) -> object:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _mutated_module(mutant: Mutant, folder: Path):
    mutated = mutated_source(mutant)
    path = folder / f"{mutant.module.rsplit('.', 1)[-1]}_{mutant.name.replace('-', '_')}.py"
    path.write_text(mutated)
    module = _loaded(f"_quantfloor_mutant_{mutant.name.replace('-', '_')}", path)
    if mutant.through is None:
        return module
    # the module that imports the mutated one, loaded again while the mutated one stands in its name
    real = sys.modules[mutant.module]
    sys.modules[mutant.module] = module
    try:
        return _loaded(f"_quantfloor_mutant_{mutant.name.replace('-', '_')}_through",
                       importlib.import_module(mutant.through).__file__)
    finally:
        sys.modules[mutant.module] = real
        sys.modules.pop(module.__name__, None)


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


def kill_matrix(tier: str, *, names=None, workers: int = 1, timeout_base: float | None = None,
                stream=None) -> list[KillRow]:
    """Every mutant of the tier named in `names` (None: every one; GPU-only regressions need the gpu
    tier) against its case: judged with the real code and with the mutant, each in an isolated
    worker (verify.parallel), so a mutant that crashes its process or never returns fails its case
    with that reason and the matrix goes on.
    A mutant whose snippet is not found once is refused before any worker starts: planted in a
    worker, it would fail its case for that alone and read as killed."""
    from verify import parallel

    chosen = [(m, regression_of(m)) for m in MUTANTS if names is None or m.name in names]
    chosen = [(m, reg) for m, reg in chosen if not (reg.gpu and tier == "cpu")]
    for m, _ in chosen:
        mutated_source(m)
    tasks = [parallel.Task(reg.id) for _, reg in chosen] + [parallel.Task(reg.id, m.name) for m, reg in chosen]
    verdicts = parallel.judge(tasks, workers, stream=stream or sys.stderr, timeout_base=timeout_base)
    n = len(chosen)
    return [KillRow(m.name, reg.id, verdicts[i], verdicts[n + i]) for i, (m, reg) in enumerate(chosen)]


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
