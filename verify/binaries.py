"""Compile-only: every kernel specialization a tier's cases launch, compiled for named targets.

No kernel runs and no GPU is needed. For each target (verify.targets) and
case, the case's calls run on meta inputs (cases.*.build_meta) within
`kernels.arch.planned(target, its CUs)`, so the launches they record are the
ones the same code decides on that arch: launch configs from its tables, its
fp8 handling (FP8_MODE: native where the target converts the format,
e4m3fnuz on gfx942 and e4m3fn elsewhere, else decoded from the bits), its
split plans for its CU count (verify.adapters.planned_launches).

A specialization is what Triton compiles one binary for: the kernel, its
constexprs, warps, stages and other options, and what it specializes each
argument on (dtype; alignment, equality to 1 or divisibility by 16; on AMD
whether a tensor lies within 2 GiB). Triton's own binder computes that key
for the target's backend, so the set is exactly the binaries the tier would
load; each is compiled once per run (and found again in Triton's cache on a
later run).

Each binary yields its facts (`Binary`): registers, spills, scratch, LDS or
shared bytes, the occupancy they allow (verify.targets), and the SHA-256 of
the binary (hsaco or cubin). Binaries are compiled without line information,
so the hash names the code alone: moving a kernel's source lines, or building
from another checkout, leaves it unchanged, and two commits' JSON reports
show which binaries a change touches and which it leaves bit-identical.

A spill is any VGPR spill or any instruction that touches scratch on AMD
(a `scratch_*` load or store), and any local memory or stack on NVIDIA. SGPR
spills go to VGPR lanes, not to memory, and are reported beside them; so is
the private segment a binary reserves: on gfx1250 LLVM at times reserves 36
to 100 bytes a lane, with SGPRs spilled to VGPR lanes, that no instruction
touches (`scratch` bytes with `scratch_used` false). A spill the launch tables expect (a row that says
why it spills, verify.adapters.known_spill) is known; any other is new. A
binary whose LDS (shared memory) passes the target's limit cannot launch: it
fails, like one that does not compile.

Gluon kernels go the same way (their JIT's source class), so a Gluon kernel
that an entry launches on some arch is compiled for that target by the same
command. This relies on Triton's binder and argument packing
(`triton.runtime.jit.create_function_from_signature`, `JITFunction._pack_args`),
which the JIT itself uses before it compiles (Triton 3.9).
"""

import hashlib
import os
import re
import subprocess
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path

from cases import decode as decode_cases
from cases import kda as kda_cases
from verify import adapters, targets

# Argument packing of the JIT in Triton 3.9: these keys join the launch's options before binding.
_JIT_KWARGS = ("instrumentation_mode", "fpsan_homomorphic_casts")


@dataclass
class Binary:
    """One specialization compiled for one target, and what its binary says.

    key: the SHA-256 of Triton's specialization of the launch (argument kinds and specs, constexprs,
    options; `args` and `constexprs` spell it out);
    inputs: the hash of everything the compiler is given (Triton's cache key: kernel source and
    the functions it calls, key, target, compiler version): equal inputs give equal binaries;
    registers: VGPRs (AGPRs counted in) on AMD, registers per thread on NVIDIA; agprs, sgprs: AMD;
    spills: VGPR spills (AMD) or local-memory bytes (NVIDIA); sgpr_spills: SGPRs spilled to VGPR
    lanes (AMD); scratch: private-segment (AMD) or stack (NVIDIA) bytes per lane; scratch_used: an
    instruction touches scratch (AMD: a scratch_* load or store; NVIDIA: any stack); lds: LDS or
    shared bytes per workgroup; occupancy: waves per SIMD (AMD) or warps per SM (NVIDIA); error:
    the compiler's message when it failed (the facts are then 0), or why it cannot launch; known:
    why the launch tables expect it to spill, when it spills and they do; reused: its facts come
    from an earlier report's binary of equal compiler inputs (`compile_all`), nothing compiled."""

    target: str
    kernel: str
    key: str
    constexprs: dict
    options: dict
    args: list
    cases: int
    example: str
    inputs: str = ""
    sha256: str = ""
    registers: int = 0
    agprs: int = 0
    sgprs: int = 0
    spills: int = 0
    sgpr_spills: int = 0
    scratch: int = 0
    scratch_used: bool = False
    lds: int = 0
    occupancy: int = 0
    seconds: float = 0.0
    error: str = ""
    known: str = ""
    reused: bool = False

    @property
    def spilled(self) -> bool:
        return not self.error and (self.spills > 0 or self.scratch_used)

    @property
    def new_spill(self) -> bool:
        """A spill the launch tables do not expect (`known` holds their reason where they do)."""
        return self.spilled and not self.known


