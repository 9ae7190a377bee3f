"""Another checkout's kernels in this process, to time a change against its base (A/B in one process).

`load(directory)` imports the `kernels` package of `directory` (a checkout, e.g. from
`git worktree add /tmp/base main`) as separate module objects: the current `kernels*`
modules are set aside in sys.modules, the directory goes first on sys.path, `kernels`
is imported afresh (each of its modules binds its imports when imported, so the copy
keeps calling its own submodules), and the current modules are put back. The
returned module is the copy's `name`: `kernels.paged_decode` (bench.decode) or
`kernels.kda` (bench.kda).
"""

import importlib
import sys
from pathlib import Path


def _ours() -> dict:
    return {name: module for name, module in sys.modules.items() if name == "kernels" or name.startswith("kernels.")}


def load(directory: str, name: str = "kernels.paged_decode"):
    """The module `name` of the checkout at `directory`, beside the current one."""
    root = Path(directory).resolve()
    if not (root / "kernels" / "__init__.py").is_file():
        raise ValueError(f"--baseline: expected a checkout holding kernels/__init__.py, got {directory}")
    ours = _ours()
    for key in ours:
        del sys.modules[key]
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(root))
        for key in _ours():
            del sys.modules[key]
        sys.modules.update(ours)
