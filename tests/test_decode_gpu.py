"""GPU-only decode checks: bit-exact repeats, 64-bit cache offsets, one-key rows exact to the store."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

from cases import decode as decode_cases
from kernels import arch
from kernels.paged_decode import partition, tuning
from verify import adapters, floors, gate

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("lens, hkv", [((8192, 5000, 77), 8), ((8192,) * 8, 8), ((8192,) * 8, 2)])
@pytest.mark.parametrize("cache", ["e4m3fn", "e4m3fnuz", "bf16"])
@pytest.mark.parametrize("path", ["onepass", "split", "auto", "gluon"])
def test_each_path_repeats_bit_for_bit(device, path, cache, lens, hkv):
    """20 launches, the same bits. Three sequences take sm90's four-warp rows; eight of 8192 keys
    (window 4096: 1986 keys a CU) its one-warp rows, whose split folds 17 partitions in one program;
    with 2 kv heads (GQA 16) the rows of more than 8 query rows a program."""
    case = decode_cases.DecodeCase(cache, "token", 16, 32, hkv, 128, 4096, lens, 1, "shuffled", path)
    if adapters.decode_unavailable(case, device):
        pytest.skip("the Gluon kernel does not run on this device")
    inputs = decode_cases.build(case, device, 5)
    first = adapters.decode_call(inputs, path=path).clone()
    for _ in range(19):
        again = adapters.decode_call(inputs, path=path, out=torch.full_like(inputs.out, float("nan")))
        assert torch.equal(again, first)


def test_cache_offsets_past_2_to_the_31(device):
    """The same sequences, their blocks moved past element 2^31 of a larger cache: same bits."""
    case = decode_cases.DecodeCase("e4m3fn", "tensor", 16, 16, 8, 128, 0, (300, 41), 1, "plain", "onepass")
    inputs = decode_cases.build(case, device, 11)
    near = adapters.decode_call(inputs, path="onepass").clone()
    pool = inputs.key_cache.shape[0]
    per_block = inputs.key_cache[0].numel()
    shift = (2 ** 31) // per_block + 1
    big_k = torch.empty((shift + pool,) + tuple(inputs.key_cache.shape[1:]), dtype=torch.uint8, device=device)
    big_v = torch.empty_like(big_k)
    big_k[shift:] = inputs.key_cache.view(torch.uint8)
    big_v[shift:] = inputs.value_cache.view(torch.uint8)
    moved = decode_cases.DecodeInputs(**{**inputs.__dict__,
                                         "key_cache": big_k.view(inputs.key_cache.dtype),
                                         "value_cache": big_v.view(inputs.value_cache.dtype),
                                         "block_tables": inputs.block_tables + shift,
                                         "out": torch.full_like(inputs.out, float("nan"))})
    far = adapters.decode_call(moved, path="onepass")
    assert torch.equal(far, near)
    judged = floors.decode(inputs)
    assert gate.judge("t", case.id, {"out": (far, judged.ref8)}, judged.floor, judged.multiple).passed


@pytest.mark.parametrize("path", ["onepass", "split", "auto", "gluon"])
def test_a_row_that_sees_one_key_loses_only_the_output_rounding(device, path):
    """Window 1, per-token scales: each output row is v_scale * v of one key. P * v_scale enters
    a bf16 dot as two terms, and an fp16 dot (sm90's fp8 operands) as one, rounded to 11 bits, so
    the error left is the bf16 store (half an ulp) plus, in fp16, at most 2^-11 of the value; one
    bf16 P term alone adds up to 2^-9 of the value, past that somewhere in these rows."""
    case = decode_cases.DecodeCase("e4m3fnuz", "token", 16, 8, 1, 128, 1, (300, 77, 16), 2, "plain", path,
                                   partition=64, cu=256 if path == "split" else 0)
    inputs = decode_cases.build(case, device, 23)
    out = adapters.decode(inputs).double()
    ref8 = floors.decode(inputs).ref8
    half_ulp = torch.ldexp(torch.ones_like(ref8), torch.frexp(ref8).exponent - 9)  # bf16 keeps 8 bits
    fp16 = tuning.tuning(arch.arch_name(device)).fp8_dot == "fp16"
    p_round = ref8.abs() * 2.0 ** -11 if fp16 else 0
    assert bool(((out - ref8).abs() <= half_ulp * 1.01 + p_round).all())


@triton.jit
def _fnuz_fields(codes_ptr, out_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(out_ptr + i, partition.fp8_bits_to_f16(tl.load(codes_ptr + i), arch.FP8_PTX_E4M3FNUZ))


def test_fnuz_in_ptx_gives_the_fields_of_every_code_in_every_byte(device):
    """The PTX decoder takes four codes a register: each code, in each of the four bytes, must come
    back as fp16 value * 2^-7 bit for bit (subnormals, +-240, zero), and 0x80 as NaN."""
    if not torch.cuda.get_device_name(device).startswith("NVIDIA"):
        pytest.skip("the PTX decoder is NVIDIA's")
    codes = torch.cat([(torch.arange(256) + turn) % 256 for turn in range(4)]).to(torch.uint8).to(device)
    out = torch.empty(codes.shape, dtype=torch.float16, device=device)
    _fnuz_fields[(1,)](codes, out, N=codes.numel())
    want = (codes.view(torch.float8_e4m3fnuz).float() * 2.0 ** -7).half()
    nan = codes == 0x80
    assert bool(out[nan].isnan().all())
    assert torch.equal(out[~nan].view(torch.int16), want[~nan].view(torch.int16))


HOSTILE = """
import torch
from cases import decode as decode_cases
from verify import adapters
case = decode_cases.DecodeCase("e4m3fn", "token", 16, 8, 2, 64, 0, (300, 41, 7), 1, "shuffled", "{path}",
                               cu=256 if "{path}" == "split" else 0)
inputs = decode_cases.build(case, torch.device("cuda"), 3)
pool = inputs.key_cache.shape[0]
inputs.block_tables[0, :3] = torch.tensor([pool, 1 << 30, -7], dtype=inputs.block_tables.dtype)
inputs.block_tables[1, -1] = -(1 << 31)
inputs.seq_lens[1] = 1 << 30   # past the table row and max_seq_len
inputs.seq_lens[2] = -5
from kernels.paged_decode import paged_attention_decode
paged_attention_decode(inputs.out, inputs.query, inputs.key_cache, inputs.value_cache, inputs.block_tables,
                       inputs.seq_lens, inputs.scale, inputs.k_scale, inputs.v_scale, 0, layout="shuffled",
                       max_seq_len=inputs.max_seq_len, force_split={split}, validate=False, kernel="{kernel}")
torch.cuda.synchronize()
print("no fault")
"""


@pytest.mark.parametrize("path", ["onepass", "split", "gluon"])
def test_hostile_block_ids_and_lengths_never_fault(path):
    """Block ids past the pool and negative, lengths past the table and negative, unchecked
    (validate=False): the kernels clamp every index they read, so the call may compute garbage
    but never touches memory outside its tensors (a fault would kill the child process)."""
    script = HOSTILE.format(path=path, split={"onepass": False, "split": True}.get(path),
                            kernel=adapters.KERNEL[path])
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0 and "no fault" in done.stdout, done.stderr[-2000:]


def test_the_gluon_path_replays_in_a_cuda_graph(device):
    """A Gluon call (a split: 8 x 8192 keys, window 4096) captured once, replayed on new inputs copied
    into the captured ones: the same bits as an eager call on those inputs."""
    case = decode_cases.DecodeCase("e4m3fn", "token", 16, 32, 8, 128, 4096, (8192,) * 8, 1, "shuffled", "gluon")
    if adapters.decode_unavailable(case, device):
        pytest.skip("the Gluon kernel does not run on this device")
    inputs = decode_cases.build(case, device, 21)
    fresh = decode_cases.build(case, device, 22)
    store = {}
    adapters.decode_call(inputs, path="gluon", workspace=store)  # compiled and planned outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        adapters.decode_call(inputs, path="gluon", workspace=store)
    for name in ("query", "key_cache", "value_cache", "block_tables", "seq_lens", "k_scale", "v_scale"):
        getattr(inputs, name).copy_(getattr(fresh, name))
    graph.replay()
    torch.cuda.synchronize()
    eager = adapters.decode_call(fresh, path="gluon", out=torch.full_like(fresh.out, float("nan")))
    assert torch.equal(inputs.out, eager)