@dataclass
class _Spec:
    """A specialization found while planning: its key, the case that first launched it (and which
    of that case's launches it is), and how many cases launch it."""

    target: str
    kernel: str
    key: str
    inputs: str
    constexprs: dict
    options: dict
    args: list
    example: str
    index: int
    cases: set = field(default_factory=set)


def meta_inputs(case):
    """The meta inputs of a decode or KDA case."""
    if isinstance(case, kda_cases.KdaCase):
        return kda_cases.build_meta(case)
    return decode_cases.build_meta(case)


def case_of(case_id: str):
    """A decode or KDA case rebuilt from its id."""
    if case_id.startswith("kda-"):
        return kda_cases.KdaCase.from_id(case_id)
    return decode_cases.DecodeCase.from_id(case_id)


_BACKENDS: dict = {}
_BINDERS: dict = {}


def _backend(target: targets.Target):
    if target.name not in _BACKENDS:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import make_backend
        _BACKENDS[target.name] = make_backend(GPUTarget(target.backend, target.arch, target.warp_size))
    return _BACKENDS[target.name]


def _bind(launch, target: targets.Target):
    """(key, kwargs, bound args, specialization, options) of a launch on `target`, as the JIT binds it."""
    from triton import knobs
    from triton.runtime.jit import create_function_from_signature

    fn = launch.fn
    if not hasattr(fn, "params"):
        raise RuntimeError(f"{getattr(fn, '__name__', fn)}: kernels are interpreted in this process "
                           "(TRITON_INTERPRET=1); compiling needs them as JIT functions")
    backend = _backend(target)
    binder = _BINDERS.get((fn, target.name))
    if binder is None:
        binder = _BINDERS[(fn, target.name)] = create_function_from_signature(fn.signature, fn.params, backend)
    kwargs = {**launch.constexprs, **launch.options, "debug": bool(fn.debug or knobs.runtime.debug)}
    for name in _JIT_KWARGS:
        if hasattr(knobs.compilation, name):
            kwargs[name] = getattr(knobs.compilation, name)
    bound, specialization, options = binder(*launch.args, **kwargs)
    key = hashlib.sha256((str(specialization) + str(options)).encode()).hexdigest()
    return key, kwargs, bound, specialization, options


def _printable(value):
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return str(value)


def _arg_specs(fn, specialization) -> list:
    """'name:type[:spec]' of each runtime argument (constexprs left out)."""
    out = []
    for name, (kind, spec) in zip(fn.arg_names, specialization):
        if kind == "constexpr":
            continue
        out.append(f"{name}:{kind}" + (f":{spec}" if spec else ""))
    return out


def _source(launch, target: targets.Target, kwargs, bound, specialization, options):
    """(ASTSource, compile options) of a bound launch, as the JIT hands them to the compiler; a Gluon
    kernel gets Gluon's source class, as its JIT does."""
    from triton.compiler import ASTSource

    options, signature, constexprs, attrs = launch.fn._pack_args(_backend(target), kwargs, bound, specialization,
                                                                 options)
    source = ASTSource
    if launch.fn.is_gluon():
        from triton.experimental.gluon._runtime import GluonASTSource as source
    return source(launch.fn, signature, constexprs, attrs), options


def _inputs_hash(source, target: targets.Target) -> str:
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.compiler import get_cache_key

    src, options = source
    key = get_cache_key(src, _backend(target), options, get_cache_invalidating_env_vars())
    return hashlib.sha256(key.encode()).hexdigest()


