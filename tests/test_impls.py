"""Judging implementations other than ours (`--impl`): a user's function, its capabilities, the torch baseline."""

import json

import pytest

from verify import cli, impls, runner

# Small decode cases of the CPU tier (their auto ones, and the onepass/split twins another implementation
# skips); a bf16 one among them shows one head off by 1% (1.4x its bound).
WORDS = "decode L0_1"

WRAPPER = '''
from kernels.paged_decode import paged_attention_decode


def decode(out, query, key_cache, value_cache, block_tables, seq_lens, scale, k_scale, v_scale,
           sliding_window, *, layout, max_seq_len):
    paged_attention_decode(out, query, key_cache, value_cache, block_tables, seq_lens, scale, k_scale,
                           v_scale, sliding_window, layout=layout, max_seq_len=max_seq_len)
    {tweak}
{caps}
'''


def _module(tmp_path, tweak="", caps=""):
    path = tmp_path / "mine.py"
    path.write_text(WRAPPER.format(tweak=tweak or "return out", caps=caps))
    return f"decode={path}:decode"


def _run(tmp_path, *extra):
    report = tmp_path / "r.json"
    rc = cli.main(["run", "--tier", "cpu", "-k", WORDS, "--json", str(report), *extra])
    return rc, json.loads(report.read_text())


def test_a_users_wrapper_of_our_kernel_passes_on_its_cases(tmp_path, capsys):
    rc, rep = _run(tmp_path, "--impl", _module(tmp_path))
    judged = [v for v in rep["verdicts"] if not v["skipped"]]
    skipped = [v for v in rep["verdicts"] if v["skipped"]]
    assert rc == 0 and judged and all(v["passed"] for v in judged)
    assert all(v["case_id"].endswith("-auto") for v in judged)
    assert skipped and all(not v["passed"] and v["reasons"][0].startswith("skipped: ") for v in skipped)
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"ALL_PASS ({len(judged)} cases, {len(skipped)} skipped)"
    assert rep["meta"]["impl"]["decode"].startswith(f"decode={tmp_path / 'mine.py'}:decode")
    assert sum(s["skipped"] for s in rep["summary"]) == len(skipped)


def test_one_head_off_by_one_percent_fails(tmp_path, capsys):
    rc, rep = _run(tmp_path, "--impl", _module(tmp_path, tweak="out[..., 0, :] *= 1.01"))
    assert rc == 1
    assert any(not v["passed"] and not v["skipped"] for v in rep["verdicts"])


def test_declared_capabilities_skip_and_count(tmp_path, capsys):
    caps = 'decode.quantfloor_caps = {"layout": ("plain",)}'
    rc, rep = _run(tmp_path, "--impl", _module(tmp_path, caps=caps))
    judged = [v["case_id"] for v in rep["verdicts"] if not v["skipped"]]
    shuffled = [v for v in rep["verdicts"] if "-shuffled-" in v["case_id"]]
    assert rc == 0 and judged and all("-plain-" in i for i in judged)
    assert shuffled and all(v["skipped"] and "layout" in v["reasons"][0] for v in shuffled)


def test_the_torch_baseline_passes_the_gate(tmp_path, capsys):
    report = tmp_path / "t.json"
    assert cli.main(["run", "--tier", "cpu", "-k", "q4 auto tensor", "--impl", "torch", "--json", str(report)]) == 0
    verdicts = json.loads(report.read_text())["verdicts"]
    assert sum(not v["skipped"] for v in verdicts) >= 4


@pytest.mark.parametrize("spec, fragment", [
    ("fla", "expected triton, torch, fla-chunk, fla-recurrent, decode=MODULE:FUNCTION or kda=MODULE:FUNCTION"),
    ("decode=no_such_module_here:fn", "No module named"),
    ("decode=verify.impls:no_such_function", "has no function"),
])
def test_a_bad_spec_is_refused_naming_impl(spec, fragment, capsys):
    assert cli.main(["run", "--tier", "cpu", "-k", WORDS, "--impl", spec]) == 2
    err = capsys.readouterr().err
    assert "--impl" in err or "No module named" in err
    assert fragment in err


def test_one_implementation_per_operator():
    with pytest.raises(ValueError, match="one implementation per operator"):
        impls.select(["torch", "decode=verify.decode_op:torch_decode"])
    assert runner.implementations()["decode"].name == "triton"


KDA_WRAPPER = '''
from kernels.kda import flash_kda_fwd


def kda(q, k, v, g, beta, **kwargs):
    o, final = flash_kda_fwd(q, k, v, g, beta, **kwargs)
    {tweak}
    return o, final
'''


@pytest.mark.parametrize("tweak, rc", [("", 0), ("o = o * 1.01", 1)])
def test_a_users_kda_is_judged_on_its_cases(tmp_path, capsys, tweak, rc):
    path = tmp_path / "mykda.py"
    path.write_text(KDA_WRAPPER.format(tweak=tweak or "pass"))
    report = tmp_path / "k.json"
    assert cli.main(["run", "--tier", "cpu", "-k", "kda t65", "--impl", f"kda={path}:kda",
                     "--json", str(report)]) == rc
    verdicts = json.loads(report.read_text())["verdicts"]
    judged = [v for v in verdicts if not v["skipped"]]
    assert judged and all(v["case_id"].endswith("-auto") for v in judged)
    assert all("-paged-" not in v["case_id"] and "-vfirst-" not in v["case_id"] for v in judged)
    assert any(v["skipped"] for v in verdicts)


def test_fla_specs_are_refused_naming_the_package_when_it_is_missing(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_fla(name, *args, **kwargs):
        if name == "fla" or name.startswith("fla."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_fla)
    for spec in ("fla-chunk", "fla-recurrent"):
        with pytest.raises(ValueError, match="needs fla-core"):
            impls.parse(spec)


def test_fla_options_follow_our_gate_modes():
    from verify import fla_kda
    assert fla_kda._options("log", None, None, None, False, True, None) == dict(
        use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False, use_qk_l2norm_in_kernel=True, cu_seqlens=None)
    lb = fla_kda._options("lower_bound", "A", "dt", -5.0, True, False, None)
    assert lb["use_gate_in_kernel"] and lb["lower_bound"] == -5.0 and lb["A_log"] == "A" and lb["dt_bias"] == "dt"
    assert lb["use_beta_sigmoid_in_kernel"]


def test_fla_recurrent_is_judged_on_the_auto_kda_cases(tmp_path, capsys):
    """fla-core's recurrent kernel runs under the interpreter too (its chunk kernel needs a GPU)."""
    pytest.importorskip("fla.ops.kda")
    report = tmp_path / "r.json"
    rc = cli.main(["run", "--tier", "cpu", "-k", "kda-b1-t65-h1-k64-log-dense-auto", "--impl", "fla-recurrent",
                   "--json", str(report)])
    rep = json.loads(report.read_text())
    assert rc == 0 and [v["passed"] for v in rep["verdicts"]] == [True]
    assert rep["meta"]["impl"]["kda"].startswith("fla-recurrent")
