"""quantfloor compile: meta inputs and planned launches, compiled binaries, spills, failures, bindiff."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton

from cases import decode as decode_cases
from cases import kda as kda_cases
from cases.decode_matrix import decode_matrix
from kernels import arch, launch
from verify import adapters, binaries, cli, targets
from verify.device import seed_of

ROOT = Path(__file__).resolve().parent.parent
CASE = "decode-e4m3fn-tensor-b16-hq32-hkv8-d64-w0-L0_1-q1-shuffled-cu256-onepass"
SUMMARY = "compiled {n} kernels for {t} targets: {f} failures, {s} with spills"


def _tensors(value, prefix="") -> dict:
    """{path: tensor} of the tensors in a dataclass's fields or a dict, nested one level."""
    items = value.items() if isinstance(value, dict) else vars(value).items()
    out = {}
    for name, item in items:
        if isinstance(item, torch.Tensor):
            out[prefix + name] = item
        elif isinstance(item, dict):
            out.update(_tensors(item, prefix + name + "."))
    return out


def _layout(t: torch.Tensor) -> tuple:
    return t.dtype, tuple(t.shape), t.stride(), t.storage_offset()


def _decode_sample() -> list:
    """CPU-tier decode cases covering every cache, scales, layout, distribution, Q and path."""
    chosen, seen = [], set()
    for case in decode_matrix("cpu"):
        facets = {("cache", case.cache), ("scales", case.scales), ("layout", case.layout), ("dist", case.dist),
                  ("q", case.q), ("path", case.path), ("d", case.d)}
        if not facets <= seen and sum(case.lens) < 2000:
            chosen.append(case)
            seen |= facets
    return chosen


def _kda_sample() -> list:
    """Small KDA cases with every state kind, varlen, fused bands and both dtypes."""
    return [c for c in kda_cases.kda_cases("cpu") if sum(c.lens or (c.b * c.t,)) <= 200][:15] + [
        kda_cases.KdaCase(h=1, dim=64, t=130, dtype="f16", gate="lower_bound", state="dense")]


@pytest.mark.parametrize("case", _decode_sample() + _kda_sample(), ids=lambda c: c.id)
def test_meta_inputs_have_the_built_layouts(case):
    built = (kda_cases.build(case, "cpu", seed_of(case.id)) if isinstance(case, kda_cases.KdaCase)
             else decode_cases.build(case, "cpu", seed_of(case.id)))
    meta = binaries.meta_inputs(case)
    real, planned = _tensors(built), _tensors(meta)
    assert real.keys() == planned.keys()
    for name, t in real.items():
        assert _layout(planned[name]) == _layout(t), name
        # cu_seqlens is read on the host only, so its meta stand-in keeps its values on the CPU
        assert planned[name].device.type == ("cpu" if name == "kwargs.cu_seqlens" else "meta"), name
    if "kwargs.cu_seqlens" in real:
        assert torch.equal(planned["kwargs.cu_seqlens"], real["kwargs.cu_seqlens"])


def _launch_facts(launches) -> list:
    return [(l.fn, l.grid, l.constexprs, l.options, tuple(map(launch._spec, l.args))) for l in launches]


@pytest.mark.parametrize("case", _decode_sample()[:6] + _kda_sample()[:6], ids=lambda c: c.id)
def test_planned_launches_are_the_launches_a_real_call_makes(case):
    """The meta plan for the interpreter's arch equals what the same calls decide on real inputs."""
    real_inputs = (kda_cases.build(case, "cpu", seed_of(case.id)) if isinstance(case, kda_cases.KdaCase)
                   else decode_cases.build(case, "cpu", seed_of(case.id)))
    with launch.recorded() as real:
        if isinstance(case, kda_cases.KdaCase):
            adapters.kda_call(real_inputs, dict(real_inputs.kwargs), {})
        else:
            adapters.decode(real_inputs)
    planned = adapters.planned_launches(binaries.meta_inputs(case), arch="cpu", cus=1)
    assert real and _launch_facts(planned) == _launch_facts(real)