def plan(cases, target_list, *, on_progress=None) -> list[_Spec]:
    """Every specialization the cases launch on each target, in the order first launched."""
    _quiet_compiler()
    specs: dict = {}
    inputs_of: dict = {}
    for target in target_list:
        for n, case in enumerate(cases):
            inputs = inputs_of.get(case.id)
            if inputs is None:
                inputs = inputs_of[case.id] = meta_inputs(case)
            for index, launch in enumerate(adapters.planned_launches(inputs, arch=target.name, cus=target.cus)):
                key, kwargs, bound, specialization, options = _bind(launch, target)
                spec = specs.get((target.name, launch.fn, key))
                if spec is None:
                    source = _source(launch, target, kwargs, bound, specialization, options)
                    spec = specs[(target.name, launch.fn, key)] = _Spec(
                        target.name, launch.fn.__name__, key, _inputs_hash(source, target),
                        {k: _printable(v) for k, v in launch.constexprs.items()},
                        {k: _printable(v) for k, v in launch.options.items()},
                        _arg_specs(launch.fn, specialization), case.id, index)
                spec.cases.add(case.id)
            if on_progress is not None:
                on_progress(target.name, n + 1, len(cases))
    return list(specs.values())


_AMD_FIELDS = {"vgpr_count": r"\.vgpr_count:\s+(\d+)", "agpr_count": r"\.agpr_count:\s+(\d+)",
               "sgpr_count": r"\.sgpr_count:\s+(\d+)", "vgpr_spill_count": r"\.vgpr_spill_count:\s+(\d+)",
               "sgpr_spill_count": r"\.sgpr_spill_count:\s+(\d+)",
               "private_segment_fixed_size": r"\.private_segment_fixed_size:\s+(\d+)",
               "group_segment_fixed_size": r"\.group_segment_fixed_size:\s+(\d+)",
               "occupancy": r"; Occupancy:\s+(\d+)", "scratch_ops": r"(?m)^\s*scratch_(?:load|store)\w*"}


def amd_facts(amdgcn: str) -> dict:
    """The AMDGPU metadata fields of a kernel's amdgcn text (0 where one is absent)."""
    facts = {}
    for name, pattern in _AMD_FIELDS.items():
        if name == "scratch_ops":
            facts[name] = len(re.findall(pattern, amdgcn))
            continue
        found = re.search(pattern, amdgcn)
        facts[name] = int(found.group(1)) if found else 0
    return facts


def _cuobjdump() -> str:
    import triton
    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump")


