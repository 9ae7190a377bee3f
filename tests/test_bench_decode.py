"""bench.decode --sweep: each swept launch config is the one its timed calls launch; bench.gluon_sweep's shapes."""

import pytest

from bench import decode as bench_decode
from cases.decode import build_meta
from kernels import arch, launch
from kernels.paged_decode import api, tuning


def test_each_swept_config_reaches_the_launch():
    """A signature keeps its plan; the sweep must forget it with each config (it once timed the
    first config under every name)."""
    shape = bench_decode.Shape(8, 8192, 4096)
    call = bench_decode._decode([build_meta(shape.case("auto"))], None)
    swept = bench_decode.SWEEP[:3]
    base = tuning.TABLES["sm90"]
    try:
        with arch.planned("sm90", 132), launch.recorded() as launches:
            for cfg in swept:
                bench_decode._with_config("sm90", base, cfg, call)()
    finally:
        tuning.TABLES["sm90"] = base
        api.clear_plans()
    partition = [one for one in launches if one.fn.__name__ == "decode_partition_kernel"]
    assert [(one.constexprs["BLOCK_N"], one.options["num_warps"], one.constexprs["KEYS_M"]) for one in partition] \
        == [(cfg.block_n, cfg.num_warps, cfg.keys_m) for cfg in swept]


def test_gluon_sweep_selects_shapes_by_words_names_and_cache():
    from bench import gluon_sweep

    bf16 = gluon_sweep.selected("8x8192/w4096", None, "bf16")
    assert bf16 and all(s.cache == "bf16" and s.name.startswith("8x8192/w4096") for s in bf16)
    assert "8x8192/w4096 cache=bf16" in [s.name for s in bf16]
    assert [s.name for s in gluon_sweep.selected("", ["1x8192/w4096", "32x590/w4096"], None)] == [
        "1x8192/w4096", "32x590/w4096"]
    with pytest.raises(SystemExit):
        gluon_sweep.main(["--cache", "fp8"])


def test_floor_launches_the_empty_kernel_as_auto_launches():
    """bench.decode --floor times an empty kernel on the grids and warps auto launches: 8 x 8192 / 4096
    on sm90 (132 CUs) is one launch, a program per (sequence, kv head, partition) of one warp."""
    shape = bench_decode.Shape(8, 8192, 4096)
    call = bench_decode._decode([build_meta(shape.case("auto"))], None)
    with arch.planned("sm90", 132):
        grids = bench_decode.launches_of(call)
    assert grids == [((8, 8, 17), 1)]


def test_baseline_triton_times_the_bases_one_pass_and_split():
    """--baseline-triton: the base's Triton paths are its entry with kernel='triton' and force_split
    False (one-pass) and True (split), beside its auto path (no kernel, no force_split); without
    --baseline the flag is refused by name."""
    shape = bench_decode.Shape(8, 8192, 4096)
    sets = [build_meta(shape.case("auto"))]
    seen = {}

    def entry(*args, force_split=None, **kwargs):
        seen[name] = (force_split, kwargs.get("kernel"))

    fns = bench_decode.baseline_paths(sets, entry, triton=True)
    assert sorted(fns) == ["baseline", "baseline one-pass", "baseline split"]
    for name, fn in fns.items():
        fn()
    assert seen == {"baseline": (None, None), "baseline one-pass": (False, "triton"), "baseline split": (True, "triton")}
    assert list(bench_decode.baseline_paths(sets, entry, triton=False)) == ["baseline"]
    with pytest.raises(SystemExit):
        bench_decode.main(["--baseline-triton"])