def test_bit_decoded_fp8_modes_are_those_from_e4m3fn_bits_up():
    # the kernels test FP8_MODE >= FP8_BITS_E4M3FN for "read the cache as its codes"
    modes = (arch.FP8_NONE, arch.FP8_NATIVE, arch.FP8_BITS_E4M3FN, arch.FP8_BITS_E4M3FNUZ, arch.FP8_PTX_E4M3FNUZ)
    assert len(set(modes)) == len(modes)
    assert set(arch.FP8_BITS) == {m for m in modes if m >= arch.FP8_BITS_E4M3FN}


def test_meta_tensors_need_a_planned_arch():
    with pytest.raises(ValueError, match="device: a meta tensor"):
        arch.arch_name(torch.device("meta"))
    with arch.planned("gfx950", 256):
        assert arch.arch_name(torch.device("meta")) == "gfx950" and arch.cu_count(torch.device("meta")) == 256
        assert arch.fp8_mode(torch.float8_e4m3fn, torch.device("meta")) == arch.FP8_NATIVE
        assert arch.fp8_mode(torch.float8_e4m3fnuz, torch.device("meta")) == arch.FP8_BITS_E4M3FNUZ
    with arch.planned("gfx942", 304):
        assert arch.fp8_mode(torch.float8_e4m3fnuz, torch.device("meta")) == arch.FP8_NATIVE
    with pytest.raises(ValueError, match="cus"):
        with arch.planned("gfx942", 0):
            pass


def test_occupancy_formulas():
    gfx942, gfx1250 = targets.TARGETS["gfx942"], targets.TARGETS["gfx1250"]
    assert targets.amd_waves(gfx942, vgprs=259, lds=0, warps=4, compiler=8) == 1  # 264 of 512
    assert targets.amd_waves(gfx942, vgprs=256, lds=16384, warps=4, compiler=8) == 2
    assert targets.amd_waves(gfx942, vgprs=128, lds=32768, warps=4, compiler=8) == 2  # LDS: 2 groups a CU
    assert targets.amd_waves(gfx1250, vgprs=330, lds=0, warps=4, compiler=16) == 3  # 336 of 1024
    assert targets.nvidia_warps(regs=216, shared=24576, warps=4) == 8  # 6912 regs a warp: 9 warps
    assert targets.nvidia_warps(regs=128, shared=100 * 1024, warps=4) == 8  # shared: 2 blocks
    assert targets.nvidia_warps(regs=32, shared=228 * 1024, warps=4) == 0
    with pytest.raises(ValueError, match="--target"):
        targets.parse("gfx942,sm80")


def test_reserved_scratch_that_no_instruction_touches_is_no_spill():
    text = ("\ts_load_b64 s[0:1], s[0:1], 0x0\n    .private_segment_fixed_size: 36\n    .vgpr_count:     418\n"
            "    .vgpr_spill_count: 0\n; Occupancy: 2\n")
    facts = binaries.amd_facts(text)
    assert facts["private_segment_fixed_size"] == 36 and facts["scratch_ops"] == 0 and facts["occupancy"] == 2
    assert binaries.amd_facts(text + "\tscratch_store_b32 off, v1, s33 offset:4\n")["scratch_ops"] == 1
    reserved = binaries.Binary("gfx1250", "k", "key", {}, {}, [], 1, "case", scratch=36, scratch_used=False)
    assert not reserved.spilled
    assert binaries.Binary("gfx942", "k", "key", {}, {}, [], 1, "case", scratch=20, scratch_used=True).new_spill


def _compile(argv, tmp_path, *, plant: str = "") -> tuple[int, str, dict | None]:
    """`quantfloor compile ARGV --json` in a process where kernels are compiled (not interpreted),
    after the Python statements `plant`; (exit code, stderr then stdout, the JSON report)."""
    report = tmp_path / "binaries.json"
    code = (f"import sys\nfrom verify import cli\n{plant}\n"
            f"sys.exit(cli.main({[*argv, '--json', str(report)]!r}))\n")
    env = dict(os.environ, TRITON_INTERPRET="0")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    data = json.loads(report.read_text()) if report.exists() else None
    return done.returncode, done.stderr + done.stdout, data


