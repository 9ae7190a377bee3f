"""The decode entry's argument checks, the split planner and the scratch store."""

import dataclasses

import pytest
import torch

from cases import decode as decode_cases
from kernels import arch, launch
from kernels.paged_decode import paged_attention_decode
from kernels.paged_decode import plan as decode_plan
from kernels.paged_decode import tuning
from kernels.paged_decode import workspace
from verify import adapters, floors, gate


@pytest.fixture
def inputs(device):
    case = decode_cases.DecodeCase("e4m3fn", "token", 16, 8, 2, 64, 0, (40, 9), 1, "shuffled", "onepass")
    return decode_cases.build(case, device, 1234)


def _call(inputs, **changes):
    args = dict(out=inputs.out, query=inputs.query, key_cache=inputs.key_cache, value_cache=inputs.value_cache,
                block_tables=inputs.block_tables, seq_lens=inputs.seq_lens, scale=inputs.scale,
                k_scale=inputs.k_scale, v_scale=inputs.v_scale, sliding_window=0)
    kwargs = {k: changes.pop(k) for k in list(changes) if k in ("layout", "max_seq_len", "partition_size",
                                                                   "force_split", "workspace", "validate",
                                                                   "kernel")}
    args.update(changes)
    return paged_attention_decode(*args.values(), **kwargs)


def _table_entry(inputs, row, col, value):
    """block_tables with one entry replaced."""
    tables = inputs.block_tables.clone()
    tables[row, col] = value
    return tables


@pytest.mark.parametrize("change, argument, fragment", [
    (lambda i: {"query": i.query.float()}, "query", "bfloat16, float16"),
    (lambda i: {"query": i.query[..., :48].contiguous()}, "query", "head size"),
    (lambda i: {"out": i.out[:1]}, "out", "expected shape"),
    (lambda i: {"key_cache": i.key_cache.view(torch.uint8)}, "key_cache", "float8_e4m3fn"),
    (lambda i: {"value_cache": i.value_cache.view(torch.float8_e4m3fnuz)}, "value_cache", "dtype of key_cache"),
    (lambda i: {"query": i.query[:, :3], "out": i.out[:, :3]}, "query", "multiple of Hkv"),
    (lambda i: {"key_cache": i.key_cache[:, :1]}, "value_cache", "expected Hkv=1"),
    (lambda i: {"layout": "blocked"}, "layout", "'shuffled'"),
    (lambda i: {"layout": "plain"}, "key_cache", "plain layout"),
    (lambda i: {"block_tables": i.block_tables.long()}, "block_tables", "int32"),
    (lambda i: {"seq_lens": i.seq_lens[:1]}, "block_tables/seq_lens", "2 rows"),
    # lengths the kernel would read from the wrong elements, and past the tensor's one element
    (lambda i: {"seq_lens": torch.stack([i.seq_lens, i.seq_lens], 1)[:, 0]}, "seq_lens", "stride 1"),
    (lambda i: {"seq_lens": i.seq_lens[:1].expand(2)}, "seq_lens", "stride 1"),
    (lambda i: {"k_scale": i.k_scale[:, :, :3]}, "k_scale", "per-token"),
    (lambda i: {"v_scale": i.v_scale.double()}, "v_scale", "float32"),
    (lambda i: {"k_scale": 1.0}, "k_scale/v_scale", "both per-tensor or both per-token"),
    (lambda i: {"sliding_window": 4.0}, "sliding_window", "an int"),
    (lambda i: {"partition_size": 40}, "partition_size", "multiple of block_size=16"),
    (lambda i: {"max_seq_len": -1}, "max_seq_len", "host int"),
    (lambda i: {"force_split": "yes"}, "force_split", "None, True or False"),
    (lambda i: {"workspace": [1]}, "workspace", "a dict"),
    (lambda i: {"scale": float("nan")}, "scale", "finite number > 0"),
    (lambda i: {"scale": float("inf")}, "scale", "finite number > 0"),
    (lambda i: {"scale": 0.0}, "scale", "finite number > 0"),
    (lambda i: {"scale": -0.125}, "scale", "finite number > 0"),
    (lambda i: {"validate": "yes"}, "validate", "None, True or False"),
    (lambda i: {"block_tables": _table_entry(i, 0, 2, i.key_cache.shape[0])}, "block_tables", "block ids in [0, "),
    (lambda i: {"block_tables": _table_entry(i, 1, 0, -1)}, "block_tables", "got -1 at [1, 0]"),
    (lambda i: {"seq_lens": i.seq_lens + 16 * i.block_tables.shape[1]}, "seq_lens", "block_tables width"),
    (lambda i: {"seq_lens": i.seq_lens - 10}, "seq_lens", "lengths >= 0"),
    (lambda i: {"max_seq_len": 20}, "max_seq_len", "seq_lens[0] = 40"),
])
def test_bad_arguments_are_named(inputs, change, argument, fragment):
    with pytest.raises((TypeError, ValueError)) as err:
        _call(inputs, **change(inputs))
    message = str(err.value)
    assert message.startswith(argument + ":"), message
    assert fragment in message, message


def test_plan_caps_partitions_but_covers_every_key():
    p = decode_plan.plan_decode(num_seqs=16, num_kv_heads=8, max_seq_len=8192, num_queries=1, window=4096,
                                block_size=16, partition_size=256, cu=256, arch="gfx950", force_split=None)
    assert p.split and p.n_part == 4
    assert p.n_part * p.part_size >= 4096 + 15 and p.part_size % 16 == 0 and p.part_size >= 256
    assert p.p2 == 4


