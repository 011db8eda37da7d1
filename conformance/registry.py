"""Load, validate and index the contract specs.

A spec is one YAML file per contract (``specs/<family>/<operation>.yaml``).  Loading is
safe (``yaml.safe_load``); every spec is validated against ``schemas/spec.schema.json``
and then checked semantically (defaults inside their domains, expressions that read only
known names, value classes that name known formats).  Any problem is a ``SpecError``
naming the file, the line, the key path and what was expected; nothing runs on an
invalid spec.

*Member params* describe the members of a grouped tensor: a param with ``members: <count>``
is a list of ``<count>`` ints (``<count>`` an expression over earlier params), each within
``range`` and a multiple of ``multiple_of``, drawn per case.  Dim bounds, constraints and
output shapes may add an expression over the members with ``sum(...)``: inside it, each
member param stands for one member's value (``sum(first_dims * last_dims)``).  The sums are
resolved here (:meth:`Spec.resolve`) before the expression evaluator sees them.
"""

from __future__ import annotations

import ast
import builtins
import fnmatch
import functools
import hashlib
import importlib
import itertools
import json
import marshal
import os
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import yaml

from conformance.carriers import DTYPES
from conformance.errors import SpecError
from conformance.expr import check_expression, evaluate, names_in
from conformance.formats import FORMATS
from conformance.values import INTEGER_CODE_BITS

__all__ = ["Param", "Spec", "default_spec_dir", "load_spec", "load_specs"]

PROFILE_DEFAULTS = {"smoke": 20, "default": 200, "thorough": 2000}
PROFILES = (*PROFILE_DEFAULTS, "exhaustive")
_SCHEMA_PATH = Path(__file__).parent / "schemas" / "spec.schema.json"


def default_spec_dir() -> Path:
    """``specs/`` shipped in the wheel (``conformance/specs``) or beside the source tree."""
    for candidate in (Path(__file__).parent / "specs", Path(__file__).parent.parent / "specs"):
        if candidate.is_dir():
            return candidate
    raise SpecError("no specs directory found next to the conformance package")


@dataclass(frozen=True)
class Param:
    """A contract parameter: a finite domain (``values``), an integer ``range``, or, with ``members``,
    a list of ``members`` ints (an expression over earlier params), each in ``range`` and a multiple
    of ``multiple_of`` (an expression over params)."""

    name: str
    default: Any
    values: tuple[Any, ...] | None = None
    range: tuple[int, int] | None = None
    doc: str = ""
    sources: Mapping[str, str] = field(default_factory=dict)
    members: str | None = None
    multiple_of: int | str = 1

    @property
    def finite(self) -> bool:
        return self.values is not None

    def boundary_values(self) -> tuple[Any, ...]:
        """The values boundary-first cases use: every finite value, or min/default/max."""
        if self.values is not None:
            return self.values
        assert self.range is not None
        return tuple(dict.fromkeys((self.range[0], self.default, self.range[1])))