def nvidia_facts(cubin: bytes) -> dict:
    """REG, STACK, SHARED (static) and LOCAL of a cubin, from `cuobjdump --dump-resource-usage`."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
        fh.write(cubin)
        fh.flush()
        text = subprocess.run([_cuobjdump(), "--dump-resource-usage", fh.name], capture_output=True, text=True,
                              check=True).stdout
    line = next((ln for ln in text.splitlines() if "REG:" in ln), "")
    return {name: int(value) for name, value in re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", line)}


def _facts(kernel, target: targets.Target, warps: int) -> dict:
    shared = int(kernel.metadata.shared)
    if target.amd:
        f = amd_facts(kernel.asm["amdgcn"])
        lds = max(shared, f["group_segment_fixed_size"])
        return dict(sha256=hashlib.sha256(kernel.asm["hsaco"]).hexdigest(), registers=f["vgpr_count"],
                    agprs=f["agpr_count"], sgprs=f["sgpr_count"], spills=f["vgpr_spill_count"],
                    sgpr_spills=f["sgpr_spill_count"], scratch=f["private_segment_fixed_size"],
                    scratch_used=f["scratch_ops"] > 0, lds=lds,
                    occupancy=targets.amd_waves(target, vgprs=f["vgpr_count"], lds=lds, warps=warps,
                                                compiler=f["occupancy"]))
    f = nvidia_facts(kernel.asm["cubin"])
    smem = shared + f.get("SHARED", 0)
    return dict(sha256=hashlib.sha256(kernel.asm["cubin"]).hexdigest(), registers=f.get("REG", 0),
                spills=f.get("LOCAL", 0), scratch=f.get("STACK", 0), scratch_used=f.get("STACK", 0) > 0, lds=smem,
                occupancy=targets.nvidia_warps(regs=f.get("REG", 0), shared=smem, warps=warps))


def compile_spec(target_name: str, case_id: str, index: int, key: str) -> dict:
    """Compile launch `index` of case `case_id` for a target, which must have specialization `key`;
    its facts, or {"error": message}."""
    import triton

    target = targets.TARGETS[target_name]
    launch = adapters.planned_launches(meta_inputs(case_of(case_id)), arch=target.name, cus=target.cus)[index]
    if _bind(launch, target)[0] != key:  # a worker whose tables differ from the planning process's
        return {"error": f"{case_id} launch {index} planned another specialization in this process"}
    return compile_launch(launch, target)


def compiled(launch, target: targets.Target):
    """(the compiled kernel of one recorded launch for a target, its options), as the JIT builds
    them: the kernel's `asm` holds every stage's text (ttgir, llir, ptx or amdgcn) and the binary."""
    import triton

    _quiet_compiler()
    _, kwargs, bound, specialization, options = _bind(launch, target)
    src, options = _source(launch, target, kwargs, bound, specialization, options)
    return triton.compile(src, target=_backend(target).target, options=options.__dict__), options


def compile_launch(launch, target: targets.Target) -> dict:
    """Compile one recorded launch (a Triton or Gluon kernel) for a target; its facts, or
    {"error": message}, and the seconds it took."""
    started = time.perf_counter()
    try:
        kernel, options = compiled(launch, target)
        facts = _facts(kernel, target, options.num_warps)
        if targets.unlaunchable(target, facts["lds"]):
            facts["error"] = targets.unlaunchable(target, facts["lds"])
    except Exception as exc:  # the compiler's own message is the report
        facts = {"error": compiler_message(exc)}
    facts["seconds"] = time.perf_counter() - started
    return facts


def compiler_message(exc: BaseException) -> str:
    """What a failed compile says: the innermost cause ('ValueError: arange's range must be a power of
    2'), then the kernel source where the compiler met it."""
    chain = [exc]
    while chain[-1].__cause__ is not None and len(chain) < 16:
        chain.append(chain[-1].__cause__)
    root = chain[-1]
    text = f"{type(root).__name__}: {str(root).strip()}"
    where = next((str(e).strip() for e in reversed(chain) if type(e).__name__ == "CompilationError"), "")
    return f"{text}\n{where}" if where and where != str(root).strip() else text


def _quiet_compiler() -> None:
    """Settings every compiling process shares: no line information in binaries."""
    os.environ["TRITON_DISABLE_LINE_INFO"] = "1"


def _worker_init() -> None:
    _quiet_compiler()


def uncompiled(specs: list[_Spec]) -> list[Binary]:
    """The specializations as Binaries with their compiler inputs alone (nothing compiled)."""
    return [Binary(s.target, s.kernel, s.key, s.constexprs, s.options, s.args, len(s.cases), s.example, s.inputs)
            for s in specs]


# What a compiled binary's facts are (Binary): the fields an earlier report lends a specialization of equal inputs.
_FACTS = ("sha256", "registers", "agprs", "sgprs", "spills", "sgpr_spills", "scratch", "scratch_used", "lds",
          "occupancy", "error")


def _lenders(earlier) -> dict:
    """The binaries of an earlier report that can lend their facts, by compiler inputs."""
    return {b.inputs: b for b in earlier if b.inputs and (b.sha256 or b.error)}


def lendable(specs: list[_Spec], earlier) -> int:
    """How many of `specs` have the compiler inputs of a binary of `earlier` (compile_all takes
    their facts from it and compiles only the rest)."""
    known = _lenders(earlier)
    return sum(1 for s in specs if s.inputs in known)


def compile_all(specs: list[_Spec], *, workers: int = 1, on_done=None, earlier=()) -> list[Binary]:
    """Compile every specialization (in `workers` processes when more than one); Binaries in order.

    A specialization whose compiler inputs equal those of a compiled binary of `earlier` (the
    Binaries of a previous report) takes that binary's facts and is not compiled: equal inputs
    give equal binaries (the inputs hash holds the kernel's source and what it calls, the
    specialization, the options, the target and the compiler). Whether a spill is known is
    decided afresh from the launch tables either way."""
    _quiet_compiler()
    known = _lenders(earlier)
    todo = [i for i, s in enumerate(specs) if s.inputs not in known]
    tasks = [(specs[i].target, specs[i].example, specs[i].index, specs[i].key) for i in todo]
    results: list = [None] * len(tasks)
    if workers <= 1:
        for i, task in enumerate(tasks):
            results[i] = compile_spec(*task)
            if on_done is not None:
                on_done(i + 1, len(tasks))
    else:
        with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"),
                                 initializer=_worker_init) as pool:
            futures = [pool.submit(compile_spec, *task) for task in tasks]
            for i, future in enumerate(futures):
                results[i] = future.result()
                if on_done is not None:
                    on_done(i + 1, len(tasks))
    compiled = dict(zip(todo, results))
    binaries = uncompiled(specs)
    for i, binary in enumerate(binaries):
        facts = compiled.get(i)
        if facts is None:
            facts = {name: getattr(known[binary.inputs], name) for name in _FACTS}
            facts["reused"] = True
        for name, value in facts.items():
            setattr(binary, name, value)
        if binary.spilled:
            binary.known = adapters.known_spill(binary.target, binary.kernel, binary.constexprs, binary.options)
    return binaries