def test_plan_puts_few_rows_in_the_mmas_n_where_the_config_does():
    common = dict(num_kv_heads=8, max_seq_len=8192, num_queries=1, window=4096, block_size=16, partition_size=256,
                  cu=132, arch="sm90", force_split=None, group=4, head_dim=128)
    full = decode_plan.plan_decode(num_seqs=64, **common)
    assert full.launch.keys_m and full.m_pad == decode_plan.LEAST_ROWS_N and full.row_tiles == 1
    # the split aims for the row's own programs per CU: 12 one-warp programs, not the arch's 2
    assert full.split and full.n_part == 12 * 132 // (64 * 8)
    few = decode_plan.plan_decode(num_seqs=1, **common)
    assert not few.launch.keys_m and few.m_pad == decode_plan.LEAST_ROWS
    # forced one-pass: 64 programs cannot spread 8 x 8192 keys over one-warp programs; 512 can
    small = decode_plan.plan_decode(num_seqs=8, **dict(common, force_split=False))
    large = decode_plan.plan_decode(num_seqs=64, **dict(common, force_split=False))
    assert not small.split and not small.launch.keys_m and small.m_pad == decode_plan.LEAST_ROWS
    assert not large.split and large.launch.keys_m and large.m_pad == decode_plan.LEAST_ROWS_N


def test_plan_splits_where_one_warp_programs_need_more_than_the_grid():
    common = dict(num_kv_heads=8, max_seq_len=590, num_queries=1, window=4096, block_size=16, cu=132,
                  arch="sm90", group=4, head_dim=128)
    # 32 sequences x 590 keys: 1144 keys a CU, 256 programs (1.9 a CU, under the row's least of 3)
    tabled = decode_plan.plan_decode(num_seqs=32, partition_size=None, force_split=None, **common)
    assert tabled.launch.keys_m and tabled.split and tabled.part_size == 128
    assert tabled.n_part == 5 and tabled.n_part * tabled.part_size >= 590 + 15
    asked = decode_plan.plan_decode(num_seqs=32, partition_size=256, force_split=None, **common)
    assert asked.split and asked.part_size == 256 and asked.n_part == 3  # the caller's partition wins
    # one-pass with those 256 programs: four warps, not one
    onepass = decode_plan.plan_decode(num_seqs=32, partition_size=None, force_split=False, **common)
    assert not onepass.split and not onepass.launch.keys_m
    # a cache block larger than the row's partition: a partition is at least a block
    paged = decode_plan.plan_decode(num_seqs=32, partition_size=None, force_split=None,
                                    **dict(common, block_size=256))
    assert paged.part_size % 256 == 0


def test_plan_gate():
    common = dict(num_kv_heads=8, num_queries=1, window=0, block_size=16, partition_size=256)
    short = decode_plan.plan_decode(num_seqs=2, max_seq_len=300, cu=132, arch="sm90", force_split=None, **common)
    full = decode_plan.plan_decode(num_seqs=64, max_seq_len=1024, cu=132, arch="sm90", force_split=None, **common)
    unlisted = decode_plan.plan_decode(num_seqs=2, max_seq_len=8192, cu=132, arch="gfx942", force_split=None,
                                       **common)
    forced = decode_plan.plan_decode(num_seqs=2, max_seq_len=8192, cu=132, arch="gfx942", force_split=True,
                                     **common)
    long = decode_plan.plan_decode(num_seqs=2, max_seq_len=8192, cu=132, arch="sm90", force_split=None, **common)
    assert not short.split or short.n_part >= 2
    assert not full.split and not unlisted.split
    assert forced.split and long.split and long.n_part >= 4


def test_split_arch_env(monkeypatch):
    monkeypatch.setenv("QUANTFLOOR_SPLIT_ARCH", "gfx942, cpu")
    assert decode_plan.split_archs() == ("gfx942", "cpu")
    monkeypatch.setenv("QUANTFLOOR_SPLIT_ARCH", "")
    assert decode_plan.split_archs() == ()


def test_workspace_grows_only_and_keeps_replaced_buffers(device):
    store = {}
    m, l, acc, count = workspace.acquire(store, device, (2, 8, 16, 4), (2, 8, 16, 4, 64), 16)
    assert store["allocations"] == 1 and m.shape == (2, 8, 16, 4) and acc.shape == (2, 8, 16, 4, 64)
    first_acc = store["acc"]
    workspace.acquire(store, device, (2, 8, 16, 4), (2, 8, 16, 4, 32), 16)
    assert store["allocations"] == 1
    workspace.acquire(store, device, (2, 8, 16, 4), (2, 8, 16, 4, 128), 16)
    assert store["allocations"] == 2 and store["acc"].numel() == 2 * 8 * 16 * 4 * 128
    assert any(t is first_acc for t in store["retired"])


def test_workspace_counters_are_int32_zeros_and_grow_zeroed(device):
    """The row tiles' arrival counters come zeroed (the kernel's last arrival only sets them back),
    and a store that needs more of them gets a new zeroed buffer and keeps the old one (a graph may
    hold it)."""
    store = {}
    count = workspace.acquire(store, device, (1, 2, 4, 4), (1, 2, 4, 4, 64), 2)[3]
    assert count.dtype == torch.int32 and count.shape == (2,) and not count.any()
    first = store["count"]
    grown = workspace.acquire(store, device, (1, 2, 4, 4), (1, 2, 4, 4, 64), 6)[3]
    assert grown.shape == (6,) and not grown.any() and store["allocations"] == 2
    assert any(t is first for t in store["retired"])