@dataclass(frozen=True)
class Spec:
    """One validated contract spec; ``raw`` is the YAML mapping as loaded."""

    path: Path
    raw: Mapping[str, Any]
    sha256: str

    @property
    def contract(self) -> str:
        return str(self.raw["contract"])

    @property
    def family(self) -> str:
        return self.contract.split(".")[0]

    @property
    def operation(self) -> str:
        return self.contract.split(".")[1]

    @property
    def function_name(self) -> str:
        """Name of the implementing function: the operation, with a trailing underscore where
        it would shadow a Python builtin (PEP 8), e.g. ``cast.int`` -> ``int_``."""
        return f"{self.operation}_" if hasattr(builtins, self.operation) else self.operation

    @property
    def elementwise(self) -> bool:
        return bool(self.raw.get("elementwise", False))

    @functools.cached_property
    def params(self) -> dict[str, Param]:
        out = {}
        for name, p in (self.raw.get("params") or {}).items():
            values = tuple(p["values"]) if "values" in p else None
            rng = tuple(p["range"]) if "range" in p else None
            members = str(p["members"]) if "members" in p else None
            default = list(p["default"]) if members is not None else p["default"]
            doc, sources, step = p.get("doc", ""), p.get("sources", {}), p.get("multiple_of", 1)
            out[name] = Param(name, default, values, rng, doc, sources, members, step)
        return out

    @property
    def member_params(self) -> tuple[str, ...]:
        """Names of the member params (lists of one int per member of a grouped tensor)."""
        return tuple(name for name, p in self.params.items() if p.members is not None)

    def resolve(self, source: str | int, params: Mapping[str, Any]) -> str | int:
        """``source`` with every ``sum(e)`` replaced by the sum of ``e`` over the members (module docstring)."""
        return _resolve_member_sums(source, params, self.member_params)

    @property
    def inputs(self) -> Mapping[str, Mapping[str, Any]]:
        return self.raw["inputs"]

    def active_inputs(self, params: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
        """The inputs that exist for ``params`` (those whose ``when`` holds, or has none)."""
        return {n: d for n, d in self.inputs.items() if "when" not in d or bool(evaluate(d["when"], params))}

    @property
    def outputs(self) -> Mapping[str, Mapping[str, Any]]:
        return self.raw["outputs"]

    def active_outputs(self, params: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
        """The outputs that exist for ``params`` (those whose ``when`` holds, or has none), their
        ``shape`` with the member sums of ``params`` resolved."""
        return {
            n: {**d, "shape": self.resolve(d["shape"], params)}
            for n, d in self.outputs.items()
            if "when" not in d or bool(evaluate(d["when"], params))
        }

    @property
    def dims(self) -> Mapping[str, Mapping[str, Any]]:
        return self.raw.get("dims") or {}

    def dims_of(self, shapes: Mapping[str, Sequence[int]]) -> dict[str, int]:
        """The scalar dims that the given input ``shapes`` show (``N`` of an input declared ``[N, K]``).

        Output shapes may name dims; a case carries its inputs' shapes, and these give the dims back.
        A variadic ``*name`` takes the extra axes and is left out (it is not a scalar).
        """
        found: dict[str, int] = {}
        for name, shape in shapes.items():
            declared = list(self.inputs[name]["shape"]) if name in self.inputs else []
            star = next((i for i, e in enumerate(declared) if isinstance(e, str) and e.startswith("*")), None)
            extra = len(shape) - len(declared) + (star is not None)
            if extra < 0 or (star is None and extra):
                continue  # a literal case whose rank does not follow the declaration
            for i, entry in enumerate(declared):
                if isinstance(entry, str) and not entry.startswith("*"):
                    axis = i if star is None or i < star else i - 1 + extra
                    found.setdefault(entry, int(shape[axis]))
        return found

    @property
    def constraints(self) -> Sequence[str]:
        return self.raw.get("constraints") or []

    def examples_for(self, profile: str) -> int:
        """Random cases per row; ``exhaustive`` runs the ``thorough`` count where it cannot sweep."""
        profile = "thorough" if profile == "exhaustive" else profile
        return int((self.raw.get("profiles") or {}).get(profile, PROFILE_DEFAULTS[profile]))

    def param_combinations(self) -> list[dict[str, Any]]:
        """Cross product of the finite parameters (one report row each).

        A constraint that reads finite parameters only decides whole rows: a combination it
        rejects could have no case, so it is not a row (e.g. a zero-point domain that exists
        for one mapping only).
        """
        finite = [p for p in self.params.values() if p.finite]
        names = {p.name for p in finite}
        row_rules = [c for c in self.constraints if _names(_member_sums(c)[0]) <= names]
        combos = [
            dict(zip((p.name for p in finite), combo, strict=False))
            for combo in itertools.product(*(p.values or () for p in finite))
        ]
        try:
            return [c for c in combos if all(bool(evaluate(rule, c)) for rule in row_rules)]
        except SpecError as exc:
            raise SpecError(f"{self.path}: constraints: {exc}") from None

    def with_defaults(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` completed with the defaults of the parameters it leaves out."""
        unknown = set(params) - set(self.params)
        if unknown:
            raise SpecError(f"{self.contract}: unknown params {sorted(unknown)}; known: {sorted(self.params)}")
        return {name: params.get(name, p.default) for name, p in self.params.items()}

    def output_dtype(self, name: str, input_dtypes: Mapping[str, str]) -> str:
        """An output's dtype: a dtype name, or ``<input>.dtype`` for "same as that input"."""
        dtype = str(self.outputs[name]["dtype"])
        return input_dtypes[dtype.removesuffix(".dtype")] if dtype.endswith(".dtype") else dtype

    def reference_function(self) -> Callable[..., Mapping[str, Any]]:
        """``reference.<family>.<function_name>``: the contract's NumPy reference."""
        module = importlib.import_module(f"reference.{self.family}")
        function: Callable[..., Mapping[str, Any]] = getattr(module, self.function_name)
        return function


_PLACEHOLDER = "__sum{}__"


@functools.cache
def _member_sums(source: str) -> tuple[str, tuple[str, ...]]:
    """``source`` with each ``sum(inner)`` call replaced by a placeholder name, and the ``inner`` expressions."""
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError:
        return source, ()  # the expression checker reports it with its position
    inners: list[str] = []

    class _Sums(ast.NodeTransformer):
        def visit_Call(self, node: ast.Call) -> ast.AST:
            if not (isinstance(node.func, ast.Name) and node.func.id == "sum"):
                return self.generic_visit(node)
            if len(node.args) != 1 or node.keywords:
                raise SpecError(f"expression {source!r}: sum takes one expression over the member params")
            inners.append(ast.unparse(node.args[0]))
            return ast.copy_location(ast.Name(_PLACEHOLDER.format(len(inners) - 1), ast.Load()), node)

    return ast.unparse(_Sums().visit(tree)), tuple(inners)


@functools.cache
def _names(source: str) -> frozenset[str]:
    return frozenset(names_in(source))


def _replace_member_sums(source: str, total: Callable[[str], int]) -> str:
    """``source`` with each ``sum(inner)`` call replaced by the constant ``total(inner)``."""
    template, inners = _member_sums(source)
    for i, inner in enumerate(inners):
        template = template.replace(_PLACEHOLDER.format(i), str(total(inner)))
    return template


def _resolve_member_sums(source: str | int, params: Mapping[str, Any], members: Sequence[str]) -> str | int:
    """``source`` with ``sum(e)`` replaced by the sum of ``e`` over the members of ``params``.

    ``e`` is evaluated once, its member params as integer arrays (so it may use arithmetic,
    comparisons, ``ceil_div`` and ``round_up``, elementwise), and the elements are added.
    """
    if not isinstance(source, str) or "sum" not in source:
        return source

    def total(inner: str) -> int:
        used = sorted(_names(inner) & set(members))
        lengths = {m: len(params[m]) for m in used}
        if len(set(lengths.values())) != 1:
            raise SpecError(f"sum({inner}) needs member params of one length; got {lengths}")
        arrays = {m: np.asarray(params[m], dtype=np.int64) for m in used}
        return int(np.sum(evaluate(inner, {**params, **arrays})))

    return _replace_member_sums(source, total)


# -- loading -------------------------------------------------------------------------------
@functools.cache
def _schema_validator() -> jsonschema.protocols.Validator:
    schema = json.loads(_SCHEMA_PATH.read_text())
    return jsonschema.Draft202012Validator(schema)


_LOADER: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML was built with it (about 25 times faster), the pure-Python one otherwise."""


def _line_of(node: yaml.Node | None, path: Sequence[Any]) -> int | None:
    """1-based line of the YAML node at ``path`` (or of its nearest existing parent)."""
    line = None if node is None else node.start_mark.line + 1
    for key in path:
        if isinstance(node, yaml.MappingNode):
            match = next((v for k, v in node.value if k.value == key), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            match = node.value[key]
        else:
            match = None
        if match is None:
            break
        node, line = match, match.start_mark.line + 1
    return line


def _fail(path: Path, text: str, keys: Sequence[Any], message: str) -> SpecError:
    """A ``SpecError`` at ``path:line``; the node tree that gives the line is composed only now, for the error."""
    where = ".".join(str(k) for k in keys) or "<top>"
    line = _line_of(yaml.compose(text, Loader=_LOADER), keys)
    return SpecError(f"{path}:{line}: {where}: {message}")


def load_spec(path: Path) -> Spec:
    """Load and validate one spec file (parsed once, with libyaml where present; cached per file contents)."""
    text = path.read_text()
    return _load_text(path, text)


@functools.lru_cache(maxsize=256)
def _load_text(path: Path, text: str) -> Spec:
    sha256 = hashlib.sha256(text.encode()).hexdigest()
    raw = _cached_parse(sha256)
    if raw is None:
        try:
            if "&" in text:  # anchors, so maybe aliases: count what they expand to before building anything
                tree = yaml.compose(text, Loader=_LOADER)
                _refuse_alias_bombs(path, tree)
                raw = yaml.constructor.SafeConstructor().construct_document(tree) if tree is not None else None
            else:  # no anchor, no alias: one pass of libyaml
                raw = yaml.load(text, Loader=_LOADER)
        except yaml.YAMLError as exc:
            raise SpecError(f"{path}: not valid YAML: {exc}") from None
        if not isinstance(raw, dict):
            raise SpecError(f"{path}:1: <top>: expected a mapping of spec keys, got {type(raw).__name__}")
        error = jsonschema.exceptions.best_match(_schema_validator().iter_errors(raw))
        if error is not None:
            raise _fail(path, text, list(error.absolute_path), _describe(error))
        _store_parse(sha256, raw)
    _check_semantics(path, text, raw)
    return Spec(path, raw, sha256)


def _cache_file(sha256: str) -> Path | None:
    """Where the parsed, schema-valid form of a spec text is kept: ``QCONFORM_CACHE_DIR`` (default
    ``~/.cache/qconform``), keyed by the text's and the schema's hashes; ``None`` when caching is off
    (``QCONFORM_CACHE_DIR`` empty)."""
    root = os.environ.get("QCONFORM_CACHE_DIR", str(Path.home() / ".cache" / "qconform"))
    return Path(root) / "specs" / f"{sha256[:32]}-{_schema_sha256()[:16]}.marshal" if root else None


@functools.cache
def _schema_sha256() -> str:
    return hashlib.sha256(_SCHEMA_PATH.read_bytes()).hexdigest()


def _cached_parse(sha256: str) -> dict[str, Any] | None:
    """The cached parse of a spec text (``marshal``: plain data only, nothing executes), or ``None``."""
    path = _cache_file(sha256)
    try:
        raw = marshal.loads(path.read_bytes()) if path is not None else None
    except (OSError, EOFError, ValueError, TypeError):
        return None
    return raw if isinstance(raw, dict) else None


def _store_parse(sha256: str, raw: dict[str, Any]) -> None:
    """Keep the parse of a valid spec text for the next process; a cache that cannot be written is skipped."""
    path = _cache_file(sha256)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_bytes(marshal.dumps(raw))
        temporary.replace(path)
    except (OSError, ValueError):
        return


MAX_EXPANDED_NODES = 100_000
"""The most YAML nodes a spec may hold with its aliases expanded (the largest spec holds a few thousand)."""


def _refuse_alias_bombs(path: Path, tree: yaml.Node | None) -> None:
    """``SpecError`` with file:line where aliases (``*name``, ``<<: *name``) would expand ``tree`` beyond
    ``MAX_EXPANDED_NODES`` nodes (a "billion laughs" chain: each level repeats the last, and the run would
    copy it out until memory ran out), or where an alias refers to a node that contains it (a cycle).

    A composed tree shares the node of an anchor at each of its aliases, so the expanded size of every node
    is counted once per distinct node: the check takes time linear in the file.
    """
    if tree is None:
        return
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def children(node: yaml.Node) -> list[yaml.Node]:
        if isinstance(node, yaml.MappingNode):
            return [n for pair in node.value for n in pair]
        if isinstance(node, yaml.SequenceNode):
            return list(node.value)
        return []

    stack: list[tuple[yaml.Node, bool]] = [(tree, False)]
    while stack:  # iterative post-order: a deep alias chain must not exhaust the Python stack
        node, done = stack.pop()
        key = id(node)
        if done:
            open_nodes.discard(key)
            sizes[key] = min(1 + sum(sizes[id(c)] for c in children(node)), MAX_EXPANDED_NODES + 1)
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            line = node.start_mark.line + 1
            raise SpecError(f"{path}:{line}: a YAML alias refers to the node that contains it (a cycle); specs "
                            "may use anchors and aliases only for values that do not contain themselves")  # fmt: skip
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children(node) if id(c) not in sizes)
    if sizes[id(tree)] <= MAX_EXPANDED_NODES:
        return
    node = tree
    while True:  # the deepest node that is too large by itself: where the repetition happens
        big = next((c for c in children(node) if sizes[id(c)] > MAX_EXPANDED_NODES), None)
        if big is None:
            break
        node = big
    raise SpecError(
        f"{path}:{node.start_mark.line + 1}: YAML aliases expand this value to more than {MAX_EXPANDED_NODES} "
        "nodes (an alias chain that repeats itself); write the value out, or use fewer aliases"
    )


def _describe(error: jsonschema.ValidationError) -> str:
    if error.validator == "additionalProperties":
        return f"{error.message}; allowed keys: {sorted(error.schema.get('properties', {}))}"
    if error.validator == "required":
        return error.message
    return f"{error.message} (schema rule: {error.validator})"


def _check_semantics(path: Path, text: str, raw: Mapping[str, Any]) -> None:
    expected_name = f"{raw['contract'].split('.')[1]}.yaml"
    if path.name != expected_name or path.parent.name != raw["contract"].split(".")[0]:
        raise _fail(
            path, text, ["contract"], f"{raw['contract']!r} must live in specs/{raw['contract'].replace('.', '/')}.yaml"
        )
    params = raw.get("params") or {}
    members = {name for name, p in params.items() if "members" in p}
    for name, p in params.items():
        if "values" in p and p["default"] not in p["values"]:
            raise _fail(path, text, ["params", name, "default"], f"got {p['default']!r}, expected one of {p['values']}")
        if name in members:
            _check_member_param(path, text, name, p, params)
        elif "range" in p and not (p["range"][0] <= p["default"] <= p["range"][1]):
            raise _fail(path, text, ["params", name, "default"], f"got {p['default']!r}, expected within {p['range']}")
    dims = raw.get("dims") or {}
    known = set(params) | set(dims) | set(raw["inputs"])
    for name, d in dims.items():
        for key in ("min", "max", "multiple_of"):
            if isinstance(d.get(key), str):
                _check_expr(path, text, ["dims", name, key], d[key], known, members)
    for i, c in enumerate(raw.get("constraints") or []):
        _check_expr(path, text, ["constraints", i], c, known, members)
    for name, spec in raw["inputs"].items():
        if "when" in spec:
            _check_expr(path, text, ["inputs", name, "when"], spec["when"], set(params))
        for i, entry in enumerate(spec["shape"]):
            dim = str(entry).lstrip("*")
            if isinstance(entry, str) and dim not in dims:
                raise _fail(path, text, ["inputs", name, "shape", i], f"dim {dim!r} is not declared under dims")
            if isinstance(entry, str) and entry.startswith("*") != ("rank" in dims[dim]):
                raise _fail(path, text, ["inputs", name, "shape", i], f"'*{dim}' and dims.{dim}.rank go together")
        for i, dtype in enumerate(spec["dtypes"]):
            named = params.get(dtype[1:], {}).get("values") if dtype.startswith("$") else [dtype]
            if not named or any(d not in DTYPES for d in named):
                raise _fail(
                    path, text, ["inputs", name, "dtypes", i], f"got {dtype!r}, expected a dtype or a $param of dtypes"
                )
        for i, vc in enumerate(spec["values"]):
            sized = vc.get("dims", {}) if isinstance(vc, dict) else {}
            if bad := [d for d in sized if d not in dims or "rank" in dims[d]]:
                expected = f"scalar dims of {sorted(d for d in dims if 'rank' not in dims[d])}"
                raise _fail(path, text, ["inputs", name, "values", i, "dims"], f"got {bad}, expected {expected}")
            fmt = vc.get("format") if isinstance(vc, dict) else None
            if fmt is not None and fmt.lstrip("$") not in (
                params if fmt.startswith("$") else {**FORMATS, **INTEGER_CODE_BITS}
            ):
                raise _fail(
                    path,
                    text,
                    ["inputs", name, "values", i, "format"],
                    f"got {fmt!r}, expected a format name or $param",
                )
    for name, out in raw["outputs"].items():
        if out["dtype"] not in DTYPES and out["dtype"].removesuffix(".dtype") not in raw["inputs"]:
            expected = f"one of {sorted(DTYPES)} or <input>.dtype"
            raise _fail(path, text, ["outputs", name, "dtype"], f"got {out['dtype']!r}, expected {expected}")
        _check_expr(path, text, ["outputs", name, "shape"], out["shape"], known, members)
        if "when" in out:
            _check_expr(path, text, ["outputs", name, "when"], out["when"], set(params))


def _check_member_param(path: Path, text: str, name: str, p: Mapping[str, Any], params: Mapping[str, Any]) -> None:
    """A member param: ``members`` and ``multiple_of`` over the finite params and the range params declared
    before it (the order in which random cases draw them), a default list that fits ``range``."""
    keys = ["params", name]
    earlier = list(params)[: list(params).index(name)]
    scalars = {n for n, q in params.items() if "values" in q} | {n for n in earlier if "members" not in params[n]}
    _check_expr(path, text, [*keys, "members"], str(p["members"]), scalars)
    if isinstance(p.get("multiple_of"), str):
        _check_expr(path, text, [*keys, "multiple_of"], p["multiple_of"], scalars)
    defaults = {n: q["default"] for n, q in params.items()}
    count = int(evaluate(str(p["members"]), defaults))
    step = int(evaluate(p.get("multiple_of", 1), defaults))
    lo, hi = p["range"]
    default = p["default"]
    if not isinstance(default, list) or len(default) != count or any(not lo <= v <= hi or v % step for v in default):
        expected = f"a list of {count} ints within {p['range']}, multiples of {step}"
        raise _fail(path, text, [*keys, "default"], f"got {default!r}, expected {expected}")


def _check_expr(
    path: Path, text: str, keys: list[Any], source: str, known: set[str], members: Collection[str] = ()
) -> None:
    """``source`` parses and reads ``known`` names; each ``sum(inner)`` reads a member param (module docstring)."""

    def inner_checked(inner: str) -> int:
        check_expression(inner, known)
        if not names_in(inner) & set(members):
            raise SpecError(f"sum({inner}) reads no member param; the member params are {sorted(members)}")
        return 0

    try:
        check_expression(_replace_member_sums(source, inner_checked), known)
    except SpecError as exc:
        raise _fail(path, text, keys, str(exc)) from None


def iter_spec_paths(spec_dir: Path | None = None) -> Iterator[Path]:
    yield from sorted((spec_dir or default_spec_dir()).glob("*/*.yaml"))


def load_specs(pattern: str = "*", spec_dir: Path | None = None) -> list[Spec]:
    """Every spec whose contract id matches the glob ``pattern`` (e.g. ``cast.*``).

    A spec's id is its path (``specs/<family>/<operation>.yaml``, which loading checks), so only the
    files the pattern names are read.
    """
    paths = list(iter_spec_paths(spec_dir))
    chosen = [p for p in paths if fnmatch.fnmatchcase(f"{p.parent.name}.{p.stem}", pattern)]
    if not chosen:
        known = [f"{p.parent.name}.{p.stem}" for p in paths]
        raise SpecError(f"no spec matches {pattern!r}; known contracts: {known}")
    return [load_spec(p) for p in chosen]
