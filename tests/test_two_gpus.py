"""Two GPUs: kernels run where their tensors are, scratch is per device, mixed devices are refused.

The multi-GPU checks compare a call on cuda:1, made while cuda:0 is current, bit for bit with
the same call on cuda:0 (same case id, same tensors): a launch on the wrong device, or scratch
shared across devices, reads memory of the other device or faults. They need two GPUs and skip
with that reason elsewhere; the refusal of mixed devices is checked on any machine.
"""

import pytest
import torch

from cases import decode as decode_cases
from cases import kda as kda_cases
from kernels.paged_decode import paged_attention_decode
from verify import adapters
from verify import device as _device

TWO_GPUS = torch.cuda.is_available() and torch.cuda.device_count() >= 2
needs_two = pytest.mark.skipif(not TWO_GPUS, reason="needs two CUDA devices (this machine has fewer)")

DECODE = decode_cases.DecodeCase("e4m3fn", "token", 16, 32, 8, 128, 4096, (5000, 300, 77), 2, "shuffled", "auto")
SMALL = decode_cases.DecodeCase("e4m3fn", "token", 16, 8, 2, 64, 0, (40, 9), 1, "shuffled", "onepass")
KDA_ID = "kda-L200_1_0_129-h2-k64-log-sig-l2-dense-segmented2"


def _decode_inputs(device, path):
    case = decode_cases.DecodeCase(**{**DECODE.__dict__, "path": path,
                                      "cu": 256 if path == "split" else 0})
    return decode_cases.build(case, torch.device(device), 7)


@needs_two
@pytest.mark.gpu
@pytest.mark.parametrize("path", ["onepass", "split", "auto"])
def test_decode_runs_on_the_device_of_its_tensors(path):
    with torch.cuda.device(0):
        first = adapters.decode_call(_decode_inputs("cuda:0", path), path=path).cpu()
        inputs = _decode_inputs("cuda:1", path)
        second = adapters.decode_call(inputs, path=path)
        torch.cuda.synchronize(1)
        assert torch.cuda.current_device() == 0
    assert second.device == torch.device("cuda", 1)
    assert torch.equal(second.cpu(), first)


@needs_two
@pytest.mark.gpu
@pytest.mark.parametrize("path", ["onepass", "split"])
def test_decode_captured_in_a_graph_on_the_second_device(path):
    with torch.cuda.device(0):
        expected = adapters.decode_call(_decode_inputs("cuda:0", path), path=path).cpu()
    inputs = _decode_inputs("cuda:1", path)
    store = {}
    with torch.cuda.device(1):
        adapters.decode_call(inputs, path=path, workspace=store)  # compile and size the scratch first
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            adapters.decode_call(inputs, path=path, workspace=store)
        inputs.out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
    assert torch.equal(inputs.out.cpu(), expected)


@needs_two
@pytest.mark.gpu
def test_a_workspace_of_one_device_is_not_used_on_another():
    store = {}
    with torch.cuda.device(0):
        first = adapters.decode_call(_decode_inputs("cuda:0", "split"), path="split", workspace=store).cpu()
        assert store["acc"].device == torch.device("cuda", 0)
        allocations = store["allocations"]
        second = adapters.decode_call(_decode_inputs("cuda:1", "split"), path="split", workspace=store)
        torch.cuda.synchronize(1)
    assert store["acc"].device == store["ml"].device == torch.device("cuda", 1)
    assert store["allocations"] == allocations + 1
    assert torch.equal(second.cpu(), first)


@needs_two
@pytest.mark.gpu
def test_kda_runs_on_the_device_of_its_tensors():
    case = kda_cases.KdaCase.from_id(KDA_ID)
    with torch.cuda.device(0):
        first, _ = adapters.kda(kda_cases.build(case, torch.device("cuda", 0), 5))
        second, _ = adapters.kda(kda_cases.build(case, torch.device("cuda", 1), 5))
        torch.cuda.synchronize(1)
    for name in first:
        assert second[name].device == torch.device("cuda", 1)
        assert torch.equal(second[name].cpu(), first[name].cpu()), name


def _other_device():
    """A second device for the refusal test: cuda:1 with two GPUs, else the meta device."""
    return torch.device("cuda", 1) if TWO_GPUS else torch.device("meta")


@pytest.mark.parametrize("moved", ["key_cache", "value_cache", "block_tables", "seq_lens", "out"])
def test_tensors_on_two_devices_are_refused_by_name(moved):
    home = torch.device("cuda", 0) if TWO_GPUS else torch.device("cpu")
    inputs = decode_cases.build(SMALL, home, 3)
    args = {"out": inputs.out, "query": inputs.query, "key_cache": inputs.key_cache,
            "value_cache": inputs.value_cache, "block_tables": inputs.block_tables, "seq_lens": inputs.seq_lens}
    args[moved] = args[moved].to(_other_device())
    with pytest.raises(ValueError) as err:
        paged_attention_decode(args["out"], args["query"], args["key_cache"], args["value_cache"],
                               args["block_tables"], args["seq_lens"], inputs.scale, inputs.k_scale,
                               inputs.v_scale, SMALL.window, layout=SMALL.layout, max_seq_len=inputs.max_seq_len)
    message = str(err.value)
    assert moved in message and str(home) in message and str(_other_device()) in message


def test_workers_are_spread_round_robin_over_the_gpus(monkeypatch):
    monkeypatch.setattr(_device, "has_gpu", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert _device.worker_map(5, "w") == "cuda:0 <- w0 w2 w4; cuda:1 <- w1 w3"