def test_workspace_replaces_buffers_of_another_dtype(device):
    """A caller's store holding a float "count" or an fp16 "acc" gets buffers of the kernel's dtypes
    (the kernel would add ints into float bits, or store fp32 partials as fp16), the old ones kept."""
    store = {"acc": torch.zeros(64, dtype=torch.float16, device=device),
             "count": torch.zeros(4, dtype=torch.float32, device=device)}
    _, _, acc, count = workspace.acquire(store, device, (1, 1, 2, 2), (1, 1, 2, 2, 16), 4)
    assert acc.dtype == torch.float32 and count.dtype == torch.int32 and not count.any()
    assert len(store["retired"]) == 2


def test_workspace_replaces_tensors_of_another_device(device):
    store = {"ml": torch.empty(10, device="meta"), "acc": torch.empty(10, device="meta")}
    m, _, acc, count = workspace.acquire(store, device, (1, 1, 1, 2), (1, 1, 1, 2, 4), 1)
    assert m.device.type == torch.device(device).type and acc.device.type == torch.device(device).type
    assert count.device.type == torch.device(device).type


def test_auto_without_split_equals_onepass_bit_for_bit(device, monkeypatch):
    monkeypatch.setenv("QUANTFLOOR_SPLIT_ARCH", "none-listed")
    case = decode_cases.DecodeCase("e4m3fnuz", "tensor", 32, 16, 4, 128, 64, (150, 20), 2, "plain", "auto")
    inputs = decode_cases.build(case, device, 99)
    auto = adapters.decode_call(inputs, path="auto").clone()
    onepass = adapters.decode_call(inputs, path="onepass", out=torch.full_like(inputs.out, float("nan")))
    assert torch.equal(auto, onepass)


def test_split_reproduces_onepass_within_the_gate(device):
    case = decode_cases.DecodeCase("e4m3fn", "token", 16, 8, 2, 64, 0, (700, 333), 1, "shuffled", "split",
                                   partition=64, cu=64)
    inputs = decode_cases.build(case, device, 7)
    split = adapters.decode(inputs).clone()
    onepass = adapters.decode_call(inputs, path="onepass", out=torch.full_like(inputs.out, float("nan")))
    judged = floors.decode(inputs)
    verdict = gate.judge("t", case.id, {"split": (split, judged.ref8), "onepass": (onepass, judged.ref8)},
                         judged.floor, judged.multiple)
    assert verdict.passed, verdict.reasons
    assert (split.float() - onepass.float()).abs().max() <= 0.1 * judged.floor


def test_seq_len_zero_everywhere_gives_zeros(device):
    case = decode_cases.DecodeCase("e4m3fn", "tensor", 16, 8, 2, 64, 0, (0, 0), 4, "shuffled", "split")
    inputs = decode_cases.build(case, device, 3)
    out = adapters.decode(inputs)
    assert torch.equal(out.float(), torch.zeros_like(out.float()))


def test_blocks_before_the_window_may_hold_any_id(inputs):
    """A window releases the blocks before it: their table entries are never read, nor checked."""
    want = _call(inputs, sliding_window=8, validate=True).clone()
    released = _table_entry(inputs, 0, 0, -7)  # keys 0..15 of a 40-key sequence lie before its window of 8
    got = _call(inputs, out=torch.full_like(inputs.out, float("nan")), block_tables=released, sliding_window=8,
                validate=True)
    assert torch.equal(got, want)


def test_device_checks_are_opt_in_on_a_gpu_and_always_on_under_the_interpreter(monkeypatch):
    monkeypatch.setattr(arch, "interpreting", lambda: True)
    assert arch.data_checks(False) and arch.data_checks(None)
    monkeypatch.setattr(arch, "interpreting", lambda: False)
    monkeypatch.delenv("QUANTFLOOR_VALIDATE", raising=False)
    assert not arch.data_checks(None) and not arch.data_checks(False) and arch.data_checks(True)
    monkeypatch.setenv("QUANTFLOOR_VALIDATE", "1")
    assert arch.data_checks(None) and not arch.data_checks(False)


@pytest.mark.parametrize("bad, argument", [
    ({"force_split": 1}, "force_split"),  # equal to True and hashed alike: the type must tell them apart
    ({"workspace": [1]}, "workspace"),
    ({"scale": float("nan")}, "scale"),
    ({"sliding_window": True}, "sliding_window"),
    ({"max_seq_len": 640.0}, "max_seq_len"),
])
def test_a_bad_argument_raises_after_good_calls_of_the_same_shapes(inputs, bad, argument):
    """The entry runs its checks once per argument signature; a bad value never rides on a good call's."""
    good = {"force_split": True, "workspace": {}, "scale": inputs.scale, "sliding_window": 1,
            "max_seq_len": 640}
    _call(inputs, **{argument: good[argument]})
    _call(inputs, **{argument: good[argument]})
    with pytest.raises((TypeError, ValueError), match=argument):
        _call(inputs, **bad)


@pytest.fixture
def fresh_plans():
    """Signatures planned with a patched launch table are forgotten before and after the test."""
    from kernels.paged_decode import api
    api.clear_plans()
    yield
    api.clear_plans()


