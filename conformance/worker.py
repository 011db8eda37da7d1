"""Run a backend in a child process that can crash or hang without taking the run down.

``IsolatedBackend`` starts ``python`` (spawn) with the backend loaded and keeps it for the whole
run.  ``submit`` sends it a batch of cases in one message; the child runs them back to back and
answers each as soon as it is done, and the parent waits at most ``timeout`` seconds for each
answer, so the parent can compute the reference while the child works.  A backend that raises is
reported as ``raised``; one that kills its process (a segfault, an abort, ``os._exit``) as
``crash``; one that does not answer in time as ``timeout``.  After a crash or a timeout the child
is killed and a fresh one is started on the next call.  The case that was running is the one the
answers stop at; a crash there is confirmed by running that case alone in a fresh child, and if it
does not crash alone, the batch's cases up to it run one by one to find the one that does.  A hang
costs ``timeout`` once: the case that hangs is not run again.  ``InProcessBackend`` has the same
interface without the isolation (``--isolation none``).

A backend's ``supports()`` that raises (or whose process dies or hangs answering) is reported by
``unsupported_reason`` raising ``SupportsFailed``, which carries the row's status (``error`` or
``crashed``) and why; the runner records that row and goes on.  The child ignores SIGINT: a Ctrl-C
at the terminal reaches the whole process group, and the parent decides what to do (it stops the
child with ``abort``).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Literal

import numpy as np

from conformance.backends import Backend, load_backend
from conformance.errors import BackendError

__all__ = ["CallOutcome", "InProcessBackend", "IsolatedBackend", "Request", "SupportsFailed"]

START_TIMEOUT_S = 300.0
BATCH_BYTES = 64 << 20
"""The most input bytes one batch carries to the child; a larger batch goes as several round trips."""

Request = tuple[Mapping[str, np.ndarray], Mapping[str, str], Mapping[str, Any]]
"""One call: the inputs (carriers), their dtypes and the params."""


@dataclass
class CallOutcome:
    """What one backend call did."""

    kind: Literal["ok", "raised", "crash", "timeout"]
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    exc_type: str = ""
    exc_bases: tuple[str, ...] = ()
    message: str = ""


class SupportsFailed(Exception):
    """A backend could not say whether it supports a parameter set: ``status`` is the row's status
    (``error`` where its ``supports()`` raised, ``crashed`` where its process died or hung), ``message`` why."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def _supports_raised(contract: str, exc_type: str, message: str) -> SupportsFailed:
    return SupportsFailed("error", f"the backend's supports() for {contract} raised {exc_type}: {message}")


def _describe(backend: Backend) -> dict[str, Any]:
    validating = {c for c in backend.contracts if (impl := backend.implementation(c)) and impl.validates_inputs}
    return {"name": backend.name, "device": backend.device, "array_kind": backend.array_kind,
            "info": dict(backend.info), "contracts": sorted(backend.contracts),
            "validates_inputs": sorted(validating)}  # fmt: skip


def _call(backend: Backend, request: Mapping[str, Any]) -> CallOutcome:
    try:
        outputs = backend.call(request["contract"], request["inputs"], request["dtypes"], request["params"])
    except Exception as exc:  # a backend's own error is data for the report
        message = f"{exc}\n{''.join(traceback.format_exception(exc)[-3:])}"
        bases = tuple(c.__name__ for c in type(exc).__mro__)
        return CallOutcome("raised", exc_type=type(exc).__name__, exc_bases=bases, message=message.strip())
    return CallOutcome("ok", outputs)


def _sweep_chunk(backend: Backend, request: Mapping[str, Any]) -> str | None:
    """Run one exhaustive-sweep chunk; outputs go to shared memory. Returns an error or None."""
    from conformance.exhaustive import spec_for, sweep_inputs, write_outputs

    spec = spec_for(request["contract"])
    inputs = sweep_inputs(spec, request["params"], request["start"], request["count"])
    dtypes = {n: t.dtype for n, t in inputs.items()}
    outcome = _call(backend, {"contract": spec.contract, "inputs": {n: t.carrier() for n, t in inputs.items()},
                              "dtypes": dtypes, "params": request["params"]})  # fmt: skip
    if outcome.kind != "ok":
        return f"{outcome.exc_type}: {outcome.message}"
    try:
        write_outputs(request["shm_name"], spec, dtypes, outcome.outputs)
    except (TypeError, KeyError, ValueError) as exc:
        return f"bad outputs: {exc}"
    return None


