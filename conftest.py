"""Root pytest configuration: device, tiers, xdist GPU pinning, seeds, markers.

`verify.device.setup()` runs first, so Triton starts in its CPU interpreter
when there is no GPU. `--tier cpu|gpu|long` (default from the device) selects
which cases the suites hold, and tests marked `gpu` need the gpu or long tier.
`--shard i/n` keeps the i-th of n contiguous slices. Each test's RNG is seeded from its id.
"""

import os

from verify import device as _device

DEVICE = _device.setup()

import pytest  # noqa: E402
import torch  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--tier", default=None, choices=_device.TIERS,
                     help="cpu (interpreter, all-pairs cut), gpu (3-wise cut), long (whole matrix, long contexts)")
    parser.addoption("--shard", default=None, help="i/n: run the i-th of n slices of the tests")
    parser.addoption("--impl", action="append", default=None, metavar="SPEC",
                     help="judge the suites' cases on this implementation (verify/impls.py), as quantfloor run")


def pytest_configure(config):
    tier = config.getoption("--tier") or _device.default_tier()
    from verify import impls, runner
    try:
        config.quantfloor_tier = _device.check_tier(tier)
        runner.use(impls.select(config.getoption("--impl")))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and worker.startswith("gw"):
        _device.pin_worker(int(worker[2:]), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs the gpu tier (a GPU)")
    if config.quantfloor_tier == "cpu":
        for item in items:
            # the marker, not the keywords: a parameter named "gpu" is no marker
            if item.get_closest_marker("gpu") is not None:
                item.add_marker(skip_gpu)
    items[:] = _device.shard(items, config.getoption("--shard"))


def pytest_sessionfinish(session):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        session.config.workeroutput["quantfloor_device"] = str(DEVICE) if DEVICE.type != "cuda" else \
            f"cuda:{torch.cuda.current_device()}"


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    devices = node.config.__dict__.setdefault("quantfloor_workers", {})
    devices[node.gateway.id] = getattr(node, "workeroutput", {}).get("quantfloor_device", "unknown")


def pytest_terminal_summary(terminalreporter, config):
    """Which xdist worker judged on which device (workers are pinned round-robin over the GPUs)."""
    devices = getattr(config, "quantfloor_workers", None)
    if devices:
        ordered = {name: devices[name] for name in sorted(devices, key=lambda n: int(n[2:]) if n[2:].isdigit() else 0)}
        terminalreporter.write_line(f"workers: {_device.device_groups(ordered)}")


@pytest.fixture
def device():
    return DEVICE


@pytest.fixture
def tier(request):
    return request.config.quantfloor_tier


@pytest.fixture(autouse=True)
def _seed(request):
    torch.manual_seed(_device.seed_of(request.node.nodeid))