def test_compile_reports_registers_hashes_and_a_summary(tmp_path):
    rc, out, data = _compile(["compile", "--tier", "cpu", "-k", CASE, "--target", "gfx942,sm90"], tmp_path)
    assert out.strip().splitlines()[-1] == SUMMARY.format(n=2, t=2, f=0, s=0), out
    assert rc == 0
    rows = {row["target"]: row for row in data["binaries"]}
    assert rows.keys() == {"gfx942", "sm90"} and data["meta"]["targets"] == ["gfx942", "sm90"]
    for row in rows.values():
        assert row["kernel"] == "decode_partition_kernel" and row["example"] == CASE and row["cases"] == 1
        assert len(row["sha256"]) == 64 and len(row["inputs"]) == 64 and not row["error"]
        assert row["registers"] > 0 and row["spills"] == 0 and row["scratch"] == 0 and row["occupancy"] > 0
        assert row["constexprs"]["D"] == 64 and row["options"]["num_warps"] == 4
    assert rows["gfx942"]["sgprs"] > 0 and rows["gfx942"]["constexprs"]["FP8_MODE"] == arch.FP8_BITS_E4M3FN
    assert rows["sm90"]["constexprs"]["FP8_MODE"] == arch.FP8_NATIVE
    assert rows["gfx942"]["sha256"] != rows["sm90"]["sha256"]


# A forced split of 128 query rows (MTP 8, GQA 16) at D 64, e4m3fn decoded from its bits (gfx942 converts
# e4m3fnuz only) with per-token scales: the gfx942 row's 64-key step took 257 VGPRs there, one wave a SIMD.
WIDE_ROWS_SPLIT = "decode-e4m3fn-token-b16-hq32-hkv2-d64-w0-L90_40-q8-shuffled-cu64-rowtiles-split"


def test_gfx942_keeps_two_waves_on_a_wide_forced_split(tmp_path):
    rc, out, data = _compile(["compile", "--tier", "gpu", "-k", WIDE_ROWS_SPLIT, "--target", "gfx942"], tmp_path)
    assert rc == 0, out
    (row,) = data["binaries"]
    assert row["constexprs"]["SPLIT"] and row["constexprs"]["G"] * row["constexprs"]["Q"] == 128
    assert row["spills"] == 0 and row["occupancy"] >= 2, (row["registers"], row["occupancy"])


def test_sm90_kda_stage_and_solve_fit_three_programs_an_sm(tmp_path):
    # K 128: the launch table caps both at 168 registers (255 and 183 uncapped: two programs an SM)
    rc, out, data = _compile(["compile", "--tier", "cpu", "-k", "kda-b1-t65-h1-k128", "--target", "sm90"], tmp_path)
    assert rc == 0, out
    rows = {row["kernel"]: row for row in data["binaries"] if row["kernel"] in ("kda_stage_kernel", "kda_solve_kernel")}
    assert rows.keys() == {"kda_stage_kernel", "kda_solve_kernel"}
    for row in rows.values():
        assert row["constexprs"]["K"] == 128 and row["options"]["num_warps"] == 4
        assert row["occupancy"] >= 12, (row["kernel"], row["registers"], row["occupancy"])


def test_sm90_kda_pass_a_fits_two_programs_an_sm(tmp_path):
    # K 128: pass A on two pipelining stages (132 KB of shared memory at three: one program an SM, and the
    # one-wave plan's 240 programs of 1 x 16384 x 12 in two waves)
    case = "kda-b1-t16384-h12-k128-softplus-sig-l2-dense-auto"
    rc, out, data = _compile(["compile", "--tier", "gpu", "-k", case, "--target", "sm90"], tmp_path)
    assert rc == 0, out
    (row,) = [row for row in data["binaries"] if row["kernel"] == "kda_transition_kernel"]
    assert row["constexprs"]["K"] == 128 and row["options"]["num_warps"] == 4
    assert row["occupancy"] >= 8, (row["registers"], row["lds"], row["occupancy"])


_TABLE = ("from kernels.paged_decode import tuning\n"
          "tuning.TABLES['gfx942'] = tuning.ArchTuning(rows=({row},), split=False, programs_per_cu=2)")


