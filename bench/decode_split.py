"""Split-K against one-pass paged decode on a GPU: paired, graph-replayed, median.

    python -m bench.decode_split [--json PATH]

For each shape the same inputs run through the one-pass kernel (A) and the
forced split-K kernel (B); the table gives both per-call times, the median
B/A ratio with its spread over rounds, and what the auto path chose there.
Also prints the device, torch and triton versions and the command, so every
figure travels with how it was made.
"""

import argparse
import json
import sys

import torch
import triton

from bench.timing import paired
from cases.decode import DecodeCase, build
from kernels import arch
from kernels.paged_decode import paged_attention_decode
from kernels.paged_decode import plan as decode_plan

# (num_seqs, context, window): short context stays one-pass; long context is where split-K pays.
SHAPES = [
    (32, 590, 4096),
    (1, 8192, 4096),
    (8, 6700, 4096),
    (8, 8192, 4096),
    (16, 8192, 4096),
    (32, 2048, 1024),
    (4, 32768, 0),
]


def _call(inputs, force_split):
    case = inputs.case
    out = torch.empty_like(inputs.out)

    def fn():
        paged_attention_decode(out, inputs.query, inputs.key_cache, inputs.value_cache, inputs.block_tables,
                               inputs.seq_lens, inputs.scale, inputs.k_scale, inputs.v_scale, case.window,
                               layout=case.layout, max_seq_len=inputs.max_seq_len, force_split=force_split)
    return fn


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", default=None)
    p.add_argument("--rounds", type=int, default=20)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench: needs a GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    head = (f"device {torch.cuda.get_device_name(device)} ({arch.arch_name(device)}, {arch.cu_count(device)} CUs), "
            f"torch {torch.__version__}, triton {triton.__version__}\ncommand: {' '.join(sys.argv)}\n"
            "fp8 e4m3fn per-token, Hq 32 / Hkv 8, D 128, block 16, shuffled; A = one-pass, B = split-K forced")
    print(head)
    print(f"{'seqs':>5} {'ctx':>6} {'win':>5} {'one-pass us':>12} {'split us':>9} {'split/one':>10} "
          f"{'spread':>13} {'auto':>10}")
    rows = []
    for seqs, ctx, window in SHAPES:
        case = DecodeCase("e4m3fn", "token", 16, 32, 8, 128, window, (ctx,) * seqs, 1, "shuffled", "auto")
        inputs = build(case, device, 1234)
        result = paired(_call(inputs, False), _call(inputs, True), rounds=args.rounds)
        auto = decode_plan.plan_decode(num_seqs=seqs, num_kv_heads=8, max_seq_len=ctx, num_queries=1,
                                       window=window, block_size=16, partition_size=256,
                                       cu=arch.cu_count(device), arch=arch.arch_name(device), force_split=None)
        chose = f"split x{auto.n_part}" if auto.split else "one-pass"
        print(f"{seqs:>5} {ctx:>6} {window:>5} {result.a_us:>12.1f} {result.b_us:>9.1f} {result.ratio:>10.3f} "
              f"{result.spread[0]:>6.3f}-{result.spread[1]:<6.3f} {chose:>10}", flush=True)
        rows.append(dict(seqs=seqs, ctx=ctx, window=window, onepass_us=result.a_us, split_us=result.b_us,
                         ratio=result.ratio, spread=result.spread, auto=chose))
        del inputs
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"header": head, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
