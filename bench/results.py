"""The JSON a bench writes: its header, the copy bandwidth it measured, and its rows so far; the
header's line naming the device and the versions."""

import json

import torch
import triton

from kernels import arch


def versions(device, *facts: str) -> str:
    """'device NAME (ARCH[, facts]), torch X, triton Y' of a CUDA `device`: a bench header's first line."""
    about = ", ".join((arch.arch_name(device), *facts))
    return f"device {torch.cuda.get_device_name(device)} ({about}), torch {torch.__version__}, triton {triton.__version__}"


def write_json(path, head: str, copy: float | None, rows: list) -> None:
    """Write {header, copy_tbps, rows} to `path` (nothing when path is None; copy None where the
    bench measures no bandwidth). The benches call it after every row, so a run cut short keeps
    what it measured."""
    if path:
        with open(path, "w") as fh:
            json.dump({"header": head, "copy_tbps": copy, "rows": rows}, fh, indent=1)
