"""GPU work on a CUDA machine, in one call: the device pass, GPU tests, benchmarks, sweeps, multi-GPU rows.

The nox sessions ``gpu``, ``bench`` and ``sweep`` call this script; it needs only python3 with torch (CUDA),
triton, numpy, pytest and pytest-benchmark, so it also runs where nox is not installed::

    python3 scripts/device_pass.py pass --out $OUT --backend fast --backend torch --shards 4
    python3 scripts/device_pass.py gpu-tests --out $OUT          # tests -m gpu, tests/bench, a summary
    python3 scripts/device_pass.py bench --out $OUT -k nvfp4     # tests/bench only
    python3 scripts/device_pass.py sweep --out $OUT --deadline-s 500 "cast.fp8|rounding == 'rne'" "cast.int|"
    python3 scripts/device_pass.py xdist --out $OUT --gpus 0,1 --spec 'quant.fp8_*'
    python3 scripts/device_pass.py pass --dry-run ...            # print the commands, run nothing

``pass`` is: the environment (``env.txt``); conformance of each backend in ``--shards`` parallel shards, each cut
at ``--run-s`` seconds, a cut shard run again one contract a process (``--retry-parallel`` side by side,
``--retry-s`` each), the shards merged into ``<reports>/<backend>``, the backends into ``<reports>/matrix``;
then ``gpu-tests`` (unless ``--skip-gpu-tests``) within ``--gpu-s``; then, with ``--sweep-spec``, an exhaustive
sweep within ``--sweep-s``.
Results go to ``--out`` (``$OUT``, else ``reports-gpu``): ``env.txt``, ``reports.tgz``, ``gpu-junit.xml``,
``bench.json``, ``gpu-pass.log``, ``sweep.log``.  Defaults come from the environment variables the shell drivers
read (``OUT``, ``BACKENDS``, ``PROFILE``, ``SEED``, ``SPEC``, ``SHARDS``, ``RUN_S``, ``RETRY_S``, ``RETRY_PARALLEL``,
``SKIP_GPU_TESTS``, ``GPU_S``, ``SWEEP_SPEC``, ``SWEEP_WHERE``, ``SWEEP_S``, ``DEADLINE_S``).  A ``.whl/``
folder in the checkout (wheels carried to a machine without network) is installed into ``/tmp/site`` first.

Exit status: 0 when every step passed (a non-conformant third-party backend is a finding, not a failure;
``fast``'s verdict is in its report), 1 when a step failed, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable or "python3"
PROGRESS = re.compile(r"^\s+[0-9.]+% of")
"""Progress lines of an exhaustive sweep, dropped from its log."""
ROW_LINE = re.compile(r"^\[[0-9]+/[0-9]+\]")
"""A finished row of a run (verdict, message, seconds), kept in the sweep summary."""


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


def _env_int(name: str, default: int) -> int:
    try:
        return int(_env(name, str(default)))
    except ValueError:
        raise SystemExit(f"device_pass: {name}={os.environ[name]!r} is not an integer") from None


def parse_selection(text: str) -> tuple[str, str | None]:
    """``"<spec glob>|<where expression or empty>"`` as (glob, where or None)."""
    spec, _, where = text.partition("|")
    if not spec.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected '<spec glob>|<where expression or empty>'")
    return spec.strip(), where.strip() or None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="device_pass.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--out", type=Path, default=Path(_env("OUT", "reports-gpu")), help="results ($OUT; reports-gpu)")
        p.add_argument("--reports", type=Path, default=Path("reports"), help="conformance reports (default reports)")
        p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")

    def gpu_tests(p: argparse.ArgumentParser) -> None:
        p.add_argument("--gpu-s", type=int, default=_env_int("GPU_S", 300), help="seconds for GPU tests + bench")
        p.add_argument("-k", dest="keyword", help="pytest -k expression for the benchmarks")

    run = sub.add_parser("pass", help="conformance, GPU tests and benchmarks, an optional sweep (the default)")
    common(run)
    run.add_argument("--backend", action="append", help="repeatable (default $BACKENDS or: fast torch)")
    run.add_argument("--profile", default=_env("PROFILE", "default"), choices=["smoke", "default", "thorough"])
    run.add_argument("--seed", type=int, default=_env_int("SEED", 0), help="0: the reproducible cases")
    run.add_argument("--spec", default=_env("SPEC", "*"), help="glob over contract ids")
    run.add_argument("--shards", type=int, default=_env_int("SHARDS", 1), help="parallel shards per backend")
    run.add_argument("--run-s", type=int, default=_env_int("RUN_S", 300), help="seconds per shard")
    run.add_argument("--retry-s", type=int, default=None, help="seconds per contract of a cut shard (--run-s)")
    run.add_argument("--retry-parallel", type=int, default=_env_int("RETRY_PARALLEL", 16))
    run.add_argument("--skip-gpu-tests", action="store_true", default=bool(os.environ.get("SKIP_GPU_TESTS")))
    gpu_tests(run)
    run.add_argument("--sweep-spec", default=os.environ.get("SWEEP_SPEC"), help="then sweep these rows")
    run.add_argument("--sweep-where", default=os.environ.get("SWEEP_WHERE"))
    run.add_argument("--sweep-s", type=int, default=_env_int("SWEEP_S", 240))

    tests = sub.add_parser("gpu-tests", help="every test marked gpu, then tests/bench, then a summary")
    common(tests)
    gpu_tests(tests)

    bench = sub.add_parser("bench", help="tests/bench only (pytest-benchmark JSON in OUT/bench.json)")
    common(bench)
    bench.add_argument("-k", dest="keyword", help="pytest -k expression")
    bench.add_argument("paths", nargs="*", default=["tests/bench"], help="benchmark files (default tests/bench)")

    sweep = sub.add_parser("sweep", help="exhaustive sweeps of row selections, one after another, in a time box")
    common(sweep)
    sweep.add_argument("--deadline-s", type=int, default=_env_int("DEADLINE_S", 500))
    sweep.add_argument("selections", nargs="+", type=parse_selection, metavar="'GLOB|WHERE'")

    xdist = sub.add_parser("xdist", help="contract rows under pytest-xdist, one worker per GPU, against one")
    common(xdist)
    xdist.add_argument("--gpus", default="0,1", help="comma-separated GPU ids (default 0,1)")
    xdist.add_argument("--spec", default=_env("SPEC", "quant.fp8_tensor"))
    xdist.add_argument("--profile", default="smoke", choices=["smoke", "default", "thorough"])
    xdist.add_argument("--timeout-s", type=int, default=280)
    return parser


@dataclass
class Step:
    """One command: its arguments, a time limit, and where its output goes (None: this process's stdout)."""

    argv: list[str]
    timeout: float | None = None
    log: Path | None = None
    env: Mapping[str, str] | None = None

    def show(self) -> str:
        limit = f"timeout {int(self.timeout)} " if self.timeout else ""
        extra = "".join(f"{k}={shlex.quote(v)} " for k, v in (self.env or {}).items())
        return f"{extra}{limit}{shlex.join(self.argv)}" + (f" > {self.log}" if self.log else "")


class Runner:
    """Runs steps, or only prints them (``dry``)."""

    def __init__(self, dry: bool):
        self.dry = dry
        self.env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), self.env.get("PYTHONPATH")) if p)

    def start(self, step: Step) -> subprocess.Popen[bytes] | None:
        print(("would run: " if self.dry else "+ ") + step.show(), flush=True)
        if self.dry:
            return None
        out = open(step.log, "wb") if step.log else None  # noqa: SIM115 (closed with the process)
        return subprocess.Popen(step.argv, cwd=ROOT, env={**self.env, **(step.env or {})}, stdout=out,
                                stderr=subprocess.STDOUT if out else None, start_new_session=True)  # fmt: skip

    @staticmethod
    def wait(process: subprocess.Popen[bytes] | None, timeout: float | None) -> int:
        """The exit status; 124 (as timeout(1)) when it ran past ``timeout``, its process group killed."""
        if process is None:
            return 0
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return 124

    def run(self, step: Step) -> int:
        return self.wait(self.start(step), step.timeout)

    def parallel(self, steps: Sequence[Step]) -> list[int]:
        processes = [self.start(s) for s in steps]
        end = time.monotonic() + max((s.timeout or 0) for s in steps) if steps else 0
        codes = []
        for process, step in zip(processes, steps, strict=True):
            left = None if step.timeout is None else max(0.0, end - time.monotonic())
            codes.append(self.wait(process, left))
        return codes

    def capture(self, argv: Sequence[str]) -> str:
        """A short command's output (the environment, the contract list); empty in a dry run or on failure."""
        if self.dry:
            print("would run: " + shlex.join(argv))
            return ""
        try:
            done = subprocess.run(argv, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"{shlex.join(argv)}: {error}\n"
        return done.stdout + done.stderr


def _qconform(*args: str) -> list[str]:
    return [PY, "-m", "conformance.cli", *args]


def install_wheels(runner: Runner) -> int:
    """Wheels carried in ``.whl/`` (qconform's metadata, pure-Python test deps) into /tmp/site."""
    wheels = sorted((ROOT / ".whl").glob("*.whl"))
    if not wheels:
        return 0
    code = runner.run(Step([PY, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                            "--no-cache-dir", "--upgrade", "--target", "/tmp/site", *map(str, wheels)]))  # fmt: skip
    runner.env["PYTHONPATH"] += os.pathsep + "/tmp/site"
    return code


def write_environment(runner: Runner, out: Path) -> None:
    query = "name,driver_version,memory.total,clocks.sm,clocks.max.sm"
    versions = ("import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, "
                "'numpy', numpy.__version__, 'cuda', torch.version.cuda)")  # fmt: skip
    text = runner.capture(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"])
    text += runner.capture([PY, "-c", versions]) + f"{os.cpu_count()}\n"
    if not runner.dry:
        (out / "env.txt").write_text(text)
        print(text, end="")


def conformance(runner: Runner, args: argparse.Namespace, backend: str) -> int:
    """One backend in ``--shards`` shards, a cut shard again one contract a process, merged; 0 unless merge fails."""
    reports, n, start = args.reports, args.shards, time.monotonic()
    common = ["--profile", args.profile, "--seed", str(args.seed)]
    shards = [Step(_qconform("run", "--backend", backend, *common, "--spec", args.spec, "--shard", f"{i}/{n}",
                             "--report", str(reports / f"{backend}-{i}"), "--quiet"),
                   timeout=args.run_s, log=reports / f"{backend}-{i}.log") for i in range(1, n + 1)]  # fmt: skip
    runner.parallel(shards)
    retry_s = args.retry_s or _env_int("RETRY_S", args.run_s)
    for i in range(1, n + 1):
        if not runner.dry and (reports / f"{backend}-{i}" / "report.json").exists():
            continue
        cut = f"{backend}: shard {i}/{n} did not finish in {args.run_s} s; again, one contract a process"
        print(cut if not runner.dry else f"(if shard {i}/{n} is cut: each contract of --spec alone, as follows)")
        contracts = _contracts(runner, args.spec) or ["<contract>"]
        steps = [Step(_qconform("run", "--backend", backend, *common, "--spec", c, "--shard", f"{i}/{n}",
                                "--report", str(reports / f"{backend}-{i}-{c}"), "--quiet"),
                      timeout=retry_s, log=reports / f"{backend}-{i}-{c}.log") for c in contracts]  # fmt: skip
        with ThreadPoolExecutor(max(1, args.retry_parallel)) as pool:
            list(pool.map(runner.run, steps))
    found = [str(p / "report.json") for p in _pieces(reports, backend) if (p / "report.json").exists()]
    found = found or [f"{reports}/{backend}-<i>/report.json"]
    code = runner.run(Step(_qconform("report", "merge", "--report", str(reports / backend), *found),
                           log=reports / f"{backend}.log"))  # fmt: skip
    if not runner.dry:
        for log in [*(p.with_name(p.name + ".log") for p in _pieces(reports, backend)), reports / f"{backend}.log"]:
            if log.exists():
                print("\n".join(line[:400] for line in log.read_text(errors="replace").splitlines()))
        print(f"{backend}: {n} shards, wall time {time.monotonic() - start:.0f} s")
    return 0 if code <= 1 else 1


def _pieces(reports: Path, backend: str) -> list[Path]:
    """The report folders of ``backend``'s shards and their retries (``fast-2``, ``fast-2-cast.fp8``; not
    ``fast-triton-1``)."""
    piece = re.compile(re.escape(backend) + r"-[0-9]+(-.+)?")
    return sorted(p for p in reports.glob(f"{backend}-*") if p.is_dir() and piece.fullmatch(p.name))


def _contracts(runner: Runner, pattern: str) -> list[str]:
    listing = (
        "import sys; from conformance.registry import load_specs; print(*(s.contract for s in load_specs(sys.argv[1])))"
    )
    return runner.capture([PY, "-c", listing, pattern]).split() if not runner.dry else []


def _tee(runner: Runner, step: Step, log: Path) -> int:
    """Run ``step`` with its output appended to ``log`` (printed at the end by the caller)."""
    step.log = log.with_suffix(".part")
    code = runner.run(step)
    if not runner.dry and step.log.exists():
        with log.open("ab") as whole:
            whole.write(step.log.read_bytes())
        step.log.unlink()
    return code


def gpu_tests(runner: Runner, args: argparse.Namespace) -> int:
    """Every test marked gpu, then tests/bench, the GPU's clocks, and a summary table; all within ``--gpu-s``."""
    out, end = args.out, time.monotonic() + args.gpu_s
    log = out / "gpu-pass.log"
    if not runner.dry:
        log.write_text("")
    left: Callable[[], float] = lambda: max(1, round(end - time.monotonic()))  # noqa: E731
    status = 0
    tests = [PY, "-m", "pytest", "tests", "-m", "gpu", "-q", "-rfEs", "-p", "no:cacheprovider",
             "--junitxml", str(out / "gpu-junit.xml")]  # fmt: skip
    status |= _tee(runner, Step(tests, timeout=left()), log) != 0
    status |= _tee(runner, bench_step(out, ["tests/bench"], args.keyword, left()), log) != 0
    clocks = "--query-gpu=clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu"
    state = runner.capture(["nvidia-smi", clocks, "--format=csv"])
    if not runner.dry:
        with log.open("a") as f:
            f.write("== GPU state just after the benchmarks\n" + state + "== summary\n" + summary(out) + "\n")
        print("\n".join(log.read_text(errors="replace").splitlines()[-40:]))
    return int(status)


def bench_step(out: Path, paths: Sequence[str], keyword: str | None, timeout: float | None = None) -> Step:
    argv = [PY, "-m", "pytest", *paths, "-m", "bench", "-q", "-rfEs", "-p", "no:cacheprovider",
            "--benchmark-enable", "--benchmark-json", str(out / "bench.json")]  # fmt: skip
    return Step(argv + (["-k", keyword] if keyword else []), timeout=timeout)


def summary(out: Path) -> str:
    """The GPU tests' counts and one line per benchmark: ms, GB/s and the fraction of copy bandwidth."""
    lines = []
    try:
        suite = ET.parse(out / "gpu-junit.xml").getroot().find("testsuite")
        assert suite is not None
        counts = ", ".join(f"{k} {suite.get(k)}" for k in ("tests", "failures", "errors", "skipped"))
        lines.append(f"gpu tests: {counts}")
    except (OSError, ET.ParseError, AssertionError) as error:
        lines.append(f"gpu tests: no JUnit report ({error})")
    try:
        benchmarks = json.loads((out / "bench.json").read_text())["benchmarks"]
    except (OSError, ValueError, KeyError) as error:
        return "\n".join([*lines, f"benchmarks: no JSON report ({error})"])
    copy = [b["extra_info"]["copy_gb_per_s"] for b in benchmarks if "copy_gb_per_s" in b["extra_info"]]
    if copy:
        lines.append(f"device-to-device copy: {copy[0]:.0f} GB/s (read + write)")
    lines.append(f"{'benchmark':<62} {'ms':>9} {'GB/s':>7} {'of copy':>8}")
    for b in benchmarks:
        info = b["extra_info"]
        if "ms" in info:
            figures = f"{info['ms']:9.3f} {info['gb_per_s']:7.0f} {info['fraction_of_copy']:8.1%}"
            lines.append(f"{b['name'][:62]:<62} {figures}")
        else:
            lines.append(f"{b['name'][:62]:<62} {b['stats']['median'] * 1e3:9.3f}  (CPU, pytest-benchmark median)")
    return "\n".join(lines)


def sweep(runner: Runner, args: argparse.Namespace, selections: Sequence[tuple[str, str | None]],
          deadline_s: int, names: Callable[[int], str]) -> int:  # fmt: skip
    """Exhaustive sweeps of each selection in turn until ``deadline_s``; logs ``names(n)``, a summary beside."""
    out, end = args.out, time.monotonic() + deadline_s
    summary_path = out / "sweep-summary.txt"
    for n, (spec, where) in enumerate(selections, 1):
        left = end - time.monotonic()
        label = f"{spec}|{where or ''}"
        if left <= 20:
            _append(runner, summary_path, f"time box reached before: {label}")
            break
        selected = ["--spec", spec, *(["--where", where] if where else [])]
        argv = _qconform("run", "--backend", "fast", "--profile", "exhaustive", *selected,
                         "--report", str(args.reports / f"sweep-{n}"))  # fmt: skip
        start = time.monotonic()
        log = out / names(n)
        code = runner.run(Step(argv, timeout=round(left), log=log.with_suffix(".raw")))
        if not runner.dry:
            raw = log.with_suffix(".raw")
            text = raw.read_text(errors="replace").replace("\r", "\n")
            kept = [line for line in text.splitlines() if not PROGRESS.match(line)]
            log.write_text("\n".join(kept) + "\n")
            raw.unlink()
            rows = [line for line in kept if ROW_LINE.match(line)]
            _append(runner, summary_path, f"== {label}: {time.monotonic() - start:.0f} s (exit {code})", *rows)
    return 0


def _append(runner: Runner, path: Path, *lines: str) -> None:
    print("\n".join(lines))
    if not runner.dry:
        with path.open("a") as f:
            f.write("\n".join(lines) + "\n")


def xdist(runner: Runner, args: argparse.Namespace) -> int:
    """The rows under pytest-xdist with one worker per GPU, then one worker on the first GPU, timed."""
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()]
    if not gpus:
        raise SystemExit("device_pass: --gpus needs at least one GPU id")
    status = 0
    for name, workers, listed in (("all-gpus", len(gpus), ",".join(gpus)), ("one-gpu", 1, gpus[0])):
        argv = [PY, "-m", "pytest", "tests/test_contracts.py", "-p", "no:cacheprovider", "-q", "-n", str(workers),
                "--qconform-gpus", listed, "--qconform-backend", "fast", "--qconform-profile", args.profile,
                "--qconform-spec", args.spec]  # fmt: skip
        start = time.monotonic()
        step = Step(argv, args.timeout_s, args.out / f"{name}-pytest.log", {"TRITON_CACHE_DIR": f"/tmp/triton-{name}"})
        code = runner.run(step)
        status |= code != 0
        if not runner.dry:
            last = (step.log.read_text(errors="replace").splitlines() or [""])[-1]  # type: ignore[union-attr]
            wall = time.monotonic() - start
            _append(runner, args.out / "summary.txt", f"{name}: workers={workers} gpus={listed} rc={code} "
                    f"wall={wall:.1f} s | {last}")  # fmt: skip
    return int(status)


def device_pass(runner: Runner, args: argparse.Namespace) -> int:
    status = 0
    write_environment(runner, args.out)
    backends = args.backend or _env("BACKENDS", "fast torch").split()
    for backend in backends:
        status |= conformance(runner, args, backend)
    if len(backends) > 1:  # every backend in one conformance matrix, as ``nox -s conformance`` writes it
        merged = [str(args.reports / b / "report.json") for b in backends]
        matrix = Step(_qconform("report", "merge", *merged, "--report", str(args.reports / "matrix")))
        status |= runner.run(matrix) > 1
    archive(runner, args.reports, args.out / "reports.tgz")
    if not args.skip_gpu_tests:
        status |= gpu_tests(runner, args)
    if args.sweep_spec:
        sweep(runner, args, [(args.sweep_spec, args.sweep_where)], args.sweep_s, lambda n: "sweep.log")
        archive(runner, args.reports, args.out / "reports.tgz")
    return status


def archive(runner: Runner, folder: Path, target: Path) -> None:
    print(("would pack " if runner.dry else "packing ") + f"{folder} into {target}")
    if not runner.dry and folder.exists():
        skip = target.resolve()  # never the archive itself, should --out lie inside the reports
        with tarfile.open(target, "w:gz") as tar:
            tar.add(folder, arcname=folder.name, filter=lambda m: None if _inside(folder, m.name, skip) else m)


def _inside(folder: Path, member: str, path: Path) -> bool:
    return (folder.parent / member).resolve() == path


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["pass", *argv]  # the device pass is the default command
    args = parser.parse_args(argv)
    for name in ("shards", "run_s", "retry_parallel", "gpu_s", "deadline_s", "sweep_s", "timeout_s"):
        if getattr(args, name, 1) is not None and getattr(args, name, 1) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    args.out, args.reports = args.out.absolute(), args.reports.absolute()
    runner = Runner(args.dry_run)
    if not args.dry_run:
        args.out.mkdir(parents=True, exist_ok=True)
        args.reports.mkdir(parents=True, exist_ok=True)
    if install_wheels(runner) != 0:
        return 3
    if args.command == "pass":
        return device_pass(runner, args)
    if args.command == "gpu-tests":
        return gpu_tests(runner, args)
    if args.command == "bench":
        return int(runner.run(bench_step(args.out, args.paths, args.keyword)) != 0)
    if args.command == "sweep":
        status = sweep(runner, args, args.selections, args.deadline_s, lambda n: f"sweep-{n}.log")
        archive(runner, args.reports, args.out / "sweep-reports.tgz")
        return status
    return xdist(runner, args)


if __name__ == "__main__":
    sys.exit(main())