def test_launch_configs_are_data_per_arch():
    sm90, gfx942 = tuning.TABLES["sm90"], tuning.TABLES["gfx942"]
    # a full device of fp8 rows: one warp, keys as the MMA's M; few keys a CU: four warps, rows as M
    full = tuning.config("sm90", 64, 4, 1, 1 << 20)
    assert full == sm90.rows[0] and full.keys_m and full.num_warps == 1
    assert not tuning.config("sm90", 64, 4).keys_m and tuning.config("sm90", 64, 4).num_warps == 4
    assert tuning.config("sm90", 128, 8, 2, 1 << 20).block_n < full.block_n  # bf16: smaller steps
    assert not tuning.config("sm90", 128, 16, 1, 1 << 20).keys_m  # more than 8 rows: rows as M
    # keys as M on four warps compiles to warpgroup MMAs, which triton 3.6 got wrong (tuning docstring)
    assert not any(r.keys_m and r.num_warps >= 4 for r in sm90.rows)
    assert tuning.config("sm90", 256, 64) == next(r for r in sm90.rows if r.max_head_dim >= 256 and r.max_rows >= 64)
    assert tuning.config("gfx90a", 128, 4) == tuning.DEFAULT.rows[0]
    # [32 rows, 64 keys] tiles pass gfx942's 256 VGPRs for 2 waves, and [16 rows, 64 keys] did on a forced
    # split of 128 rows (tests/test_compile.py): 32 keys a step there, from the row that serves D 128 too
    assert tuning.config("gfx942", 64, 16).block_n == tuning.config("gfx942", 64, 32).block_n == 32
    assert tuning.config("gfx942", 64, 16) == tuning.config("gfx942", 128, 16) == gfx942.rows[0]
    assert gfx942.rows[0].max_rows == 16 and tuning.config("gfx942", 64, 64).max_rows == 64
    assert tuning.config("sm90", 1024, 16).max_head_dim == 1024
    with pytest.raises(ValueError, match="head_dim"):
        tuning.config("sm90", 2048, 4)
    assert decode_plan.split_archs() == tuple(a for a, t in tuning.TABLES.items() if t.split)


def test_known_spills_are_looked_up_by_the_launch_they_made():
    """verify.adapters.known_spill finds a launch's row by tile width, rows, keys a step, orientation,
    warps and register cap: on sm90 a D 128 program of 8 rows and 32 keys as M is the one-warp row
    (168 registers) on one warp and the two-warp row (no cap) on two, each with its own reason."""
    rows = tuning.TABLES["sm90"].rows
    one_warp, two_warps = rows[0], next(r for r in rows if (r.block_n, r.num_warps, r.keys_m) == (32, 2, True))
    assert one_warp.spills and two_warps.spills and one_warp.spills != two_warps.spills
    assert tuning.spills("sm90", 128, 8, 32, True, 1, 168) == one_warp.spills
    assert tuning.spills("sm90", 128, 8, 32, True, 2) == two_warps.spills
    with pytest.raises(ValueError, match="head_dim"):
        tuning.spills("sm90", 128, 8, 32, True, 1)  # no one-warp sm90 row leaves the registers to the compiler
    assert tuning.spills("gfx942", 64, 16, 32, False, 4) == ""
    with pytest.raises(ValueError, match="head_dim"):
        tuning.spills("gfx942", 64, 16, 64, True, 4)  # no gfx942 row puts the keys in M


def test_no_amd_row_expects_a_spill():
    """Every row of the AMD tables must compile without a spill (verify.binaries counts a spill the
    rows name as known, so a row that names one would hide it): the GPU tier's one AMD spill (gfx1250,
    D 1024 in 128-dim slices split at two waves) went with the two-wave ask of its D 1024 splits."""
    for arch in ("gfx942", "gfx950", "gfx1250"):
        assert all(row.spills == "" for row in tuning.tuning(arch).rows), arch
    assert tuning.spills("gfx1250", 1024, 16, 16, False, 4) == ""


def test_launch_keys_on_what_triton_specializes():
    buf = torch.zeros(64, dtype=torch.uint8)
    assert launch._spec(buf) != launch._spec(buf[1:])  # 16-byte aligned or not
    assert launch._spec(buf) != launch._spec(buf.view(torch.int8))
    assert launch._spec(1) != launch._spec(17)  # 1 is a constant to Triton
    assert launch._spec(32) != launch._spec(33)  # divisible by 16 or not
    assert launch._spec(32) != launch._spec(32 << 31)  # 32 or 64 bits
    assert launch._spec(2.0) == launch._spec(3.0)  # floats are not specialized


@pytest.mark.parametrize("path", ["onepass", "split"])
def test_per_token_v_scales_past_the_fp16_range_stay_finite(device, path):
    """V scales times 2^24 (about 1e5): P * v_scale passes fp16's 65504, where an fp8 cache runs
    fp16 operands (kernels/paged_decode/tuning.py); each P row is scaled into range first."""
    case = decode_cases.DecodeCase("e4m3fn", "token", 16, 8, 2, 64, 0, (70, 33), 1, "shuffled", path,
                                   cu=256 if path == "split" else 0)
    inputs = decode_cases.build(case, device, 17)
    inputs.v_scale.mul_(2.0 ** 24)
    inputs.original_v.mul_(2.0 ** 24)
    out = adapters.decode(inputs)
    judged = floors.decode(inputs)
    verdict = gate.judge("t", case.id, {"out": (out, judged.ref8)}, judged.floor, judged.multiple)
    assert verdict.passed, verdict.reasons


@pytest.mark.parametrize("cache", ["e4m3fn", "e4m3fnuz"])
def test_the_fp32_bit_decoder_keeps_subnormal_codes(device, cache, monkeypatch, fresh_plans):
    """Archs whose tuning gives fp8 caches no fp16 operands decode the bits to fp32 (decode_fp8_bits):
    the CPU takes that road here, on a cache whose codes are mostly subnormal."""
    cpu = tuning.TABLES["cpu"]
    monkeypatch.setitem(tuning.TABLES, "cpu", tuning.ArchTuning(cpu.rows, cpu.split, cpu.programs_per_cu))
    case = decode_cases.DecodeCase(cache, "tensor", 16, 8, 2, 64, 0, (40, 9), 1, "shuffled", "onepass",
                                   dist="subnormal")
    inputs = decode_cases.build(case, device, 19)
    out = adapters.decode(inputs)
    judged = floors.decode(inputs)
    verdict = gate.judge("t", case.id, {"out": (out, judged.ref8)}, judged.floor, judged.multiple)
    assert verdict.passed, verdict.reasons