def test_a_planted_spill_fails_the_command(tmp_path):
    """A config that leaves the compiler 64 VGPRs (8 waves per SIMD) spills, and the command says so."""
    plant = _TABLE.format(row="tuning.LaunchConfig(256, 64, 4, 2, waves_per_eu=8)")
    rc, out, data = _compile(["compile", "--tier", "cpu", "-k", CASE, "--target", "gfx942"], tmp_path, plant=plant)
    assert out.strip().splitlines()[-1] == SUMMARY.format(n=1, t=1, f=0, s=1), out
    assert rc == 1
    row = data["binaries"][0]
    assert row["options"]["waves_per_eu"] == 8 and row["spills"] > 0 and row["scratch"] > 0 and row["scratch_used"]


def test_a_failing_compile_is_reported_with_the_compiler_message(tmp_path):
    plant = _TABLE.format(row="tuning.LaunchConfig(256, 48, 4, 2)")  # 48 keys a step: not a power of two
    rc, out, data = _compile(["compile", "--tier", "cpu", "-k", CASE, "--target", "gfx942"], tmp_path, plant=plant)
    assert out.strip().splitlines()[-1] == SUMMARY.format(n=1, t=1, f=1, s=0), out
    assert rc == 1
    row = data["binaries"][0]
    assert "power of 2" in row["error"] and row["sha256"] == ""
    assert f"FAILED gfx942 decode_partition_kernel ({CASE}): " in out and "power of 2" in out


