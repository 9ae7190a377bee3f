"""Every constant of the gate, each with its reason. Nothing else decides PASS.

An output is judged against ref8, the float64 reference on exactly the values
the kernel sees. Its error must stay under

    bound = multiple * floor + OUT_EPS[out dtype] * max|ref8|

fp8 paths (floor = max|ref - ref8|, what fp8 quantization alone costs):
  a kernel that keeps fp8 values exact in bf16/fp16 dot operands and applies
  scales in fp32 loses only the rounding of P to the dot dtype and of the
  output, far below a tenth of the floor (the seed's kernels measured about a
  tenth against a cruder reference). Each known bug of the seeds measured 2x
  to 25x the floor, or NaN. A quarter of the floor sits between the two with
  margin on both sides. Dot operands allowed: bf16/fp16 for q, k, v and P
  (fp8 values are exact there), fp32 accumulation, fp32 scores and scales;
  tf32 dots or k*scale rounded to bf16 are not assumed and may eat the margin.
  One P term in bf16 is not always enough: where a row sees a single key
  with a per-token scale, P * v_scale rounded to bf16 errs by up to 2^-9 of
  the output, which on an H200 took 2 of 19,665 sampled cases past a quarter
  of a small floor (1.04x). P split in two bf16 terms brought them to 0.24x.
  fp16 operands (sm90's fp8 path) keep 11 bits, so one P term errs by at
  most 2^-11 of itself, an eighth of bf16's: with one term there, the H200's
  GPU tier (1391 cases) kept the worst err/floor of the fp8 decode cases
  without subnormal outputs at 1.721, 1.590 and 1.545 (one-pass, split,
  auto; flat floors, where the output's rounding bounds it), and their median
  moved from 0.0631 to 0.0648 (one-pass; split 0.0576 and auto 0.0589
  unchanged). No constant moved.

Unquantized paths (bf16 cache, KDA; floor = error against float64 of a
same-precision torch implementation whose matrix-product operands take the
dtype the kernel reports for its own dots on the device: bf16 compiled, fp32
under the Triton interpreter; see verify.floors): the FlashAttention rule, at
most a small multiple of what a straightforward implementation at the
kernel's precision loses. KDA runs a recurrence whose bf16 rounding compounds
over chunks, and the kernels legitimately differ from the torch chunking in
summation order, so it gets a slightly larger multiple, and a relative-RMS
cap that a wrong recurrence (wrong state, wrong decay) cannot meet. On
ill-conditioned inputs (correlated keys, rho 0.9 and 1, with beta near 1)
the (I - L)^-1 solve amplifies bf16 rounding until the bf16-operand torch
implementation itself sits above that cap (RMS ratio 0.0074 and 0.012 at
T=130, K=64), so the cap rises to a multiple of the floor's own RMS ratio
where that is larger. The kernels measured 0.80 and 0.90 of the floor's RMS
ratio there; the recurrence mutants land hundreds of floors away.

Under the interpreter (fp32 dots, fp32-operand floors) no constant changed;
measured on the CPU tier (74 KDA, 34 bf16-cache decode cases), all PASS:
  bf16 outputs (decode out, KDA o): the floor is then little more than the
  rounding of the store, half an ulp at the largest element, and the
  interpreter's truncating store loses up to a whole one: decode measured up
  to 4.4 floors, KDA o up to 3.9, inside the multiple plus the whole ulp that
  INTERPRETER_STORE_ULPS grants (at most 0.52 of the bound). The CPU tier cut
  without its costliest rows (cases.decode_matrix.affordable) and the keys-as-M
  tiles: decode up to 4.9 floors, 0.50 of the bound.
  fp32 KDA states: floors of 1e-8 to 4e-3 (bigvalues), 19 to 64,000 times
  below the bf16-operand ones; the kernel measured 0 to 4.4 floors, at most
  0.69 of the bound. The largest (log gate, sigmoid beta, L2 norm) comes from
  transforms the kernel takes in fp32 and the floor's implementation from
  float64; the two fp32 ulps of OUT_EPS hold it.
  An in-kernel softplus written log(1 + exp(-|x|)) lost up to 1e-4 of small
  gates to cancellation and a state 10 floors away; log1p-exact, 1.0 floor.
"""

FP8_FLOOR_FRACTION = 0.25
SAME_PRECISION_MULTIPLE = 2.0
KDA_FLOOR_MULTIPLE = 4.0
KDA_RMS_RATIO_MAX = 5e-3
KDA_RMS_FLOOR_MULTIPLE = 1.5


def kda_rms_cap(floor_rms_ratio: float) -> float:
    """The RMS-ratio cap of a KDA output whose same-precision implementation has `floor_rms_ratio`."""
    return max(KDA_RMS_RATIO_MAX, KDA_RMS_FLOOR_MULTIPLE * floor_rms_ratio)

# Half an ulp of the output dtype at the largest reference magnitude: the
# rounding of the final store alone.
# The Triton interpreter (3.6 to 3.9) converts fp32 to bf16 by truncation, not
# by rounding to nearest, so there the store may lose a whole ulp.
INTERPRETER_STORE_ULPS = 2.0
OUT_EPS = {
    "bfloat16": 2.0 ** -8,
    "float16": 2.0 ** -11,
    "float32": 2.0 ** -23,
}