@pytest.mark.parametrize("layout", ["shuffled", "plain"])
def test_cache_blocks_larger_than_the_key_step(device, layout, monkeypatch, fresh_plans):
    """Blocks of 128 keys walked 32 keys a step (the sm90 table walks D 256 64 keys a step): a step's
    chunks lie inside one block, and every block of the window is still read once, in order."""
    cpu = tuning.TABLES["cpu"]
    monkeypatch.setitem(tuning.TABLES, "cpu", tuning.ArchTuning(
        (tuning.LaunchConfig(256, 32, 4, 1),), cpu.split, cpu.programs_per_cu, cpu.fp8_dot))
    for path in ("onepass", "split"):
        case = decode_cases.DecodeCase("e4m3fn", "token", 128, 8, 2, 64, 200, (300, 129), 2, layout, path,
                                       cu=256 if path == "split" else 0)
        inputs = decode_cases.build(case, device, 23)
        out = adapters.decode(inputs)
        judged = floors.decode(inputs)
        verdict = gate.judge("t", case.id, {"out": (out, judged.ref8)}, judged.floor, judged.multiple)
        assert verdict.passed, (path, verdict.reasons)


def test_head_size_1024_needs_an_fp8_cache():
    query = torch.zeros(1, 2, 1024, dtype=torch.bfloat16)
    cache = torch.zeros(2, 16, 1, 1024, dtype=torch.bfloat16)
    tables, lens = torch.zeros(1, 2, dtype=torch.int32), torch.ones(1, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"^query: head size D 1024 takes an fp8 cache"):
        paged_attention_decode(torch.empty_like(query), query, cache, cache, tables, lens, 0.03, None, None, 0,
                               layout="plain")


def _meta_launches(force_split):
    """The launches one decode call on meta tensors records for sm90 (132 CUs): 2 sequences of 8192
    keys, GQA 8 x MTP 4 (32 query rows a kv head), 2 kv heads, D 128, fp8 per-token."""
    m = torch.device("meta")
    q = torch.empty(2, 4, 16, 128, dtype=torch.bfloat16, device=m)
    kc = torch.empty(1024, 2, 8, 16, 16, dtype=torch.float8_e4m3fn, device=m)
    vc = torch.empty(1024, 2, 1, 128, 16, dtype=torch.float8_e4m3fn, device=m)
    scales = torch.empty(1024, 2, 16, device=m)
    with arch.planned("sm90", 132), launch.recorded() as calls:
        paged_attention_decode(torch.empty_like(q), q, kc, vc, torch.empty(2, 512, dtype=torch.int32, device=m),
                               torch.empty(2, dtype=torch.int32, device=m), 0.088, scales, scales, 0,
                               max_seq_len=8192, force_split=force_split)
    return calls


def test_a_signature_is_planned_again_when_the_environment_the_plan_reads_changes(monkeypatch):
    """The entry keeps each argument signature's plan; CU_NUM and QUANTFLOOR_SPLIT_ARCH belong to it."""
    monkeypatch.setenv("CU_NUM", "1")
    whole = _meta_launches(False)[0]
    monkeypatch.setenv("CU_NUM", "256")
    spread = _meta_launches(False)[0]
    assert (whole.constexprs["M_PAD"], whole.grid[1]) == (32, 2)  # one 32-row tile a kv head
    assert (spread.constexprs["M_PAD"], spread.grid[1]) == (16, 4)  # the query split: two 16-row tiles
    monkeypatch.delenv("CU_NUM")
    assert [one.constexprs["SPLIT"] for one in _meta_launches(None)] == [True]  # sm90 splits, in one launch
    monkeypatch.setenv("QUANTFLOOR_SPLIT_ARCH", "gfx950")
    assert [one.constexprs["SPLIT"] for one in _meta_launches(None)] == [False]


def test_validate_is_part_of_the_signature(monkeypatch):
    """A signature decides its host checks once: a call asking for them after one that did not must
    still run them (compiled, where they are not forced on; launches recorded, not run)."""
    from kernels.paged_decode import api
    monkeypatch.setattr(arch, "interpreting", lambda: False)
    api.clear_plans()
    try:
        inputs = decode_cases.build(
            decode_cases.DecodeCase("e4m3fn", "token", 16, 8, 2, 64, 0, (40, 9), 1, "shuffled", "onepass"),
            torch.device("cpu"), 1234)
        bad = _table_entry(inputs, 0, 0, inputs.key_cache.shape[0] + 5)
        with launch.recorded():
            _call(inputs, block_tables=bad, validate=False)
            with pytest.raises(ValueError, match="block_tables"):
                _call(inputs, block_tables=bad, validate=True)
    finally:
        api.clear_plans()


def test_environment_reader_sees_every_change(monkeypatch):
    read = arch.environment(("QUANTFLOOR_TEST_A", "QUANTFLOOR_TEST_B"))
    monkeypatch.delenv("QUANTFLOOR_TEST_A", raising=False)
    monkeypatch.delenv("QUANTFLOOR_TEST_B", raising=False)
    assert read() == (None, None)
    monkeypatch.setenv("QUANTFLOOR_TEST_A", "7")
    first = read()
    monkeypatch.setenv("QUANTFLOOR_TEST_A", "8")
    assert first[0] is not None and read()[0] != first[0] and read()[1] is None
    monkeypatch.delenv("QUANTFLOOR_TEST_A")
    assert read() == (None, None)


