"""Declared matrices: the full product and the covering arrays, and the decode matrix's tiers."""

import math
import os
import subprocess
import sys
from itertools import combinations
from pathlib import Path

import pytest

from cases.decode_matrix import DISTS, FACTORS, READS, SHAPE_FACTORS, decode_matrix, defined, matrix_rows, resolve_length
from cases.matrix import all_pairs, covering, covers, covers_all_pairs, product

ROOT = Path(__file__).resolve().parents[1]

# The size of the seeds' decode matrix: 9 factors of 3,2,2,3,3,4,2,9,3 values.
NINE = {
    "fmt": ("e4m3fn", "e4m3fnuz", "bf16"),
    "scale": ("tensor", "token"),
    "layout": ("shuffled", "plain"),
    "block": (16, 32, 64),
    "group": (1, 4, 8),
    "window": (0, 128, 1024, 4096),
    "mtp": (1, 2),
    "seq_len": (1, 15, 16, 17, 255, 1024, 4095, 4096, 8193),
    "path": ("onepass", "split", "segmented"),
}

SMALL = {
    "fmt": ("fn", "fnuz", "bf16"),
    "scale": ("tensor", "token"),
    "group": (1, 4),
    "layout": ("shuffled",),
}


def bf16_tensor_scale_only(row):
    """A bf16 cache has no per-token scales."""
    return not (row["fmt"] == "bf16" and row["scale"] == "token")


def window_needs_long_context(row):
    """Windows over 128 only with sequences longer than the window, and the split path only past 1024 tokens."""
    if row["window"] > 128 and row["seq_len"] <= row["window"]:
        return False
    return not (row["path"] == "split" and row["seq_len"] <= 1024)


def pairs_of(rows, factors):
    """Every (factor, value, factor, value) pair the rows hold."""
    return {(f, row[f], g, row[g]) for row in rows for f, g in combinations(factors, 2)}


def triples_of(rows, factors):
    """Every (factor, value) triple of three distinct factors the rows hold."""
    return {tuple((f, row[f]) for f in fs) for row in rows for fs in combinations(factors, 3)}


def test_product_is_the_cartesian_product_in_declared_order():
    rows = product(SMALL)
    assert len(rows) == math.prod(len(v) for v in SMALL.values()) == 12
    assert all(list(row) == list(SMALL) for row in rows)
    assert rows[0] == {"fmt": "fn", "scale": "tensor", "group": 1, "layout": "shuffled"}
    assert rows[1] == {"fmt": "fn", "scale": "tensor", "group": 4, "layout": "shuffled"}
    assert rows[-1] == {"fmt": "bf16", "scale": "token", "group": 4, "layout": "shuffled"}
    assert len({tuple(row.values()) for row in rows}) == len(rows)
    assert len(product(NINE)) == 3 * 2 * 2 * 3 * 3 * 4 * 2 * 9 * 3


def test_product_of_nothing_is_one_empty_row():
    assert product({}) == [{}]


def test_all_pairs_covers_every_pair_of_the_nine_factor_matrix():
    rows = all_pairs(NINE)
    assert covers_all_pairs(rows, NINE)
    # Independently of covers_all_pairs: every pair of the full product is in the rows.
    assert pairs_of(rows, NINE) == pairs_of(product(NINE), NINE)
    # At least the product of the two largest factors, and well under 100.
    assert 9 * 4 <= len(rows) < 100
    assert len({tuple(row.values()) for row in rows}) == len(rows)
    assert all(list(row) == list(NINE) for row in rows)


def test_all_pairs_is_much_smaller_than_the_product():
    assert len(all_pairs(NINE)) * 100 < len(product(NINE))


def test_all_pairs_honours_a_constraint_and_covers_the_pairs_it_allows():
    rows = all_pairs(NINE, constraint=window_needs_long_context)
    assert rows and all(window_needs_long_context(row) for row in rows)
    assert covers_all_pairs(rows, NINE, window_needs_long_context)
    allowed = [row for row in product(NINE) if window_needs_long_context(row)]
    assert pairs_of(rows, NINE) == pairs_of(allowed, NINE)
    # The constraint forbids these pairs outright: they must not appear.
    assert ("window", 4096, "seq_len", 15) not in pairs_of(rows, NINE)
    assert ("seq_len", 16, "path", "split") not in pairs_of(rows, NINE)
    assert len(rows) < 100


def test_a_pair_ruled_out_only_through_a_third_factor_is_not_required():
    # a == 0 forces c == 0 and b == 1 forces c == 1, so (a=0, b=1) fits no row,
    # though the constraint never names that pair.
    factors = {"a": (0, 1, 2), "b": (0, 1), "c": (0, 1, 2)}

    def forced(row):
        return (row["a"] != 0 or row["c"] == 0) and (row["b"] != 1 or row["c"] == 1)

    rows = all_pairs(factors, constraint=forced)
    assert all(forced(row) for row in rows)
    assert covers_all_pairs(rows, factors, forced)
    assert ("a", 0, "b", 1) not in pairs_of(rows, factors)
    assert pairs_of(rows, factors) == pairs_of([r for r in product(factors) if forced(r)], factors)


