"""Print the current benchmark figures of ``benchmarks/<gpu>.json`` as the Markdown tables of ``docs/performance.md``.

One table per benchmark file and one row per test id, with the latest figure on each GPU side by side (H200
first; an empty cell: not measured on that GPU).  Run from the repository root:
``python3 benchmarks/summary.py > /tmp/tables.md``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
GPUS = ("h200", "h100")
"""The GPU files, newest card first."""


def load(directory: Path = HERE) -> dict[str, dict[str, Any]]:
    """Each GPU file's document, by file stem."""
    return {gpu: json.loads((directory / f"{gpu}.json").read_text()) for gpu in GPUS}


def by_file(docs: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """Benchmark file -> test id -> GPU -> entry."""
    files: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for gpu in GPUS:
        for entry in docs[gpu]["benchmarks"]:
            path, _, test = entry["fullname"].partition("::")
            files.setdefault(path, {}).setdefault(test, {})[gpu] = entry
    return files


def _figure(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return " | | "
    info, date = entry["extra_info"], entry["run"]["datetime"][:10]
    if "ms" in info:
        return f"{info['ms']:.4f} | {info['fraction_of_copy']:.1%} | {date}"
    return f"{entry['stats']['median'] * 1e3:.2f} (CPU) | | {date}"


def main() -> int:
    header = " | ".join(f"{gpu.upper()} ms | of copy | date" for gpu in GPUS)
    for path, tests in sorted(by_file(load()).items()):
        print(f"### `{path}`\n")
        print(f"`python3 -m pytest {path} -m bench --benchmark-enable` (one row: `'{path}::<test>'`)\n")
        print(f"| test | implementation | shape | {header} |")
        print("| --- | --- | --- |" + " ---: | ---: | --- |" * len(GPUS))
        for test, entries in sorted(tests.items()):
            info = next(iter(entries.values()))["extra_info"]
            what = str(info.get("implementation", "")).replace("|", "/")
            shape = info.get("shape", "")
            shape = "×".join(map(str, shape)) if isinstance(shape, list) else shape
            figures = " | ".join(_figure(entries.get(gpu)) for gpu in GPUS)
            print(f"| `{test}` | {what} | {shape} | {figures} |")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