def test_an_entry_call_without_a_partition_size_takes_the_launch_tables():
    """32 x 590 / 4096 on sm90 (132 CUs) falls in the one-warp row of 128-key partitions: a plain
    call splits into 5 of them, as the plan with no size asked says (red with the entry's default
    a fixed 256, which gave 3 and ignored the table)."""
    case = decode_cases.DecodeCase("e4m3fn", "token", 16, 32, 8, 128, 4096, (590,) * 32, 1, "shuffled", "auto")
    meta = decode_cases.build_meta(case)
    with arch.planned("sm90", 132), launch.recorded() as calls:
        paged_attention_decode(meta.out, meta.query, meta.key_cache, meta.value_cache, meta.block_tables,
                               meta.seq_lens, meta.scale, meta.k_scale, meta.v_scale, case.window, max_seq_len=590)
    plan = decode_plan.plan_decode(num_seqs=32, num_kv_heads=8, max_seq_len=590, num_queries=1, window=4096,
                                   block_size=16, partition_size=None, cu=132, arch="sm90", force_split=None,
                                   group=4, head_dim=128, elem=1)
    partition = [one for one in calls if one.fn.__name__ == "decode_partition_kernel"]
    assert plan.split and plan.n_part == 5
    assert [one.grid[2] for one in partition] == [plan.n_part]


def test_wide_heads_run_as_dim_slices_of_the_tables_width():
    """D 1024 on sm90 takes 256-dim slices: four programs per (kv head, row tile), each weighing a
    256-dim slice of V (DV), in the one launch of the split; D 256 stays whole (red without the
    slices in the grid or in DV)."""
    grids = {}
    for d in (256, 1024):
        case = decode_cases.DecodeCase("e4m3fn", "token", 16, 8, 2, d, 0, (300, 90), 1, "shuffled", "split")
        meta = decode_cases.build_meta(case)
        with arch.planned("sm90", 132), launch.recorded() as calls:
            paged_attention_decode(meta.out, meta.query, meta.key_cache, meta.value_cache, meta.block_tables,
                                   meta.seq_lens, meta.scale, meta.k_scale, meta.v_scale, 0, force_split=True)
        grids[d] = [(one.fn.__name__, one.grid[1], one.constexprs["DV"]) for one in calls]
    assert grids == {256: [("decode_partition_kernel", 2, 256)], 1024: [("decode_partition_kernel", 8, 256)]}


def test_sliced_rows_walk_long_heads_in_one_pass_where_their_slices_fill_the_device():
    """sm90, 16 x 8192 full: D 1024 (four slices, 256 programs on 132 SMs, a walk of 32 partitions)
    runs one pass, as the bench found faster; D 512 with a bf16 cache (MTP 4: 256 programs too) still
    splits, and so does a D 128 walk of 32 partitions (red with the default long walk for fp8 sliced rows,
    or with the long walk on every sliced row)."""
    common = dict(num_seqs=16, max_seq_len=8192, window=0, block_size=16, partition_size=None, cu=132, arch="sm90",
                  force_split=None)
    wide = decode_plan.plan_decode(num_kv_heads=4, num_queries=1, group=4, head_dim=1024, elem=1, **common)
    bf16 = decode_plan.plan_decode(num_kv_heads=2, num_queries=4, group=16, head_dim=512, elem=2, **common)
    narrow = decode_plan.plan_decode(num_kv_heads=8, num_queries=1, group=4, head_dim=128, elem=1, **common)
    assert (wide.split, wide.dim_slices) == (False, 4)
    assert bf16.split and bf16.dim_slices == 2
    assert narrow.split


def test_the_fold_loads_partitions_within_the_tables_block():
    """sm90's fold: the rows that exist (GQA 4: 4 of a tile of 16 or 8), the whole head (128 dims) a
    pass and at most 2048 elements a warp a step (1 x 8192 / 4096: 17 partitions on four warps, 16
    a step; 64 x 8192: 3 on one warp, 4 a step: never more than there are, rounded to a power of
    two)."""
    common = dict(num_kv_heads=8, max_seq_len=8192, num_queries=1, window=4096, block_size=16, partition_size=None,
                  cu=132, arch="sm90", force_split=None, group=4, head_dim=128)
    one = decode_plan.plan_decode(num_seqs=1, **common)
    many = decode_plan.plan_decode(num_seqs=64, **common)
    assert (one.n_part, one.m_pad, one.launch.num_warps) == (17, 16, 4)
    assert (one.merge_rows, one.merge_dims, one.merge_unroll) == (4, 128, 16)
    assert (many.n_part, many.m_pad, many.launch.num_warps) == (3, 8, 1)
    assert (many.merge_rows, many.merge_dims, many.merge_unroll) == (4, 128, 4)
    onepass = decode_plan.plan_decode(num_seqs=1, **{**common, "force_split": False})
    assert (onepass.merge_rows, onepass.merge_dims, onepass.merge_unroll) == (0, 0, 0)


def test_the_gluon_fold_goes_through_shared_memory_where_registers_take_many_steps():
    """sm90's Gluon rows stage a split's fold through shared memory where the register fold would take
    2 steps or more (3 on the 16-row row): 8 x 8192 / 4096 (17 partitions, 4 a step), 32 x 590 (5, 4),
    GQA 16 at 8 x 8192 (17, 2) do; 64 x 8192 (3, 4), 1 x 8192 / 257 MTP 4 (2, 2) and GQA 16 at 64 x 8192
    (3, 2: measured slower staged) do not, nor does the Triton kernel (red with the rule taken back, or
    with every fold staged)."""
    common = dict(num_kv_heads=8, num_queries=1, window=4096, block_size=16, partition_size=None, cu=132,
                  arch="sm90", force_split=None, group=4, head_dim=128, kernel="gluon")

    def staged(**kw):
        plan = decode_plan.plan_decode(**{**common, **kw})
        assert plan.split
        return plan.staged_fold

    assert staged(num_seqs=8, max_seq_len=8192)
    assert staged(num_seqs=32, max_seq_len=590)
    assert staged(num_seqs=8, max_seq_len=8192, num_kv_heads=2, group=16)
    assert not staged(num_seqs=64, max_seq_len=8192)
    assert not staged(num_seqs=1, max_seq_len=8192, num_queries=4, window=257)
    assert not staged(num_seqs=64, max_seq_len=8192, num_kv_heads=2, group=16)
    assert not staged(num_seqs=8, max_seq_len=8192, kernel="triton")


