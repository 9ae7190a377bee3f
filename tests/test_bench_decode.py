"""bench.decode --sweep: each swept launch config is the one its timed calls launch."""

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