def to_json(binary: Binary) -> dict:
    return asdict(binary)


def from_json(row: dict) -> Binary:
    return Binary(**row)


def read_report(path) -> tuple[dict, list[Binary]]:
    """The meta (versions, command) and the binaries of a `quantfloor compile --json` report."""
    import json
    with open(path) as fh:
        data = json.load(fh)
    if not isinstance(data, dict) or "binaries" not in data:
        raise ValueError(f"{path}: expected a report written by quantfloor compile --json")
    return data.get("meta", {}), [from_json(row) for row in data["binaries"]]


def _short(value) -> str:
    if isinstance(value, bool):
        return str(int(value))
    return str(value).replace("triton.language.", "").replace("fp32", "f32")


def config(binary: Binary) -> str:
    """The constexprs and options of a specialization, compactly."""
    return " ".join(f"{k}={_short(v)}" for k, v in {**binary.constexprs, **binary.options}.items())


def table(rows: list[Binary]) -> str:
    """One line per binary: target, kernel, registers, spills, scratch, LDS, occupancy, cases, hash, config."""
    head = (f"{'target':<8} {'kernel':<24} {'regs':>5} {'agpr':>4} {'sgpr':>4} {'spill':>5} {'sspill':>6} "
            f"{'scratch':>7} {'used':>4} {'lds':>6} {'occ':>4} {'cases':>6} {'sha256':<12}  config")
    lines = [head]
    for b in rows:
        if b.error and not b.registers:
            lines.append(f"{b.target:<8} {b.kernel:<24} {'FAILED':>5} {'':>4} {'':>4} {'':>5} {'':>6} {'':>7} "
                         f"{'':>4} {'':>6} {'':>4} {b.cases:>6} {'':<12}  {config(b)}")
            continue
        lines.append(f"{b.target:<8} {b.kernel:<24} {b.registers:>5} {b.agprs:>4} {b.sgprs:>4} {b.spills:>5} "
                     f"{b.sgpr_spills:>6} {b.scratch:>7} {'yes' if b.scratch_used else 'no':>4} {b.lds:>6} "
                     f"{b.occupancy:>4} {b.cases:>6} "
                     f"{b.sha256[:12]:<12}  {config(b)}")
    lines.append("occ: waves per SIMD on AMD, warps per SM on NVIDIA (verify.targets); spill: VGPR spills (AMD) "
                 "or local bytes (NVIDIA); sspill: SGPRs spilled to VGPR lanes; scratch: bytes per lane reserved "
                 "(stack frame on NVIDIA), used: an instruction touches them; lds: LDS or shared bytes")
    return "\n".join(lines)


def overview(rows: list[Binary]) -> str:
    """Per target and kernel: specializations, the most registers and scratch, the fewest waves (warps),
    and how many spilled or failed."""
    groups: dict = {}
    for b in rows:
        groups.setdefault((b.target, b.kernel), []).append(b)
    lines = [f"{'target':<8} {'kernel':<24} {'specs':>5} {'max regs':>8} {'max scratch':>11} {'min occ':>7} "
             f"{'spilled':>7} {'failed':>6}"]
    for (target, kernel), group in groups.items():
        ok = [b for b in group if not b.error]
        lines.append(f"{target:<8} {kernel:<24} {len(group):>5} {max((b.registers for b in ok), default=0):>8} "
                     f"{max((b.scratch for b in ok), default=0):>11} {min((b.occupancy for b in ok), default=0):>7} "
                     f"{sum(b.spilled for b in group):>7} {sum(bool(b.error) for b in group):>6}")
    return "\n".join(lines)