def test_covers_all_pairs_notices_a_missing_pair():
    rows = all_pairs(NINE)
    # Each row the greedy construction adds covers a pair no earlier row did.
    assert not covers_all_pairs(rows[:-1], NINE)
    assert not covers_all_pairs(rows[1:2], NINE)
    assert covers_all_pairs(product(NINE), NINE)


def test_rows_the_constraint_rejects_cover_nothing():
    assert covers_all_pairs(product(SMALL), SMALL, bf16_tensor_scale_only)
    rejected = [row for row in product(SMALL) if not bf16_tensor_scale_only(row)]
    assert rejected and not covers_all_pairs(rejected, SMALL, bf16_tensor_scale_only)
    # Without the constraint, a bf16/token row is required and its absence noticed.
    allowed = [row for row in product(SMALL) if bf16_tensor_scale_only(row)]
    assert covers_all_pairs(allowed, SMALL, bf16_tensor_scale_only)
    assert not covers_all_pairs(allowed, SMALL)


def test_all_pairs_of_a_small_matrix_is_pinned():
    # The CPU tier's case ids come from these rows: a change here changes that tier.
    assert all_pairs(SMALL) == [
        {"fmt": "fn", "scale": "tensor", "group": 1, "layout": "shuffled"},
        {"fmt": "fnuz", "scale": "token", "group": 4, "layout": "shuffled"},
        {"fmt": "bf16", "scale": "tensor", "group": 4, "layout": "shuffled"},
        {"fmt": "bf16", "scale": "token", "group": 1, "layout": "shuffled"},
        {"fmt": "fn", "scale": "token", "group": 4, "layout": "shuffled"},
        {"fmt": "fnuz", "scale": "tensor", "group": 1, "layout": "shuffled"},
    ]


def test_all_pairs_is_deterministic_across_processes_and_hash_seeds():
    script = (
        "from cases.matrix import all_pairs\n"
        "from tests.test_matrix import NINE, window_needs_long_context\n"
        "print(repr(all_pairs(NINE)))\n"
        "print(repr(all_pairs(NINE, constraint=window_needs_long_context)))\n"
    )
    expected = f"{all_pairs(NINE)!r}\n{all_pairs(NINE, constraint=window_needs_long_context)!r}\n"
    assert all_pairs(NINE) == all_pairs(NINE)
    for seed in ("0", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, check=True
        )
        assert done.stdout == expected


def test_factors_of_one_value_are_in_every_row():
    factors = {"a": (1, 2, 3), "only": ("x",), "b": (True, False), "also": (7,)}
    rows = all_pairs(factors)
    assert all(row["only"] == "x" and row["also"] == 7 for row in rows)
    assert covers_all_pairs(rows, factors)
    assert len(rows) == 6


def test_degenerate_matrices():
    assert all_pairs({"a": (1, 2, 3)}) == [{"a": 1}, {"a": 2}, {"a": 3}]
    assert all_pairs({"a": (1, 2, 3)}, constraint=lambda row: row["a"] != 2) == [{"a": 1}, {"a": 3}]
    assert all_pairs({"a": ("x",), "b": ("y",)}) == [{"a": "x", "b": "y"}]
    assert all_pairs({}) == [{}]
    assert all_pairs(SMALL, constraint=lambda row: False) == []
    assert covers_all_pairs([], SMALL, lambda row: False)
    assert not covers_all_pairs([], SMALL)


@pytest.mark.parametrize(
    "factors, error, words",
    [
        ([("a", (1, 2))], TypeError, "factors: expected a dict"),
        ({"a": [1, 2]}, TypeError, "factors['a']: expected a tuple of values, got list"),
        ({"a": ()}, ValueError, "factors['a']: expected at least one value"),
        ({"a": (1, 2, 1)}, ValueError, "factors['a']: expected distinct values, got 1 twice"),
        ({3: (1, 2)}, TypeError, "factors: expected str factor names, got 3"),
    ],
)
def test_bad_declarations_are_named(factors, error, words):
    for build in (product, all_pairs, lambda f: covers_all_pairs([], f)):
        with pytest.raises(error) as caught:
            build(factors)
        assert words in str(caught.value)


def test_bad_constraint_and_rows_are_named():
    with pytest.raises(TypeError, match="constraint: expected a callable"):
        all_pairs(SMALL, constraint="fmt != bf16")
    row = {"fmt": "fn", "scale": "tensor", "group": 2, "layout": "shuffled"}
    with pytest.raises(ValueError, match=r"rows\[0\]\['group'\]: expected one of \(1, 4\), got 2"):
        covers_all_pairs([row], SMALL)
    with pytest.raises(ValueError, match=r"rows\[0\]: expected a dict with keys"):
        covers_all_pairs([{"fmt": "fn"}], SMALL)


# The decode matrix with its value distributions (cases.decode_matrix).


def _factor_value(case, name):
    """The value of matrix factor `name` a decode case holds (its length as a token count)."""
    if name == "heads":
        return (case.hq, case.hkv)
    if name == "length":
        return case.lens[0]
    if name == "cus":
        return case.cu
    return getattr(case, name)


