"""The environment fingerprint written into every report."""

from __future__ import annotations

import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["fingerprint", "git_commit", "suite_version"]


def suite_version() -> str:
    try:
        return metadata.version("qconform")
    except metadata.PackageNotFoundError:
        return "unknown"


def git_commit() -> dict[str, Any]:
    """Commit of the source tree the engine runs from, and whether that tree is clean."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "clean": None}
    if commit.returncode != 0:
        return {"commit": "unknown", "clean": None}
    return {"commit": commit.stdout.strip(), "clean": status.stdout.strip() == ""}


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _gpu() -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {"cuda": None, "gpu": None, "driver": None}
    if not torch.cuda.is_available():
        return {"cuda": torch.version.cuda, "gpu": None, "driver": None}
    props = torch.cuda.get_device_properties(0)
    driver = None
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        driver = smi.stdout.strip().splitlines()[0] if smi.returncode == 0 and smi.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "cuda": torch.version.cuda,
        "gpu": props.name,
        "compute_capability": f"{props.major}.{props.minor}",
        "gpu_count": torch.cuda.device_count(),
        "driver": driver,
    }


def fingerprint() -> dict[str, Any]:
    """Python, platform, package versions, CUDA, GPU name and driver."""
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "numpy": _version("numpy"),
        "torch": _version("torch"),
        "triton": _version("triton"),
        "hypothesis": _version("hypothesis"),
        "ml_dtypes": _version("ml_dtypes"),
        **_gpu(),
    }
