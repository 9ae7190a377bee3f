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
    """Stands for Triton's CompiledKernel: compiled[grid] is its runner (which serves launch hooks),
    run(...) its launcher, taking the grid, stream, function, metadata, hook metadata and hooks."""

    function = 11
    packed_metadata = (1, 1, 0)

    def __init__(self, kernel):
        self.kernel = kernel

    def __getitem__(self, grid):
        def runner(*args, stream=None):
            self.kernel.events.append(("runner", args, stream))
        return runner

    def run(self, gx, gy, gz, stream, function, packed, hook_metadata, enter, leave, *args):
        assert (function, packed, hook_metadata, enter, leave) == (11, (1, 1, 0), None, None, None)
        self.kernel.events.append(("run", args, stream))


def _bound(monkeypatch):
    monkeypatch.setattr(arch, "interpreting", lambda: False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    kernel = _Kernel()
    return kernel, launch.Bound(kernel, (1,), launch.slots(2), {"C": 3}, {"num_warps": 1})


def test_bound_launches_take_leading_ints(monkeypatch):
    kernel, bound = _bound(monkeypatch)
    x = torch.zeros(8)
    for n in (5, 5, 5):  # the KDA launches lead with tensors and ints
        bound(x, n, stream=7)
    assert [e[0] for e in kernel.events] == ["jit", "run", "run"]
    assert kernel.events[-1] == ("run", (x.data_ptr(), 5, 3), 7)  # a tensor goes to the launcher by address


def test_bound_launches_through_the_runner_while_a_launch_hook_is_registered(monkeypatch):
    """Without hooks a launch skips the runner's hook metadata; with one, Triton's runner launches
    (so a profiler that hooks launches sees ours), and the direct launch comes back after."""
    from triton import knobs

    kernel, bound = _bound(monkeypatch)
    x = torch.zeros(8)
    bound(x, 5, stream=7)
    seen = []
    hook = seen.append
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        bound(x, 5, stream=7)
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    bound(x, 5, stream=7)
    assert [e[0] for e in kernel.events] == ["jit", "runner", "run"]


def test_bound_runners_follow_the_alignment(monkeypatch):
    kernel, bound = _bound(monkeypatch)
    base = torch.zeros(64)
    aligned, odd = base[:8], base[1:9]  # 4 bytes past an aligned address
    bound(aligned, torch.zeros(1))
    bound(odd, torch.zeros(1))
    assert [e[0] for e in kernel.events] == ["jit", "jit"]  # a new specialization compiles
    bound(aligned, torch.zeros(1))
    assert kernel.events[-1][0] == "runner"


class _Kernel4(_Kernel):
    arg_names = ["x", "n", "y", "C"]


def test_bound_slots_between_fixed_arguments(monkeypatch):
    """Slots stand anywhere among the fixed arguments: each launch gets its values in their places,
    through the JIT the first time and the kept launcher after."""
    monkeypatch.setattr(arch, "interpreting", lambda: False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    kernel = _Kernel4()
    bound = launch.Bound(kernel, (1,), (launch.SLOT, 5, launch.SLOT), {"C": 3}, {"num_warps": 1})
    x, y, z = torch.zeros(4), torch.zeros(8), torch.zeros(16)
    bound(x, y)
    bound(x, y)
    bound(z, x)
    assert kernel.events == [("jit", (x, 5, y)), ("runner", (x.data_ptr(), 5, y.data_ptr(), 3), None),
                             ("runner", (z.data_ptr(), 5, x.data_ptr(), 3), None)]


def test_bound_fixed_tensors_go_by_address(monkeypatch):
    """The launcher gets every tensor as an int (it would query the driver about a tensor's memory on
    every launch), the fixed ones too, and the Bound keeps those alive."""
    monkeypatch.setattr(arch, "interpreting", lambda: False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    kernel = _Kernel4()
    table = torch.arange(4)
    bound = launch.Bound(kernel, (1,), (launch.SLOT, 5, table), {"C": 3}, {"num_warps": 1})
    x = torch.zeros(4)
    bound(x)
    bound(x)
    assert kernel.events[-1] == ("runner", (x.data_ptr(), 5, table.data_ptr(), 3), None)
    assert any(a is table for a in bound.args)


def test_bound_slots_are_merged_when_recorded():
    kernel = _Kernel4()
    bound = launch.Bound(kernel, (2, 3), (launch.SLOT, 7, launch.SLOT), {"C": 1}, {})
    x, y = torch.zeros(1), torch.zeros(2)
    with launch.recorded() as calls:
        bound(x, y)
    assert len(calls) == 1 and calls[0].args == (x, 7, y) and calls[0].grid == (2, 3)


def test_bound_views_are_made_only_where_a_launch_takes_the_tensor(monkeypatch):
    """A slot of `views` reaches the JIT (and a recorded launch) as its view of that dtype, whose bytes,
    alignment and address are the tensor's: later launches take the address with no view made."""
    monkeypatch.setattr(arch, "interpreting", lambda: False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    kernel = _Kernel4()
    bound = launch.Bound(kernel, (1,), (launch.SLOT, 5, launch.SLOT), {"C": 3}, {"num_warps": 1},
                         views={1: torch.uint8})
    x, y = torch.zeros(4), torch.zeros(8, dtype=torch.float8_e4m3fnuz)
    bound(x, y)
    bound(x, y)
    (_, jitted), runner = kernel.events
    assert jitted[0] is x and jitted[2].dtype == torch.uint8 and jitted[2].data_ptr() == y.data_ptr()
    assert runner == ("runner", (x.data_ptr(), 5, y.data_ptr(), 3), None)
    with launch.recorded() as calls:
        bound(x, y)
    assert calls[0].args[2].dtype == torch.uint8 and calls[0].args[0] is x


def test_a_misaligned_tensor_never_takes_the_aligned_launcher(monkeypatch):
    """Once the aligned specialization has a launcher, a call whose tensor is 4 bytes past an aligned
    address goes to its own specialization (compiled anew), and back again."""
    kernel, bound = _bound(monkeypatch)
    base = torch.zeros(64)
    aligned, odd = base[:8], base[1:9]
    bound(aligned, torch.zeros(1))
    bound(aligned, torch.zeros(1))
    bound(odd, torch.zeros(1))
    bound(odd, torch.zeros(1))
    bound(aligned, torch.zeros(1))
    assert [e[0] for e in kernel.events] == ["jit", "runner", "jit", "runner", "runner"]
    assert kernel.events[-2][1][0] == odd.data_ptr() and kernel.events[-1][1][0] == aligned.data_ptr()


def test_signatures_tell_apart_what_decides_a_launch():
    """None, a bool and the int of the same value, a number and its value, a tensor's dtype, shape,
    strides and device, and other objects by identity each give their own signature."""
    x = torch.zeros(4, 6)
    views = (x, x.t(), x[:, :4], x.double(), x.view(6, 4), torch.zeros(4, 6, device="meta"))
    sigs = launch.signatures((None, True, 1, 1.0, 2, "a", *views, object(), object()))
    assert len(set(sigs)) == len(sigs)
    assert launch.signatures((None, 1, "a", x)) == launch.signatures((None, 1, "a", torch.ones(4, 6)))
