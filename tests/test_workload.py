"""Cases from a user's own shapes (`--workload`), and the recorder that writes such a file."""

import json
import re

import pytest

from cases.decode import DecodeCase, build
from kernels.paged_decode import paged_attention_decode
from verify import cli, workload

LINES = [
    {"operator": "decode", "cache": "e4m3fn", "hq": 8, "hkv": 2, "d": 64, "block": 16, "window": 32,
     "lens": [40, 9], "q": 2},
    {"operator": "decode", "cache": "bf16", "scales": "tensor", "hq": 4, "hkv": 4, "d": 64, "block": 32,
     "lens": [33], "layout": "plain", "path": "split"},
    {"operator": "kda", "h": 1, "dim": 64, "t": 70},
]


def _write(tmp_path, lines, extra=""):
    path = tmp_path / "shapes.jsonl"
    path.write_text("# a user's shapes\n" + "\n".join(json.dumps(x) for x in lines) + "\n" + extra)
    return path


def test_each_line_is_a_case_with_its_stable_id(tmp_path):
    cases = workload.load(_write(tmp_path, LINES))
    assert [c.id for c in cases] == [
        "decode-e4m3fn-token-b16-hq8-hkv2-d64-w32-L40_9-q2-shuffled-auto",
        "decode-bf16-tensor-b32-hq4-hkv4-d64-w0-L33-q1-plain-split",
        "kda-b1-t70-h1-k64-log-none-auto",
    ]
    assert all(type(c).from_id(c.id) == c for c in cases)


@pytest.mark.parametrize("line, fragment", [
    ({"operator": "decode", "cache": "e4m3fn", "hq": 8, "hkv": 2, "d": 64, "lens": [4]}, "missing block"),
    ({"operator": "decode", "cache": "e4m3fn", "hq": 8, "hkv": 2, "d": 64, "block": 16, "lens": [4],
      "heads": 3}, "unknown decode field(s) heads"),
    ({"operator": "attention"}, "operator: expected 'decode' or 'kda'"),
    ({"operator": "kda", "h": 1, "dim": 64, "t": 70, "gate": "relu"}, "unknown gate"),
])
def test_a_bad_line_names_its_file_line_and_field(tmp_path, line, fragment):
    path = _write(tmp_path, [LINES[0], line])
    with pytest.raises(ValueError, match=f"shapes.jsonl:3: .*{re.escape(fragment)}"):
        workload.load(path)


def test_run_judges_a_workload(tmp_path, capsys):
    path = _write(tmp_path, LINES[:2])
    assert cli.main(["run", "--workload", str(path), "--json", str(tmp_path / "r.json")]) == 0
    verdicts = json.loads((tmp_path / "r.json").read_text())["verdicts"]
    assert [v["case_id"] for v in verdicts] == [c.id for c in workload.load(path)]
    assert cli.main(["run", "--workload", str(_write(tmp_path, [{"operator": "x"}]))]) == 2
    assert "operator: expected" in capsys.readouterr().err


def test_the_recorder_writes_the_shapes_of_each_call(tmp_path, device):
    case = DecodeCase("e4m3fn", "token", 16, 8, 2, 64, 32, (40, 9), 2, "shuffled", "auto")
    inputs = build(case, device, 7)
    path = tmp_path / "recorded.jsonl"
    decode = workload.recorder(paged_attention_decode, path)
    for _ in range(2):
        decode(inputs.out, inputs.query, inputs.key_cache, inputs.value_cache, inputs.block_tables,
               inputs.seq_lens, inputs.scale, inputs.k_scale, inputs.v_scale, case.window,
               layout=case.layout, max_seq_len=inputs.max_seq_len)
    assert [c.id for c in workload.load(path)] == [case.id, case.id]
    assert inputs.out.isfinite().all()


def test_the_kda_recorder_writes_cases_that_rebuild_the_call(tmp_path, device):
    """A recorded KDA call comes back as the case of the same shapes and options."""
    from cases import kda as kda_cases
    from kernels.kda import flash_kda_fwd
    case = kda_cases.KdaCase.from_id("kda-L70_0_33-h2-k64-softplus-sig-l2-dense-auto")
    inputs = kda_cases.build(case, device, 3)
    path = tmp_path / "kda.jsonl"
    forward = workload.recorder(flash_kda_fwd, path, "kda")
    o, final = forward(inputs.q, inputs.k, inputs.v, inputs.g, inputs.beta, **inputs.kwargs)
    (again,) = workload.load(path)
    assert again.id == case.id
    assert o.isfinite().all() and final is not None


def test_the_recorder_refuses_an_unknown_operator():
    with pytest.raises(ValueError, match="operator: expected 'decode' or 'kda', got 'mla'"):
        workload.recorder(paged_attention_decode, "x.jsonl", "mla")