def _serve(backend_name: str, conn: Connection) -> None:
    """Child process main loop; it ends quietly when its parent is gone (a stopped run)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C (module docstring)
    with contextlib.suppress(BrokenPipeError, ConnectionResetError, EOFError):
        _answer(backend_name, conn)


def _answer(backend_name: str, conn: Connection) -> None:
    try:
        backend = load_backend(backend_name)
    except BackendError as exc:  # its message already says "cannot load backend ..."
        conn.send(("load_error", str(exc)))
        return
    except Exception as exc:
        conn.send(("load_error", f"cannot load backend {backend_name!r}: {type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", _describe(backend)))
    while True:
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError):  # the parent is gone (a stopped run): nothing to answer
            return
        if kind == "stop":
            return
        if kind == "supports":
            try:
                answer: Any = backend.unsupported_reason(payload["contract"], payload["params"])
            except Exception as exc:  # sent back as data: the row is an error, the run goes on
                answer = CallOutcome("raised", exc_type=type(exc).__name__, message=str(exc))
            conn.send(("ok", answer))
        elif kind == "call":
            conn.send(("ok", _call(backend, payload)))
        elif kind == "batch":  # answer each call as it finishes: the parent times each one
            for request in payload:
                conn.send(("ok", _call(backend, request)))
        elif kind == "sweep":
            conn.send(("ok", _sweep_chunk(backend, payload)))


class InProcessBackend:
    """A backend called directly in this process."""

    def __init__(self, name: str, timeout: float = 0.0):
        self.backend = load_backend(name)
        self.description = _describe(self.backend)

    def unsupported_reason(self, contract: str, params: Mapping[str, Any]) -> str | None:
        """The backend's reason for not implementing ``params``, or None; ``SupportsFailed`` where it raised."""
        try:
            return self.backend.unsupported_reason(contract, params)
        except Exception as exc:
            raise _supports_raised(contract, type(exc).__name__, str(exc)) from exc

    def call(
        self, contract: str, inputs: Mapping[str, np.ndarray], dtypes: Mapping[str, str], params: Mapping[str, Any]
    ) -> CallOutcome:
        return _call(self.backend, {"contract": contract, "inputs": inputs, "dtypes": dtypes, "params": params})

    def submit(self, contract: str, requests: Sequence[Request]) -> Callable[[], list[CallOutcome]]:
        """The calls, run when the returned function is called (nothing runs beside the caller here)."""
        return lambda: [self.call(contract, *request) for request in requests]

    def sweep_chunk(
        self, contract: str, params: Mapping[str, Any], start: int, count: int, shm_name: str
    ) -> str | None:
        request = {"contract": contract, "params": dict(params), "start": start, "count": count, "shm_name": shm_name}
        return _sweep_chunk(self.backend, request)

    def close(self) -> None:
        """Nothing to release."""

    def abort(self) -> None:
        """Nothing to stop (an interrupted run)."""