def known_spills(rows: list[Binary]) -> str:
    """How many spills the launch tables expect, and the reasons they give."""
    reasons: dict = {}
    for b in rows:
        if b.spilled and b.known:
            reasons.setdefault((b.target, b.kernel, b.known), []).append(b)
    lines = [f"known spills: {sum(len(v) for v in reasons.values())}, new spills: "
             f"{sum(b.new_spill for b in rows)}"]
    for (target, kernel, why), group in reasons.items():
        lines.append(f"  {len(group)} {target} {kernel}: {why}")
    return "\n".join(lines)


def summary(rows: list[Binary], n_targets: int) -> str:
    """The last line of `quantfloor compile` (kernels whose facts an earlier report lent are counted
    with the compiled ones, and named)."""
    failed = sum(1 for b in rows if b.error)
    spilled = sum(1 for b in rows if b.spilled)
    lent = sum(1 for b in rows if b.reused)
    reused = f" ({lent} of them unchanged since the earlier report, not compiled again)" if lent else ""
    return f"compiled {len(rows)} kernels for {n_targets} targets{reused}: {failed} failures, {spilled} with spills"


def _same(a: Binary, b: Binary) -> bool:
    """Bit-identical binaries; where either report compiled nothing, identical compiler inputs."""
    if a.sha256 and b.sha256:
        return a.sha256 == b.sha256
    return bool(a.inputs) and a.inputs == b.inputs


def _pairs(before: list[Binary], after: list[Binary]) -> tuple[list, list, list]:
    """(pairs, only before, only after): binaries paired by specialization key, then the rest by the
    case that first launched them (a change that adds a constexpr re-keys every specialization)."""
    old = {(b.target, b.kernel, b.key): b for b in before}
    new = {(b.target, b.kernel, b.key): b for b in after}
    pairs = [(old[k], new[k]) for k in old if k in new]
    gone = [old[k] for k in old if k not in new]
    added = [new[k] for k in new if k not in old]
    by_case = {}
    for b in added:
        by_case.setdefault((b.target, b.kernel, b.example), []).append(b)
    rest = []
    for b in gone:
        match = by_case.get((b.target, b.kernel, b.example), [])
        if len(match) == 1:
            pairs.append((b, match.pop()))
        else:
            rest.append(b)
    return pairs, rest, [b for group in by_case.values() for b in group]


def diff(before: list[Binary], after: list[Binary]) -> str:
    """Per target: binaries identical in both reports (by hash; by compiler inputs where a report holds
    no hashes), changed (and how many of those had the same compiler inputs: LLVM's AMD backend now and
    then orders an expression differently for the same input), and only in one; then the changed ones.
    Binaries are paired by specialization key, or else by the case that first launched them ('re-keyed')."""
    pairs, gone, added = _pairs(before, after)
    lines = [f"{'target':<8} {'identical':>9} {'changed':>8} {'same inputs':>11} {'re-keyed':>8} "
             f"{'only before':>12} {'only after':>11}"]
    changed = [(a, b) for a, b in pairs if not _same(a, b)]
    for target in dict.fromkeys(b.target for b in (*before, *after)):
        mine = [(a, b) for a, b in pairs if a.target == target]
        same = sum(_same(a, b) for a, b in mine)
        unsteady = sum(a.inputs == b.inputs for a, b in changed if a.target == target)
        rekeyed = sum(a.key != b.key for a, b in mine)
        lines.append(f"{target:<8} {same:>9} {len(mine) - same:>8} {unsteady:>11} {rekeyed:>8} "
                     f"{sum(b.target == target for b in gone):>12} {sum(b.target == target for b in added):>11}")
    for a, b in changed:
        note = " [same compiler inputs: the compiler gave another binary]" if a.inputs == b.inputs else ""
        lines.append(f"changed {b.target} {b.kernel} ({b.example}){note}: {config(b)}")
    return "\n".join(lines)