def test_bindiff_tells_identical_changed_and_new_binaries(tmp_path, capsys):
    def row(target, key, sha):
        return binaries.to_json(binaries.Binary(target, "k", key, {"D": 64}, {}, [], 1, "case", "in" + key, sha))

    before = [row("sm90", "a", "1"), row("sm90", "b", "2"), row("gfx942", "a", "3"), row("gfx942", "d", "5")]
    after = [row("sm90", "a", "1"), row("sm90", "b", "9"), row("gfx942", "c", "3"), row("gfx942", "e", "6")]
    before[2]["example"] = after[2]["example"] = "first"  # same case, new key (a constexpr added): paired
    before[3]["example"], after[3]["example"] = "x", "y"
    for name, rows in (("before", before), ("after", after)):
        (tmp_path / f"{name}.json").write_text(json.dumps({"meta": {}, "binaries": rows}))
    assert cli.main(["bindiff", str(tmp_path / "before.json"), str(tmp_path / "after.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == ["sm90", "1", "1", "1", "0", "0", "0"]  # b: same compiler inputs, another binary
    assert out[2].split() == ["gfx942", "1", "0", "0", "1", "1", "1"]
    assert out[3].startswith("changed sm90 k (case) [same compiler inputs") and len(out) == 4


_GLUON = '''
from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([4], [64], [4], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    gl.store(y_ptr + offs, gl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
'''


def test_a_gluon_kernel_compiles_for_its_arch(tmp_path):
    """A Gluon kernel an entry launches goes through the same compile path, with Gluon's source class."""
    (tmp_path / "glk.py").write_text(_GLUON)
    code = ("import json, sys, torch\n"
            f"sys.path.insert(0, {str(tmp_path)!r})\n"
            "from glk import copy_kernel\n"
            "from kernels.launch import Launch\n"
            "from verify import binaries, targets\n"
            "x = torch.empty(4096, device='meta')\n"
            "launch = Launch(copy_kernel, (4,), (x, torch.empty_like(x), 4096), {'BLOCK': 1024}, {'num_warps': 4})\n"
            "print(json.dumps([copy_kernel.is_gluon(), binaries.compile_launch(launch, targets.TARGETS['gfx950'])]))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ, TRITON_INTERPRET="0"),
                          capture_output=True, text=True, timeout=600)
    gluon, facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert gluon and not facts.get("error") and facts["registers"] > 0 and len(facts["sha256"]) == 64


@pytest.mark.parametrize("target, fp8_mode", [("gfx942", arch.FP8_BITS_E4M3FN), ("gfx950", arch.FP8_NATIVE)])
def test_amd_decode_tables_keep_two_waves_without_spills(tmp_path, target, fp8_mode):
    """The heaviest decode of the matrix on each (a case of the long tier, which holds the whole product):
    64 rows a program (GQA 16 x MTP 4, planned for 1 CU: no query split), per-token scales, D 128,
    fp8 decoded from its bits on gfx942. With 4 warps it took 266 VGPRs there (one wave per SIMD)."""
    case = "decode-e4m3fn-token-b64-hq32-hkv2-d128-w1024-L65_22-q4-shuffled-subnormal-cu1-split"
    rc, out, data = _compile(["compile", "--tier", "long", "-k", case, "--target", target], tmp_path)
    assert rc == 0, out
    part = next(r for r in data["binaries"] if r["kernel"] == "decode_partition_kernel")
    assert part["constexprs"]["M_PAD"] == 64 and part["constexprs"]["FP8_MODE"] == fp8_mode
    assert part["occupancy"] >= 2 and part["spills"] == 0 and part["scratch"] == 0 and part["registers"] <= 256


@pytest.mark.parametrize("target, case", [
    ("gfx942", "decode-bf16-token-b32-hq32-hkv2-d256-w0-L65_22-q1-shuffled-saturate-cu256-onepass"),
    ("gfx950", "decode-e4m3fn-token-b16-hq8-hkv2-d192-w0-L70_20-q2-plain-d192pad-onepass"),
    ("gfx1250", "decode-e4m3fn-token-b128-hq32-hkv2-d256-w4096-L128_43-q8-shuffled-flat-cu1-onepass"),
])
def test_amd_decode_tables_keep_two_waves_at_d256(tmp_path, target, case):
    """The CPU tier's D 256 decodes that took one wave per SIMD with the earlier rows: 32-key steps
    on gfx942 (257 VGPRs), four warps on gfx950 (266) and gfx1250 (632, of 512 for two waves)."""
    rc, out, data = _compile(["compile", "--tier", "cpu", "-k", case, "--target", target], tmp_path)
    assert rc == 0, out
    part = next(r for r in data["binaries"] if r["kernel"] == "decode_partition_kernel")
    assert part["constexprs"]["D"] == 256 and part["occupancy"] >= 2 and part["spills"] == 0, part


def test_gfx1250_splits_keep_two_waves(tmp_path):
    """A split's fold runs behind the arrival counter's ticket; on gfx1250 that took the partition
    program of D 128, GQA 1, MTP 2 (bit-decoded e4m3fnuz) to 766 VGPRs, one wave per SIMD. The arch
    table asks split launches there for two waves (split_waves_per_eu), which the compiler fits."""
    case = "decode-e4m3fnuz-token-b64-hq16-hkv16-d128-w4096-L0_1-q2-shuffled-scalespread-cu256-split"
    rc, out, data = _compile(["compile", "--tier", "cpu", "-k", case, "--target", "gfx1250"], tmp_path)
    assert rc == 0, out
    part = next(r for r in data["binaries"] if r["kernel"] == "decode_partition_kernel")
    assert part["constexprs"]["SPLIT"] and part["options"].get("waves_per_eu") == 2, part
    assert part["occupancy"] >= 2 and part["spills"] == 0 and part["scratch"] == 0, part


def test_an_earlier_report_lends_its_facts_to_equal_compiler_inputs(tmp_path):
    """--reuse: a specialization whose compiler inputs equal a binary's in the earlier report takes
    that binary's facts (a marked register count comes back) and is not compiled; one whose inputs
    differ (a launch table changed) is compiled (red if every spec compiled, or if any were lent)."""
    rc, _, first = _compile(["compile", "--tier", "cpu", "-k", CASE, "--target", "gfx942"], tmp_path)
    assert rc == 0 and not first["binaries"][0]["reused"]
    first["binaries"][0]["registers"] = 7
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps(first))
    argv = ["compile", "--tier", "cpu", "-k", CASE, "--target", "gfx942", "--reuse", str(earlier)]
    rc, out, again = _compile(argv, tmp_path)
    assert out.strip().splitlines()[-1] == (
        "compiled 1 kernels for 1 targets (1 of them unchanged since the earlier report, not compiled again): "
        "0 failures, 0 with spills"), out
    assert f"1 of them have the compiler inputs of a binary in {earlier}: its facts are taken, 0 are compiled" in out
    row = again["binaries"][0]
    assert rc == 0 and row["reused"] and row["registers"] == 7 and row["sha256"] == first["binaries"][0]["sha256"]
    plant = _TABLE.format(row="tuning.LaunchConfig(256, 16, 4, 2)")  # another step: other compiler inputs
    rc, out, changed = _compile(argv, tmp_path, plant=plant)
    row = changed["binaries"][0]
    assert rc == 0 and not row["reused"] and row["registers"] > 7 and row["inputs"] != first["binaries"][0]["inputs"]
    assert "0 are compiled" not in out and "1 are compiled" in out and "written with triton" not in out
    first["meta"]["triton"] = "0.1"  # a report of another compiler: none of its inputs can be equal
    first["binaries"][0]["inputs"] = "0" * 64
    earlier.write_text(json.dumps(first))
    rc, out, _ = _compile(argv, tmp_path)
    assert rc == 0 and f"{earlier} was written with triton 0.1, this is triton {triton.__version__}" in out, out
    missing = subprocess.run([sys.executable, "-m", "verify", "compile", "--tier", "cpu", "-k", CASE, "--target",
                              "gfx942", "--reuse", str(tmp_path / "none.json")], cwd=ROOT, capture_output=True,
                             text=True, env=dict(os.environ, TRITON_INTERPRET="0"), timeout=600)
    assert missing.returncode == 2 and "--reuse: expected a report written by quantfloor compile --json" in missing.stderr


def _compiled_run(code: str) -> list[str]:
    """The lines the Python statements `code` print in a process where kernels are compiled (not
    interpreted); the process must succeed."""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ, TRITON_INTERPRET="0"),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()


def _first_sm90_launch(case: str) -> str:
    """Statements that plan the first sm90 launch of `case` (`launch`) and compile it (`kernel`)."""
    return ("from verify import adapters, binaries, targets\n"
            f"inputs = binaries.meta_inputs(binaries.case_of({case!r}))\n"
            "target = targets.TARGETS['sm90']\n"
            "launch = adapters.planned_launches(inputs, arch='sm90', cus=target.cus)[0]\n"
            "kernel = binaries.compiled(launch, target)[0]\n")


def test_the_split_orders_its_partials_before_the_last_arrival():
    """A split's partition programs store their partials, meet at a barrier, and one thread adds to
    the row tile's counter with acquire-release semantics at GPU scope; the last to arrive folds
    (kernels/paged_decode/reduce.py). Compiled, that is a barrier then the atomic on sm90, and on
    gfx942 the L2 written back and waited for before the atomic and invalidated after it (red with
    the atomic's `sem` relaxed, or without the barrier)."""
    case = "decode-e4m3fn-token-b16-hq32-hkv4-d64-w0-L300_120-q4-shuffled-cu256-qsplit-split"
    code = ("from verify import adapters, binaries, targets\n"
            f"inputs = binaries.meta_inputs(binaries.case_of({case!r}))\n"
            "for name, kind in (('sm90', 'ptx'), ('gfx942', 'amdgcn')):\n"
            "    target = targets.TARGETS[name]\n"
            "    launch = next(l for l in adapters.planned_launches(inputs, arch=name, cus=target.cus)\n"
            "                  if l.constexprs['SPLIT'])\n"
            "    lines = [l.strip() for l in binaries.compiled(launch, target)[0].asm[kind].splitlines()]\n"
            "    at = next(i for i, l in enumerate(lines) if 'atom' in l and 'add' in l)\n"
            "    print(name, '|'.join(lines[at - 30:at + 3]))\n")
    found = dict(line.split(" ", 1) for line in _compiled_run(code)[-2:])
    sm90 = found["sm90"].split("|")  # the atomic is line 30 of each
    assert "atom.global.gpu.acq_rel.add.u32" in sm90[30] and any(l.startswith("bar.sync") for l in sm90[:30])
    gfx942 = found["gfx942"].split("|")
    assert gfx942[28:30] == ["buffer_wbl2 sc1", "s_waitcnt vmcnt(0)"] and gfx942[30].startswith("global_atomic_add")
    assert gfx942[31:33] == ["s_waitcnt vmcnt(0)", "buffer_inv sc1"] and "s_barrier" in gfx942[:28]


def test_fp16_operands_weigh_p_in_one_product():
    """sm90 feeds fp8 caches to fp16 dots, where P enters the PV product once (11 bits keep it to
    2^-11 of itself; bf16 operands take a second product of the remainder). The one-warp row with
    keys as M (32 keys a step, 8 rows, D 128) compiles its step twice (the body and the tail tile),
    each with 16 m16n8k16 MMAs for the scores and 16 for P V: 64 in all, 96 with the second
    product (red with it on every narrow DOT)."""
    case = "decode-e4m3fn-token-b16-hq32-hkv8-d128-w4096-L8192_8192_8192_8192_8192_8192_8192_8192-q1-shuffled-split"
    code = (_first_sm90_launch(case) +
            "c = launch.constexprs\n"
            "print(c['BLOCK_N'], c['KEYS_M'], c['M_PAD'], c['DOT'], launch.options['num_warps'])\n"
            "print(sum('mma.sync.aligned.m16n8k16' in line for line in kernel.asm['ptx'].splitlines()))\n")
    launch, mmas = _compiled_run(code)[-2:]
    assert launch == "32 True 8 fp16 1", launch
    assert int(mmas) == 64, mmas


def test_block_ids_are_read_a_step_before_the_tiles_they_place():
    """The partition kernel reads a tile's block ids one step before the tile (tile_pages), so no load
    of a step waits on another load of that step, and Triton pipelines K and V num_stages - 1 steps
    ahead: sm90's two-warp D 256 row (3 stages) keeps two buffers of each, and its loop waits with
    the next tile's copies still in flight. Read in the step (a chain of two loads), the same row got
    one buffer and waited for every copy at each step (red with the block-id load back in attend_tile)."""
    # the split path: on sm90 the auto path runs the Gluon kernel there (tuning.GLUON_TABLES)
    case = "decode-e4m3fn-token-b16-hq16-hkv4-d256-w4096-L8192_8192_8192_8192_8192_8192_8192_8192-q1-shuffled-split"
    code = ("import re\n" + _first_sm90_launch(case) +
            "print(launch.constexprs['D'], launch.options['num_warps'], launch.options['num_stages'])\n"
            "ttgir = kernel.asm['ttgir']\n"
            "print(max(int(n) for n in re.findall(r'async_wait .*\\{num = (\\d+)', ttgir)),\n"
            "      sorted(set(re.findall(r'local_alloc.*?memdesc<(\\d+)x[x\\d]+xf8', ttgir))))\n")
    launch, pipelined = _compiled_run(code)[-2:]
    assert launch == "256 2 3", launch
    waits, buffers = pipelined.split(" ", 1)
    assert int(waits) > 0 and buffers == "['2']", pipelined


GLUON_CASE = CASE.replace("-onepass", "-gluon")  # a CPU-tier row through the Gluon path (compiled, never run)


def test_the_gluon_decode_compiles_for_sm90_and_is_not_planned_elsewhere(tmp_path):
    rc, out, data = _compile(["compile", "--tier", "cpu", "-k", GLUON_CASE, "--target", "sm90,gfx942"], tmp_path)
    assert out.strip().splitlines()[-1] == SUMMARY.format(n=1, t=2, f=0, s=0), out
    assert rc == 0
    (row,) = data["binaries"]
    assert row["target"] == "sm90" and row["kernel"] == "decode_partition_gluon" and row["example"] == GLUON_CASE
    assert row["constexprs"]["KEYS_M"] and row["constexprs"]["V_KEYS_INNER"] and row["registers"] > 0


_PICKS = """
import dataclasses, json
from cases import decode as decode_cases
from kernels.paged_decode import tuning
from verify import adapters, binaries

def launches(case_id, arch="sm90", cus=132):
    return adapters.planned_launches(binaries.meta_inputs(binaries.case_of(case_id)), arch=arch, cus=cus)

picks = {}
for name, case_id in CASES.items():
    picks[name] = [launch.fn.__name__ for launch in launches(case_id)]
picks["gfx942"] = [launch.fn.__name__ for launch in launches(CASES["long"], "gfx942", 304)]
# the strides the Triton and the Gluon launch of one bf16 shuffled case pass for the caches
bf16 = CASES["bf16"]
triton_args = launches(bf16.replace("-auto", "-split"))[0].args
gluon_args = launches(bf16.replace("-auto", "-gluon"))[0].args
picks["strides"] = [list(triton_args[24:34]), list(gluon_args[24:34])]
print(json.dumps(picks))
"""


def test_auto_runs_the_gluon_kernel_where_the_sm90_table_picks_it():
    """sm90: 8 x 8192 keys at GQA 4 (one-warp fp8 rows, picked) runs Gluon, and so do 64 query rows a kv
    head (MTP 4, GQA 16) in 16-row tiles (the two-warp row, picked from 128 keys a CU); the same rows of
    one sequence (62 keys a CU) run Triton; gfx942 has no Gluon table. The Gluon launch gets the cache
    strides in 16-byte runs (a bf16 cache: 8 elements), the run's own stride as it is."""
    cases = {"long": "decode-e4m3fn-token-b16-hq32-hkv8-d128-w4096-L8192_8192_8192_8192_8192_8192_8192_8192-q1"
                     "-shuffled-auto",
             "rows64": "decode-e4m3fn-token-b128-hq32-hkv2-d128-w4096-L8192_8192_8192_8192_8192_8192_8192_8192-q4"
                       "-shuffled-auto",
             "few": "decode-e4m3fn-token-b128-hq32-hkv2-d128-w4096-L8192-q4-shuffled-auto",
             "bf16": "decode-bf16-token-b16-hq32-hkv8-d128-w4096-L8192_8192-q1-shuffled-auto"}
    (line,) = _compiled_run(f"CASES = {cases!r}\n" + _PICKS)[-1:]
    picks = json.loads(line)
    assert picks["long"] == ["decode_partition_gluon"]
    assert picks["rows64"] == ["decode_partition_gluon"]
    assert picks["few"] == ["decode_partition_kernel"] and picks["gfx942"] == ["decode_partition_kernel"]
    triton_strides, gluon_strides = picks["strides"]
    # K blk, head, dhi, dlo, slo; V blk, head, dlo, shi, slo (shuffled: K's run is dlo, V's slo)
    runs = [8, 8, 8, 1, 8, 8, 8, 8, 8, 1]
    assert [g * r for g, r in zip(gluon_strides, runs)] == triton_strides and gluon_strides != triton_strides


def test_the_staged_fold_reaches_the_gluon_launch():
    """The plan's staged fold is the Gluon launch's STAGED_FOLD: the kill matrix's case for the staged
    fold's empty partitions (sm90's one-warp row, 32 partitions, 4 a step in registers) launches it, and
    it compiles for sm90 without a stack (no CPU-tier case plans it); the same lengths cut to 300 (the
    four-warp row, 5 partitions in one register step) do not (red if the entry passed the row's setting
    instead of the plan's, or nothing)."""
    case = "decode-e4m3fn-token-b16-hq32-hkv8-d128-w0-L0_1_4096-q1-shuffled-p64-cu64-stagedempty-gluon"
    code = ("from verify import adapters, binaries, targets\n"
            f"for case in ({case!r}, {case.replace('L0_1_4096', 'L0_1_300')!r}):\n"
            "    inputs = binaries.meta_inputs(binaries.case_of(case))\n"
            "    launches = adapters.planned_launches(inputs, arch='sm90', cus=132)\n"
            "    print([(launch.constexprs['STAGED_FOLD'], launch.constexprs['MERGE_UNROLL'], launch.grid[2]) "
            "for launch in launches])\n"
            "    if launches[0].constexprs['STAGED_FOLD']:\n"
            "        facts = binaries.compile_launch(launches[0], targets.TARGETS['sm90'])\n"
            "        print(facts.get('error') or '', facts.get('registers'), facts.get('scratch'))\n")
    staged, facts, single = _compiled_run(code)[-3:]
    assert staged == "[(True, 4, 32)]", staged
    error, registers, scratch = facts.rsplit(" ", 2)
    assert not error and int(registers) > 0 and scratch == "0", facts
    assert single == "[(False, 8, 5)]", single
