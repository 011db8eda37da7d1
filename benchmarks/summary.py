"""Print the current benchmark figures of ``benchmarks/<gpu>.json`` as the Markdown tables of ``docs/performance.md``.

One row per benchmark test id: the H200 figure where the H200 file has that id, else the H100 one (the GPU column
says which).  Run from the repository root: ``python3 benchmarks/summary.py > /tmp/tables.md``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
PREFERENCE = ("h200", "h100")
"""GPU files in order of preference: the newest card measured first."""


def load(directory: Path = HERE) -> dict[str, dict[str, Any]]:
    """Each GPU file's document, by file stem."""
    return {gpu: json.loads((directory / f"{gpu}.json").read_text()) for gpu in PREFERENCE}


def current(docs: dict[str, dict[str, Any]]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Per benchmark file, its test ids' preferred entries as (gpu, entry), in test-id order."""
    chosen: dict[str, tuple[str, dict[str, Any]]] = {}
    for gpu in reversed(PREFERENCE):
        for entry in docs[gpu]["benchmarks"]:
            chosen[entry["fullname"]] = (gpu, entry)
    files: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for fullname in sorted(chosen):
        files.setdefault(fullname.split("::")[0], []).append(chosen[fullname])
    return files


def _row(gpu: str, entry: dict[str, Any]) -> str:
    info = entry["extra_info"]
    test = entry["fullname"].split("::")[1]
    date = entry["run"]["datetime"][:10]
    if "ms" in info:
        figures = f"{info['ms']:.4f} | {info['gb_per_s']:.0f} | {info['fraction_of_copy']:.1%}"
    else:
        figures = f"{entry['stats']['median'] * 1e3:.2f} (CPU) | | "
    what = info.get("implementation", "").replace("|", "/")
    return f"| `{test}` | {what} | {info.get('shape', '')} | {figures} | {gpu.upper()} | {date} |"


def main() -> int:
    for path, entries in current(load()).items():
        print(f"### `{path}`\n")
        print(f"`python3 -m pytest {path} -m bench --benchmark-enable` (one row: its test id after `{path}::`)\n")
        print("| test | implementation | shape | ms | GB/s | of copy | GPU | date |")
        print("| --- | --- | --- | ---: | ---: | ---: | --- | --- |")
        for gpu, entry in entries:
            print(_row(gpu, entry))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