def test_the_staged_folds_ring_fits_where_the_walks_was():
    """The staged fold's ring (NB groups of PB partitions: m, l and acc of `rows` rows and `dims` dims)
    holds the most partitions in flight, (NB - 1) * PB, within the walk's ring bytes, NB a power of two
    from 2 to FOLD_GROUPS: sm90's four-warp 128-key row (64 KB and its scales, 4 rows) 4 x 8; the one-warp
    row (16 KB) 1 x 8; the 16-row row (32 KB) 1 x 4; a ring that holds none, 1 x 2."""
    from kernels.paged_decode import gluon_partition

    assert gluon_partition.fold_ring(2 * 128 * 264, 4, 128) == (4, 8)
    assert gluon_partition.fold_ring(2 * 32 * 264, 4, 128) == (1, 8)
    assert gluon_partition.fold_ring(2 * 64 * 264, 16, 128) == (1, 4)
    assert gluon_partition.fold_ring(1024, 16, 128) == (1, 2)
    for ring in (4096, 16896, 33792, 67584, 81920, 139264):
        for rows in (1, 4, 8, 16, 32, 64):
            for dims in (64, 128):
                group, groups = gluon_partition.fold_ring(ring, rows, dims)
                need = group * groups * (rows * dims + 2 * rows) * 4
                assert groups & (groups - 1) == 0 and 2 <= groups <= gluon_partition.FOLD_GROUPS
                assert need <= ring or (group, groups) == (1, 2)


def test_a_split_launch_takes_its_rows_waves():
    """gfx1250's rows up to D 512 ask split launches for two waves per SIMD (the fold behind the
    arrival counter's ticket took one: tests/test_compile.py); its one-pass launches, its D 1024
    splits and other archs' splits keep their rows' options."""
    common = dict(num_seqs=1, num_kv_heads=16, max_seq_len=8192, num_queries=2, window=4096, block_size=64,
                  partition_size=None, cu=256, group=1, head_dim=128)
    split = decode_plan.plan_decode(arch="gfx1250", force_split=True, **common)
    onepass = decode_plan.plan_decode(arch="gfx1250", force_split=False, **common)
    sm90 = decode_plan.plan_decode(arch="sm90", force_split=True, **common)
    assert split.split and split.launch.options.get("waves_per_eu") == 2
    assert "waves_per_eu" not in onepass.launch.options and "waves_per_eu" not in sm90.launch.options
    assert dataclasses.replace(split.launch, waves_per_eu=None) == onepass.launch
    # D 512 slices ask for two as well; D 1024 ones for none (at two waves a D 1024 split spilled)
    for dims, waves in ((512, 2), (1024, None)):
        sliced = decode_plan.plan_decode(arch="gfx1250", force_split=True, **{**common, "head_dim": dims})
        assert sliced.split and sliced.dim_slices > 1 and sliced.launch.options.get("waves_per_eu") == waves


def test_a_number_scale_is_one_kept_tensor_per_stream(inputs):
    """A float scale becomes a one-element tensor made once per (device, stream, value) and read by
    every later call, not filled again on every call; the output is the tensor scale's."""
    from kernels.paged_decode import api

    device = inputs.query.device
    first = api._scale_tensor(0.5, device, 0)
    assert api._scale_tensor(0.5, device, 0) is first and first.item() == 0.5
    assert api._scale_tensor(0.5, device, 1) is not first  # another stream fills its own
    assert api._scale_tensor(None, device, 0).item() == 1.0
    case = decode_cases.DecodeCase("e4m3fn", "tensor", 16, 8, 2, 64, 0, (40, 9), 1, "shuffled", "onepass")
    x = decode_cases.build(case, device, 1234)
    want = _call(x).clone()
    for _ in range(2):
        assert torch.equal(_call(x, k_scale=x.k_scale.item(), v_scale=x.v_scale.item()), want)


def test_a_scale_made_under_graph_capture_is_not_kept(monkeypatch, inputs):
    """Under capture the fill runs only when the graph replays: that tensor must not serve later calls."""
    from kernels.paged_decode import api

    monkeypatch.setattr(api, "_capturing", lambda device: True)
    device = inputs.query.device
    made = api._scale_tensor(0.25, device, 7)
    assert api._scale_tensor(0.25, device, 7) is not made
    assert (device, 7, 0.25) not in api._SCALES


def test_kernel_names_triton_gluon_or_none(inputs):
    with pytest.raises(ValueError, match=r"kernel: expected one of \(None, 'triton', 'gluon'\), got 'cuda'"):
        _call(inputs, kernel="cuda")
    with pytest.raises(ValueError, match="kernel: 'gluon' cannot run here: the Triton interpreter cannot run"):
        _call(inputs, kernel="gluon")
    assert torch.equal(_call(inputs, kernel="triton").clone(), _call(inputs).clone())


def test_the_cpu_tier_lists_no_gluon_case_and_the_gpu_tier_one_for_each_row():
    from cases.decode_matrix import decode_matrix

    assert not [c for c in decode_matrix("cpu") if c.path == "gluon"]
    gpu = decode_matrix("gpu")
    assert {c.id for c in gpu if c.path == "gluon"} == {c.with_path("gluon").id for c in gpu if c.path == "onepass"}


