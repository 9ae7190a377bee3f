"""Device and tier choice, made before Triton is imported.

With a CUDA or HIP GPU, kernels run compiled on it. Without one, Triton runs
them in its CPU interpreter: `TRITON_INTERPRET=1` must be in the environment
before `triton` is first imported, so every entry point (the CLI, the root
conftest) calls `setup()` first.
"""

import hashlib
import os
import re

import torch

TIERS = ("cpu", "gpu", "long")


def has_gpu() -> bool:
    return torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")


def setup() -> torch.device:
    """Pick the device; switch Triton to its interpreter when there is no GPU."""
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    return torch.device("cuda") if has_gpu() else torch.device("cpu")


def default_tier() -> str:
    return "gpu" if has_gpu() else "cpu"


def _release(version: str) -> tuple[int, int]:
    """(major, minor) of a version string ('3.6.0', '2.4.6', '3.7.0+git1a2b')."""
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def interpreter_problem(triton_version: str, numpy_version: str) -> str:
    """Why Triton's CPU interpreter of `triton_version` cannot run the kernels beside numpy
    `numpy_version`, or '' where it can. Before triton 3.7 the interpreter makes an int of a
    loop bound read from memory (a one-element array) with int(array), which numpy refuses
    from 2.4 on: every kernel with such a loop (the decode's key walk, KDA's) would fail."""
    if _release(triton_version) < (3, 7) and _release(numpy_version) >= (2, 4):
        return (f"Triton's interpreter in triton {triton_version} cannot run the kernels with numpy "
                f"{numpy_version} (it takes int() of one-element arrays, which numpy refuses from 2.4): "
                "expected triton>=3.7 or numpy<2.4")
    return ""


def check_interpreter() -> None:
    """Where kernels run in Triton's interpreter (no GPU), raise a ValueError if it cannot run
    them with the numpy installed (interpreter_problem)."""
    if not has_gpu():
        import numpy
        import triton  # after setup(): the interpreter is chosen before Triton's first import
        problem = interpreter_problem(triton.__version__, numpy.__version__)
        if problem:
            raise ValueError(problem)


def check_tier(tier: str, *, judged: bool = True) -> str:
    """The tier name, checked; a tier whose cases are to be judged (judged=True) and needs a GPU
    is refused on a machine without one, while its case list can be made anywhere; judged on the
    CPU, it is refused where Triton's interpreter cannot run the kernels (check_interpreter)."""
    if tier not in TIERS:
        raise ValueError(f"tier: expected one of {TIERS}, got {tier!r}")
    if judged and tier != "cpu" and not has_gpu():
        raise ValueError(f"tier: {tier!r} needs a GPU; this machine has none (use 'cpu')")
    if judged:
        check_interpreter()
    return tier


# Cached-but-free GPU memory a case may leave behind. Many processes share one
# GPU in a parallel run; one holding the cached blocks of its largest case
# starves the others into out-of-memory errors.
CACHED_BYTES_KEPT = 2 << 30


def release_cached(device: torch.device) -> None:
    """Hand cached, unused GPU memory back when a case left more than CACHED_BYTES_KEPT of it."""
    if device.type != "cuda":
        return
    if torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device) > CACHED_BYTES_KEPT:
        torch.cuda.empty_cache()


def worker_device(index: int) -> str:
    """The device parallel worker `index` judges on: GPU (index mod device count), or the CPU."""
    return f"cuda:{index % torch.cuda.device_count()}" if has_gpu() else "cpu"


def device_groups(assigned: dict) -> str:
    """{worker name: device} in one line, e.g. 'cuda:0 <- w0 w2; cuda:1 <- w1 w3'."""
    groups: dict = {}
    for name, dev in assigned.items():
        groups.setdefault(dev, []).append(name)
    return "; ".join(f"{dev} <- {' '.join(names)}" for dev, names in groups.items())


def worker_map(workers: int, prefix: str = "") -> str:
    """Which of `workers` parallel workers use which device (device_groups)."""
    return device_groups({f"{prefix}{index}": worker_device(index) for index in range(workers)})


def pin_worker(index: int, workers: int) -> None:
    """Settle worker `index` of `workers` parallel processes: its device (worker_device), and
    its share of the CPU cores (more threads each would only stall on hand-offs)."""
    if has_gpu():
        torch.cuda.set_device(worker_device(index))
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


def seed_of(text: str) -> int:
    """A stable 63-bit seed derived from a case id (same id, same tensors)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def parse_shard(text: str | None) -> tuple[int, int]:
    """'i/n' -> (i, n) with 0 <= i < n; None -> (0, 1)."""
    if text is None:
        return 0, 1
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"shard: expected 'i/n' (e.g. 0/4), got {text!r}") from None
    if not 0 <= i < n:
        raise ValueError(f"shard: expected 0 <= i < n, got {text!r}")
    return i, n


def shard(items: list, text: str | None) -> list:
    """The i-th of n contiguous slices of `items` ('i/n'; None keeps all).

    Contiguous, not every n-th item: neighbouring cases share kernel
    specializations, so parallel shards each compile their own few kernels
    instead of all racing to compile every one of them on a cold cache.
    """
    i, n = parse_shard(text)
    return items[i * len(items) // n:(i + 1) * len(items) // n]