def test_cpu_tier_pairs_every_distribution_with_every_factor_value():
    cases = decode_matrix("cpu")
    seen = {(case.dist, name, _factor_value(case, name)) for case in cases for name in FACTORS if name != "dist"
            and not (name == "cus" and case.path == "auto")}  # auto plans for the device's own CUs
    for dist in FACTORS["dist"]:
        for name, values in FACTORS.items():
            if name in ("dist", "length"):
                continue
            for value in values:
                expected = defined({"cache": value if name == "cache" else "e4m3fn", "dist": dist})
                assert ((dist, name, value) in seen) == expected, (dist, name, value)
        # a named length resolves per row: some case of the distribution has it for its block and window
        for length in FACTORS["length"]:
            assert any(case.dist == dist and case.lens[0] == resolve_length(length, case.block, case.window, "cpu")
                       for case in cases), (dist, length)
    assert not any(case.dist == "subnormal" and case.cache == "bf16" for case in cases)


def test_covering_of_strength_three_holds_every_triple_of_the_nine_factor_matrix():
    rows = covering(NINE, strength=3)
    # Independently of `covers`: every triple of the full product is in the rows.
    assert triples_of(rows, NINE) == triples_of(product(NINE), NINE)
    assert covers(rows, NINE, strength=3)
    assert not covers(all_pairs(NINE), NINE, strength=3)
    assert 9 * 4 * 3 <= len(rows) < len(product(NINE)) // 20


def test_covering_of_strength_three_honours_a_constraint():
    rows = covering(NINE, strength=3, constraint=window_needs_long_context)
    assert all(window_needs_long_context(row) for row in rows)
    allowed = [row for row in product(NINE) if window_needs_long_context(row)]
    assert triples_of(rows, NINE) == triples_of(allowed, NINE)


def test_a_constraint_that_names_what_it_reads_gives_the_same_array():
    reads = ("window", "seq_len", "path")
    for strength in (2, 3):
        plain = covering(NINE, strength=strength, constraint=window_needs_long_context)
        named = covering(NINE, strength=strength, constraint=window_needs_long_context, reads=reads)
        assert named == plain
        assert covers(named, NINE, strength=strength, constraint=window_needs_long_context, reads=reads)
    with pytest.raises(ValueError, match=r"reads: expected a tuple of factor names"):
        covering(NINE, constraint=window_needs_long_context, reads=("window", "nope"))
    with pytest.raises(ValueError, match=r"reads: expected a tuple of factor names"):
        covering(NINE, constraint=window_needs_long_context, reads="window")


def test_covering_strength_is_checked():
    for bad in (0, -1, 2.0, True, "3"):
        with pytest.raises(ValueError, match=r"strength: expected an int >= 1"):
            covering(SMALL, strength=bad)
    assert covering(SMALL, strength=1) == [
        {"fmt": "fn", "scale": "tensor", "group": 1, "layout": "shuffled"},
        {"fmt": "fnuz", "scale": "token", "group": 4, "layout": "shuffled"},
        {"fmt": "bf16", "scale": "tensor", "group": 1, "layout": "shuffled"},
    ]
    full = covering(SMALL, strength=4)
    assert len(full) == 12 and all(row in full for row in product(SMALL))


def test_gpu_tier_holds_every_value_triple_of_the_matrix():
    rows = matrix_rows("gpu")
    assert covers(rows, FACTORS, strength=3, constraint=defined, reads=READS)
    assert all(defined(row) for row in rows)
    assert len(rows) < 400
    # every value of every factor is in both the CPU and the GPU tier
    for tier in ("cpu", "gpu"):
        for name, values in FACTORS.items():
            assert {row[name] for row in matrix_rows(tier)} == set(values), (tier, name)


def test_long_tier_is_the_product_plus_every_distribution():
    rows = matrix_rows("long")
    gauss = [{k: v for k, v in row.items() if k not in ("dist", "cus")} for row in rows if row["dist"] == "gauss"]
    assert gauss == [row for row in product(SHAPE_FACTORS) if defined(dict(row, dist="gauss"))], \
        "the product (less D 1024 in a bf16 cache) comes first, in its order"
    assert {row["cus"] for row in rows if row["dist"] == "gauss"} == {256}
    for dist in DISTS[1:]:
        cut = [{k: v for k, v in row.items() if k != "dist"} for row in rows if row["dist"] == dist]
        allowed = lambda row, dist=dist: defined(dict(row, dist=dist))  # noqa: E731
        # every pair of the other factors, so every (dist, value, value) triple the pair allows
        assert covers_all_pairs(cut, dict(SHAPE_FACTORS, cus=FACTORS["cus"]), allowed,
                                reads=("cache", "d", "heads", "q")), dist
        assert 9 * 4 <= len(cut) < 60

def test_no_tier_asks_peaked_values_of_more_rows_than_channels():
    """`peaked` gives each query row of a kv head its own channel: a row set wider than D cannot be drawn."""
    for tier in ("cpu", "gpu", "long"):
        wide = [case.id for case in decode_matrix(tier) if case.dist == "peaked" and case.hq // case.hkv * case.q > case.d]
        assert not wide, (tier, wide[:3])
