"""Case ids are stable and parse back; the same id builds the same tensors; builders are adversarial."""

import hashlib
import platform
from dataclasses import replace

import pytest
import torch

from cases import decode as decode_cases
from cases import kda as kda_cases
from cases import regressions
from cases.decode_matrix import FACTORS, decode_matrix, resolve_length
from verify.device import seed_of


def test_every_decode_id_parses_back_to_its_case():
    for tier in ("cpu", "gpu"):
        for case in decode_matrix(tier)[:: 1 if tier == "cpu" else 997]:
            assert decode_cases.DecodeCase.from_id(case.id) == case
    for reg in regressions.ALL:
        if reg.case is not None:
            assert type(reg.case).from_id(reg.case.id) == reg.case


@pytest.mark.parametrize("dist", decode_cases.DISTS)
def test_every_distribution_round_trips_through_its_id(dist):
    base = decode_cases.DecodeCase("e4m3fn", "token", 16, 8, 1, 64, 0, (5, 3), 1, "shuffled", "split", dist=dist)
    for case in (base, replace(base, partition=64), replace(base, cu=256, tag="edge"),
                 replace(base, partition=32, cu=7, tag="x1")):
        assert decode_cases.DecodeCase.from_id(case.id) == case
        # the distribution sits right after the layout; gauss, the default, is not written
        assert ("-shuffled-" + dist + "-" in case.id) == (dist != "gauss")
    assert base.id == ("decode-e4m3fn-token-b16-hq8-hkv1-d64-w0-L5_3-q1-shuffled-split" if dist == "gauss"
                       else f"decode-e4m3fn-token-b16-hq8-hkv1-d64-w0-L5_3-q1-shuffled-{dist}-split")


def test_a_tag_or_dist_the_id_could_not_tell_apart_is_refused():
    with pytest.raises(ValueError, match="a tag that is not one"):
        decode_cases.DecodeCase("bf16", "tensor", 16, 8, 1, 64, 0, (5, 3), 1, "plain", "onepass", tag="flat")
    with pytest.raises(ValueError, match="expected dist in"):
        decode_cases.DecodeCase("bf16", "tensor", 16, 8, 1, 64, 0, (5, 3), 1, "plain", "onepass", dist="uniform")
    # a distribution's name in the tag's place (after -p) parses as a tag, which is refused
    with pytest.raises(ValueError, match="a tag that is not one"):
        decode_cases.DecodeCase.from_id("decode-bf16-tensor-b16-hq8-hkv1-d64-w0-L5_3-q1-plain-p64-flat-onepass")


# Digests of gauss cases' tensors, taken before value distributions existed: the default
# distribution must draw exactly what it always drew. torch's CPU normal draws and exp round their
# last bits by the code they run, which differs by torch's CPU capability (scalar DEFAULT, or the
# AVX2 / AVX512 vector code, which draw alike) and, on x86_64, by the CPU's vendor: the first
# digests, taken where the test was written, are drawn again by AMD x86_64 machines under AVX2 and
# AVX512, and not by another x86_64 machine under any capability, whose own are kept for x86_64
# CPUs of any other vendor. A CPU with none recorded skips the test, naming the digests it drew.
_CASES = ("decode-e4m3fnuz-token-b16-hq8-hkv2-d64-w5-L17_1-q2-shuffled-onepass",
          "decode-bf16-token-b32-hq32-hkv8-d128-w0-L70_24-q1-plain-cu256-split",
          "decode-e4m3fn-tensor-b16-hq8-hkv1-d64-w1024-L1100_367-q4-shuffled-auto")
_AMD = dict(zip(_CASES, ("bb79f1e9b365d60e", "f74e10efb41e407f", "3929fbeca8bba183")))
_OTHER = dict(zip(_CASES, ("92960ed2ee35fd6d", "c29768267b8be721", "45706f2aa717f6c6")))
GAUSS_DIGESTS = {
    ("x86_64", "AuthenticAMD", "AVX512"): _AMD,
    ("x86_64", "AuthenticAMD", "AVX2"): _AMD,
    ("x86_64", "AuthenticAMD", "DEFAULT"): dict(zip(_CASES, ("edb6d544fc36dabc", "d94e99a277d44984",
                                                            "8a106b51220cbbe0"))),
    ("x86_64", None, "AVX512"): _OTHER,
    ("x86_64", None, "AVX2"): _OTHER,
    ("x86_64", None, "DEFAULT"): dict(zip(_CASES, ("0f0e2ba26f46d8bb", "2eefc33990180b8c", "bb9cf00fd3993cb6"))),
}


