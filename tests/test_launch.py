"""kernels.launch.Bound off the interpreter, with a stand-in for a JIT kernel (no GPU needed)."""

import torch

from kernels import arch, launch


class _Kernel:
    """Stands for a triton.jit function: fn[grid](*args, **constexprs) compiles and launches."""

    arg_names = ["x", "n", "C"]

    def __init__(self):
        self.events = []

    def __getitem__(self, grid):
        def jit(*args, **kwargs):
            self.events.append(("jit", args))
            return _Compiled(self)
        return jit


class _Compiled:
    def __init__(self, kernel):
        self.kernel = kernel

    def __getitem__(self, grid):
        def runner(*args, stream=None):
            self.kernel.events.append(("runner", args, stream))
        return runner


def _bound(monkeypatch):
    monkeypatch.setattr(arch, "interpreting", lambda: False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    kernel = _Kernel()
    return kernel, launch.Bound(kernel, (1,), (), {"C": 3}, {"num_warps": 1})


def test_bound_launches_take_leading_ints(monkeypatch):
    kernel, bound = _bound(monkeypatch)
    x = torch.zeros(8)
    for n in (5, 5, 5):  # the KDA launches lead with tensors and ints
        bound(x, n, stream=7)
    assert [e[0] for e in kernel.events] == ["jit", "runner", "runner"]
    assert kernel.events[-1] == ("runner", (x, 5, 3), 7)


def test_bound_runners_follow_the_alignment(monkeypatch):
    kernel, bound = _bound(monkeypatch)
    base = torch.zeros(64)
    aligned, odd = base[:8], base[1:9]  # 4 bytes past an aligned address
    bound(aligned, torch.zeros(1))
    bound(odd, torch.zeros(1))
    assert [e[0] for e in kernel.events] == ["jit", "jit"]  # a new specialization compiles
    bound(aligned, torch.zeros(1))
    assert kernel.events[-1][0] == "runner"
