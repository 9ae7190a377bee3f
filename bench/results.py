"""The JSON a bench writes: its header, the copy bandwidth it measured, and its rows so far."""

import json


def write_json(path, head: str, copy: float | None, rows: list) -> None:
    """Write {header, copy_tbps, rows} to `path` (nothing when path is None; copy None where the
    bench measures no bandwidth). The benches call it after every row, so a run cut short keeps
    what it measured."""
    if path:
        with open(path, "w") as fh:
            json.dump({"header": head, "copy_tbps": copy, "rows": rows}, fh, indent=1)