def _vendor() -> str | None:
    """The CPU's vendor id (Linux), None where it is not known."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _digests_here() -> dict | None:
    machine, capability = platform.machine(), torch.backends.cpu.get_cpu_capability()
    return GAUSS_DIGESTS.get((machine, _vendor(), capability), GAUSS_DIGESTS.get((machine, None, capability)))


def _digest(inputs) -> str:
    h = hashlib.sha256()
    for t in (inputs.query, inputs.query_original, inputs.original_k, inputs.original_v, inputs.key_cache,
              inputs.value_cache, inputs.k_scale, inputs.v_scale, inputs.block_tables):
        t = t.detach().cpu().contiguous()
        h.update(t.view(torch.int16 if t.dtype == torch.bfloat16 else torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


@pytest.mark.parametrize("case_id", _CASES)
def test_gauss_cases_build_the_tensors_they_always_built(case_id):
    case = decode_cases.DecodeCase.from_id(case_id)
    assert case.dist == "gauss"
    inputs = decode_cases.build(case, torch.device("cpu"), seed_of(case_id))
    digests = _digests_here()
    if digests is None:
        pytest.skip(f"no digests recorded for {platform.machine()} {torch.backends.cpu.get_cpu_capability()}: "
                    f"this CPU draws {_digest(inputs)}")
    assert _digest(inputs) == digests[case_id]


def test_every_kda_id_parses_back_to_its_case():
    for case in kda_cases.kda_cases("gpu"):
        assert kda_cases.KdaCase.from_id(case.id) == case


@pytest.mark.parametrize("tier", ["gpu", "long"])
def test_every_tier_lists_each_case_once(tier):
    ids = [c.id for c in decode_matrix(tier)] + [c.id for c in kda_cases.kda_cases(tier)]
    assert len(ids) == len(set(ids))


def test_ids_are_unique_and_name_operator_and_path():
    ids = [c.id for c in decode_matrix("cpu")] + [c.id for c in kda_cases.kda_cases("cpu")]
    assert len(ids) == len(set(ids))
    for case_id in ids:
        assert case_id.startswith(("decode-", "kda-"))
        assert case_id.rsplit("-", 1)[1] in ("onepass", "split", "auto", "unsegmented") \
            or case_id.rsplit("-", 1)[1].startswith("segmented")


def test_bad_ids_are_refused():
    with pytest.raises(ValueError, match="case id"):
        decode_cases.DecodeCase.from_id("decode-e4m3fn-nonsense")
    with pytest.raises(ValueError, match="case id"):
        kda_cases.KdaCase.from_id("kda-b1-t1")


def test_named_lengths_resolve_around_block_and_window():
    assert resolve_length("bs-1", 16, 1024, "cpu") == 15
    assert resolve_length("w+1", 16, 1024, "cpu") == 1025
    assert resolve_length("w-1", 32, 1, "cpu") == 0
    assert resolve_length("long", 16, 4096, "gpu") == 8193
    assert set(FACTORS["length"]) >= {"0", "1", "long"}


def test_same_id_same_tensors_and_the_poison_is_there(device):
    case = decode_cases.DecodeCase("e4m3fnuz", "token", 16, 8, 2, 64, 5, (17, 1), 2, "shuffled", "onepass")
    a = decode_cases.build(case, device, seed_of(case.id))
    b = decode_cases.build(case, device, seed_of(case.id))
    assert torch.equal(a.key_cache.view(torch.uint8), b.key_cache.view(torch.uint8))
    assert torch.equal(a.query, b.query)
    assert a.out.isnan().all()
    codes = a.value_cache.view(torch.uint8)
    assert (codes == 0x80).any(), "unused slots carry the e4m3fnuz NaN byte"
    assert not torch.isfinite(a.k_scale).all(), "per-token scales of unused slots are inf or NaN"
    assert a.v_scale.stride() != a.k_scale.stride(), "V scales have their own strides"
    assert a.query.float().lt(0).any() and a.query.float().gt(0).any()
    assert bool(a.empty_rows[1, 0]) and not bool(a.empty_rows[0].any())


def test_block_tables_draw_from_a_pool_twice_the_need(device):
    case = decode_cases.DecodeCase("bf16", "tensor", 16, 8, 1, 64, 0, (100, 40), 1, "plain", "onepass")
    inputs = decode_cases.build(case, device, 3)
    needed = 7 + 3
    assert inputs.key_cache.shape[0] >= 2 * needed
    used = torch.cat([inputs.block_tables[0, :7], inputs.block_tables[1, :3]])
    assert used.unique().numel() == needed