def test_every_gluon_row_is_one_the_kernel_can_launch():
    """Keys as the MMA's M over the warps (16 a warp), a ring of a power of two of at least 2 buffers: the
    Gluon tables' rows and the candidates bench.gluon_sweep times."""
    from bench.gluon_sweep import CANDIDATES

    rows = [(arch_name, row) for arch_name, table in tuning.GLUON_TABLES.items() for row in table.rows]
    for where, row in rows + [("bench.gluon_sweep", row) for row in CANDIDATES.values()]:
        assert row.keys_m and row.block_n >= 16 * row.num_warps, (where, row)
        assert row.num_stages >= 2 and row.num_stages & (row.num_stages - 1) == 0, (where, row)
        assert row.maxnreg is None and row.waves_per_eu is None, (where, row)


def test_the_gluon_table_takes_four_warps_for_long_walks_of_few_kv_heads():
    """8 x 32768 (64 (sequence, kv head) pairs on 132 CUs): the split makes every program, one wave of 128-key
    steps on four warps; 64 x 8192 / 4096 walks as many keys a CU from 512 pairs: the one-warp ring of 4."""
    common = dict(num_kv_heads=8, num_queries=1, block_size=16, partition_size=None, cu=132, arch="sm90",
                  force_split=None, group=4, head_dim=128, elem=1, kernel="gluon")
    few = decode_plan.plan_decode(num_seqs=8, max_seq_len=32768, window=0, **common)
    many = decode_plan.plan_decode(num_seqs=64, max_seq_len=8192, window=4096, **common)
    assert (few.launch.num_warps, few.launch.block_n, few.launch.num_stages) == (4, 128, 2)
    assert few.split and few.n_part * 8 * 8 <= 3 * 132
    assert (many.launch.num_warps, many.launch.block_n, many.launch.num_stages) == (1, 32, 4)
    assert few.launch.picked and many.launch.picked


def test_the_gluon_table_steps_two_byte_caches_by_the_keys_a_cu_walks():
    """bf16 caches, 4 rows (tuning.GLUON_TABLES' two-byte rows): two warps of 64 keys from 4096 keys a CU
    (64 x 8192 / 4096, 128 x 2048 / 1024 in one pass), two warps of 32 keys from 1024 (8 x 8192 / 4096:
    1986), four warps of 64 keys below (1 x 8192 / 4096: 248)."""
    common = dict(num_kv_heads=8, num_queries=1, block_size=16, partition_size=None, cu=132, arch="sm90",
                  force_split=None, group=4, head_dim=128, elem=2, gluon=True)
    steps = {}
    for seqs, ctx, window in ((64, 8192, 4096), (128, 2048, 1024), (8, 8192, 4096), (1, 8192, 4096)):
        kernel, plan = decode_plan.auto_plan(num_seqs=seqs, max_seq_len=ctx, window=window, **common)
        assert kernel == "gluon" and plan.launch.picked
        steps[seqs] = (plan.launch.num_warps, plan.launch.block_n, plan.split)
    assert steps == {64: (2, 64, True), 128: (2, 64, False), 8: (2, 32, True), 1: (4, 64, True)}


def test_the_gluon_table_runs_sixteen_row_tiles_where_each_cu_walks_enough_keys():
    """GQA 16 (Hq 32 on Hkv 2), fp8, D 128 (tuning.GLUON_TABLES' 16-row row): two warps of 64 keys in
    one 16-row tile at 8 x 8192 / 4096 (248 keys a CU), four tiles of them with MTP 4; the Triton kernel
    at 1 x 8192 / 4096 with MTP 4 (62 keys a CU: below the row's min_work) and at 128 sequences with
    MTP 4 (64-row tiles: above its max_rows)."""
    common = dict(num_kv_heads=2, max_seq_len=8192, window=4096, block_size=16, partition_size=None, cu=132,
                  arch="sm90", force_split=None, group=16, head_dim=128, elem=1, gluon=True)
    chosen = {}
    for seqs, queries in ((8, 1), (8, 4), (1, 4), (128, 4)):
        kernel, plan = decode_plan.auto_plan(num_seqs=seqs, num_queries=queries, **common)
        chosen[seqs, queries] = (kernel, plan.m_pad, plan.row_tiles, plan.launch.num_warps, plan.launch.block_n)
    assert chosen[8, 1] == ("gluon", 16, 1, 2, 64)
    assert chosen[8, 4] == ("gluon", 16, 4, 2, 64)
    assert chosen[1, 4][0] == "triton" and chosen[128, 4][0] == "triton"


def test_a_cache_of_no_blocks_reads_no_key():
    """The kernels clamp a block id to [0, num_blocks), which a cache of no blocks leaves empty (the
    clamp would give -1, a block before the cache): there the launch bounds every length by 0 keys,
    so unchecked lengths (validate=False, the GPU's default) read nothing of the cache. (The Gluon
    launch takes the same arguments, from the same place in the entry.)"""
    case = decode_cases.DecodeCase("e4m3fn", "token", 16, 32, 8, 128, 4096, (590,) * 4, 1, "shuffled", "auto")
    meta = decode_cases.build_meta(case)
    empty = [t[:0] for t in (meta.key_cache, meta.value_cache, meta.k_scale, meta.v_scale)]
    with arch.planned("sm90", 132), launch.recorded() as calls:
        paged_attention_decode(meta.out, meta.query, empty[0], empty[1], meta.block_tables, meta.seq_lens,
                               meta.scale, empty[2], empty[3], case.window)
    assert calls
    for one in calls:
        assert one.args[one.fn.arg_names.index("num_blocks")] == 0
        assert one.args[one.fn.arg_names.index("table_keys")] == 0