class IsolatedBackend:
    """A backend in a restartable child process; see the module docstring."""

    def __init__(self, name: str, timeout: float = 60.0):
        self.name = name
        self.timeout = timeout
        self.restarts = 0
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None
        self.description: dict[str, Any] = self._start()

    def _start(self) -> dict[str, Any]:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        process = ctx.Process(target=_serve, args=(self.name, child), daemon=True, name=f"qconform-{self.name}")
        process.start()
        child.close()
        if not parent.poll(START_TIMEOUT_S):
            process.kill()
            raise BackendError(f"backend {self.name!r} did not start within {START_TIMEOUT_S:.0f} s")
        try:
            kind, payload = parent.recv()
        except EOFError:
            raise BackendError(f"backend {self.name!r} died while loading (exit code {process.exitcode})") from None
        if kind != "ready":
            process.join()
            raise BackendError(str(payload))
        self._process, self._conn = process, parent
        return dict(payload)

    def _kill(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.join(timeout=10)
        if self._conn is not None:
            self._conn.close()
        self._process = self._conn = None

    def _request(self, kind: str, payload: Mapping[str, Any], timeout: float) -> tuple[str, Any]:
        if self._conn is None:
            self.restarts += 1
            self._start()
        assert self._conn is not None and self._process is not None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a dead child: receiving says so
            self._conn.send((kind, payload))
        return self._receive(timeout)

    def unsupported_reason(self, contract: str, params: Mapping[str, Any]) -> str | None:
        status, value = self._request("supports", {"contract": contract, "params": dict(params)}, START_TIMEOUT_S)
        if status != "ok":
            raise SupportsFailed("crashed", f"backend {status} while answering whether it supports {contract}: {value}")
        if isinstance(value, CallOutcome):
            raise _supports_raised(contract, value.exc_type, value.message)
        return None if value is None else str(value)

    def call(
        self, contract: str, inputs: Mapping[str, np.ndarray], dtypes: Mapping[str, str], params: Mapping[str, Any]
    ) -> CallOutcome:
        payload = {"contract": contract, "inputs": dict(inputs), "dtypes": dict(dtypes), "params": dict(params)}
        status, value = self._request("call", payload, self.timeout)
        if status == "ok":
            assert isinstance(value, CallOutcome)
            return value
        return CallOutcome("timeout" if status == "timeout" else "crash", message=value)

    def submit(self, contract: str, requests: Sequence[Request]) -> Callable[[], list[CallOutcome]]:
        """Send the calls to the child now (in batches of at most ``BATCH_BYTES`` of inputs); the returned
        function collects their outcomes, in order.  The outcomes stop at the first crash or timeout."""
        payloads = [
            {"contract": contract, "inputs": dict(inputs), "dtypes": dict(dtypes), "params": dict(params)}
            for inputs, dtypes, params in requests
        ]
        batches = _batches(payloads)
        if batches:
            self._send_batch(batches[0])
        return lambda: self._collect(batches)

    def _send_batch(self, batch: list[dict[str, Any]]) -> None:
        """Send one batch, to a fresh child if the last one died before it could take it."""
        for attempt in range(2):
            if self._conn is None:
                self.restarts += 1
                self._start()
            assert self._conn is not None
            try:
                self._conn.send(("batch", batch))
                return
            except (BrokenPipeError, ConnectionResetError, EOFError):
                self._kill()
                if attempt:
                    raise BackendError(f"backend {self.name!r}: its process dies before it takes a batch") from None

    def _collect(self, batches: list[list[dict[str, Any]]]) -> list[CallOutcome]:
        outcomes: list[CallOutcome] = []
        for i, batch in enumerate(batches):
            if i:
                self._send_batch(batch)
            got = self._answers(batch)
            outcomes += got
            if len(got) < len(batch):
                break
        return outcomes

    def _answers(self, batch: list[dict[str, Any]]) -> list[CallOutcome]:
        """The outcomes of the sent ``batch``, each awaited for at most ``timeout``, up to the first crash or
        timeout; a crash is checked by running its case alone (module docstring)."""
        outcomes: list[CallOutcome] = []
        for payload in batch:
            status, value = self._receive(self.timeout)
            if status == "ok":
                outcomes.append(value)
            elif status == "timeout" or len(batch) == 1:
                return [*outcomes, CallOutcome("timeout" if status == "timeout" else "crash", message=value)]
            else:
                return [*outcomes, self._crash_alone(payload, value)]
        return outcomes

    def _crash_alone(self, payload: Mapping[str, Any], message: str) -> CallOutcome:
        """The outcome of a case whose batch crashed while it ran: its own crash (or hang) when it crashes
        alone in a fresh child, else a crash that says the earlier cases of its batch left the process broken."""
        alone = self.call(payload["contract"], payload["inputs"], payload["dtypes"], payload["params"])
        if alone.kind in ("crash", "timeout"):
            return alone
        note = "run alone in a fresh process it did not crash: a case before it in the same process broke the process"
        return CallOutcome("crash", message=f"{message}; {note}")

    def _receive(self, timeout: float) -> tuple[str, Any]:
        assert self._conn is not None and self._process is not None
        try:
            if not self._conn.poll(timeout):
                self._kill()
                return "timeout", f"no answer within {timeout:g} s; the worker was killed and restarted"
            return "ok", self._conn.recv()[1]
        except (EOFError, BrokenPipeError, ConnectionResetError):
            self._process.join(timeout=10)
            code = self._process.exitcode
            self._kill()
            return "crash", f"the backend process died (exit code {code}); restarted"

    def sweep_chunk(
        self, contract: str, params: Mapping[str, Any], start: int, count: int, shm_name: str
    ) -> str | None:
        """One exhaustive-sweep chunk in the worker (outputs to shared memory); an error or None."""
        request = {"contract": contract, "params": dict(params), "start": start, "count": count, "shm_name": shm_name}
        status, value = self._request("sweep", request, self.timeout)
        return (None if value is None else str(value)) if status == "ok" else f"{status}: {value}"

    def abort(self) -> None:
        """Kill the worker now, whatever it is doing (an interrupted run)."""
        self._kill()

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(BrokenPipeError, OSError):
                self._conn.send(("stop", None))
            if self._process is not None:
                self._process.join(timeout=10)
        self._kill()


def _batches(payloads: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """``payloads`` in order, cut into batches of at most ``BATCH_BYTES`` of input arrays (at least one call each)."""
    batches: list[list[dict[str, Any]]] = []
    size = 0
    for payload in payloads:
        nbytes = sum(np.asarray(a).nbytes for a in payload["inputs"].values())
        if not batches or (batches[-1] and size + nbytes > BATCH_BYTES):
            batches.append([])
            size = 0
        batches[-1].append(payload)
        size += nbytes
    return batches
