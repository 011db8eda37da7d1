"""``qconform``: list and show contracts, run conformance, replay counterexamples.

Exit codes: 0 conformant (or nothing to report), 1 non-conformant (a fail or an error),
2 a usage problem (unknown backend, malformed spec, bad arguments).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from conformance.backends import available_backends
from conformance.case import Case, decode_token
from conformance.errors import BackendError, QConformError
from conformance.expr import check_expression
from conformance.registry import PROFILES, load_specs
from conformance.report import build_report, write_reports
from conformance.runner import Runner
from conformance.worker import InProcessBackend, IsolatedBackend

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="qconform", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("list", help="every contract with its parameters")
    show = sub.add_parser("show", help="one spec in full")
    show.add_argument("contract")
    sub.add_parser("backends", help="registered backends")

    run = sub.add_parser("run", help="run specs against a backend and write reports")
    run.add_argument("--backend", default="fast", help="registered name or module:attr (default: fast)")
    run.add_argument("--spec", default="*", help="glob over contract ids, e.g. 'cast.*' (default: all)")
    sweep_help = "random cases per row; 'exhaustive' also sweeps all 2^32 float32 inputs of each cast"
    run.add_argument("--profile", default="default", choices=PROFILES, help=sweep_help)
    run.add_argument("--where", help="only rows whose params satisfy this expression, e.g. \"rounding == 'rne'\"")
    run.add_argument("--seed", type=int, default=0, help="hypothesis seed (default 0: runs are reproducible)")
    run.add_argument("--report", type=Path, help="directory for report.json, report.md and junit.xml")
    run.add_argument("--timeout", type=float, default=120.0, help="seconds one backend call may take")
    run.add_argument("--isolation", choices=["process", "none"], default="process",
                     help="run the backend in a restartable child process (default) or in this one")  # fmt: skip
    run.add_argument("--quiet", action="store_true", help="no progress lines")

    replay = sub.add_parser("replay", help="replay one counterexample (a qc1: token or a case .json file)")
    replay.add_argument("--backend", default="fast")
    replay.add_argument("case")
    return parser


def _cmd_list() -> int:
    for spec in load_specs():
        params = "; ".join(
            f"{p.name} in {list(p.values or p.range or ())} (default {p.default!r})" for p in spec.params.values()
        )
        print(f"{spec.contract:28s} {params or '(no params)'}")
        print(f"{'':28s} {spec.raw['summary']}")
    return 0


def _cmd_show(contract: str) -> int:
    (spec,) = load_specs(contract)
    print(f"# {spec.path}  sha256={spec.sha256}")
    print(spec.path.read_text(), end="")
    return 0


def _cmd_run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    specs = load_specs(args.spec)
    if args.where is not None:
        check_expression(args.where, {name for spec in specs for name in spec.params})
    if args.report is not None:
        try:
            args.report.mkdir(parents=True, exist_ok=True)
            probe = args.report / ".qconform-write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            raise QConformError(f"cannot write reports to {args.report}: {exc}") from None
    started = dt.datetime.now(dt.timezone.utc)
    handle = (IsolatedBackend if args.isolation == "process" else InProcessBackend)(args.backend, args.timeout)
    log = (lambda line: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    log(f"qconform: backend {handle.description['name']} on {handle.description['device']}, "
        f"{len(specs)} specs, profile {args.profile}, seed {args.seed}")  # fmt: skip
    try:
        results = Runner(handle, profile=args.profile, seed=args.seed, progress=log).run(specs, where=args.where)
    finally:
        handle.close()
    report = build_report(
        backend=handle.description,
        backend_arg=args.backend,
        specs=specs,
        results=results,
        profile=args.profile,
        seed=args.seed,
        command="qconform " + shlex.join(argv),
        started=started,
        report_dir=args.report,
    )
    if args.report is not None:
        for path in write_reports(report, args.report):
            log(f"wrote {path}")
    s = report["summary"]
    counts = f"{s['pass']} pass, {s['fail']} fail, {s['error']} error, {s['not-implemented']} not implemented"
    print(f"{report['verdict']}: {counts}")
    for r in report["results"]:
        if r["status"] in ("fail", "error"):
            print(f"  {r['status'].upper()} {r['id']}: {r['message'].splitlines()[0]}")
            if r["replay"]:
                print(f"    replay: {r['replay']}")
    return 0 if report["verdict"] == "conformant" else 1


def _load_case(text: str) -> Case:
    if text.startswith("qc1:"):
        return decode_token(text)
    return Case.from_json(json.loads(Path(text).read_text()))


def _cmd_replay(args: argparse.Namespace) -> int:
    case = _load_case(args.case)
    (spec,) = load_specs(case.contract)
    handle = InProcessBackend(args.backend)
    print(case.describe())
    for name, tensor in case.inputs.items():
        print(f"  {name} bits: {np.array2string(tensor.bits.reshape(-1)[:64], formatter={'int': hex})}")
    evaluation = Runner(handle).evaluate(spec, case)
    print(f"{evaluation.status}: {evaluation.message}" if evaluation.message else evaluation.status)
    for mismatch in evaluation.mismatches:
        for e in mismatch.elements:
            print(f"  {mismatch.output}{e['index']}: backend {e['backend']} ({e['backend_value']}), "
                  f"reference {e['reference']} ({e['reference_value']})")  # fmt: skip
    return 0 if evaluation.status == "pass" else 1


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    try:
        if args.command == "list":
            return _cmd_list()
        if args.command == "show":
            return _cmd_show(args.contract)
        if args.command == "backends":
            for name, value in sorted(available_backends().items()):
                print(f"{name:14s} {value}")
            return 0
        if args.command == "run":
            return _cmd_run(args, argv)
        return _cmd_replay(args)
    except (QConformError, BackendError) as exc:
        print(f"qconform: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
