"""The :class:`Derivation` type, its verification report, and the registry of derivations.

A derivation is a first-class object:

- ``assumptions``: the sympy symbols (with their assumptions) and the model assumptions in words;
- ``steps``: an ordered tuple of :class:`Step` (key, description, sympy expression). Each step is
  computed by sympy from earlier steps inside :meth:`Derivation._build`; nothing is typed in as a
  result. A step can be *mutated* (``Derivation.mutated(key, fn)``): the mutation is applied when
  the step is recorded, so it propagates to every later step, to the predictions and to the
  checks. Mutation tests use this to prove that :meth:`Derivation.verify` has teeth;
- ``statement``: the final result (a step);
- ``verify(seed=0)``: runs the checks (``symbolic``, ``numeric``, ``monte-carlo``) and returns a
  :class:`VerifyReport`;
- ``predict(quantity, **params)``: lambdified, numpy-vectorised predictions;
- ``to_markdown()`` / ``to_latex()``: the derivation for humans.

Registry: :func:`get` returns the (cached, unmutated) instance of a registered derivation,
:func:`names` lists the names in a fixed order.
"""

from __future__ import annotations

import abc
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy as sp

from tangentlab.config import Bound
from tangentlab.errors import UnknownNameError, ValidationError
from tangentlab.registry import Registry

__all__ = [
    "DerivationCheck",
    "CheckSpec",
    "Derivation",
    "Param",
    "Prediction",
    "Step",
    "VerifyReport",
    "get",
    "names",
    "predict",
    "CHECK_KINDS",
]

#: The kinds a check can have.
CHECK_KINDS = ("symbolic", "numeric", "monte-carlo")


# --------------------------------------------------------------------------------------------
# Steps and checks
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One step of a derivation: a key (for lookup and mutation), words, and a sympy object."""

    key: str
    description: str
    expr: Any
    mutated: bool = False

    def latex(self) -> str:
        """The expression as LaTeX (``lhs = rhs`` for equations)."""
        return _latex(self.expr)


@dataclass(frozen=True)
class DerivationCheck:
    """The outcome of one check of a derivation: symbolic, numeric or Monte Carlo.

    Compare :class:`tangentlab.synthetic.AgreementCheck`, a theory-vs-measurement check.

    ``residual`` is the quantity that must be small (symbolic: a numeric measure of the simplified
    difference, 0 when it simplifies to exactly zero; numeric: the largest relative error;
    monte-carlo: the error in units of its tolerance scale, see ``detail``). ``passed`` is
    ``residual <= tolerance``.
    """

    name: str
    kind: str
    passed: bool
    residual: float
    tolerance: float
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (:func:`tangentlab.contract.jsonable`: NaN null, infinity ``"inf"``)."""
        from tangentlab.contract import jsonable

        return {
            "name": self.name,
            "kind": self.kind,
            "passed": bool(self.passed),
            "residual": jsonable(float(self.residual)),
            "tolerance": jsonable(float(self.tolerance)),
            "detail": self.detail,
        }


@dataclass(frozen=True)
class CheckSpec:
    """A check before it runs: ``fn(derivation, rng) -> (residual, tolerance, detail)``."""

    name: str
    kind: str
    description: str
    fn: Callable[[Derivation, np.random.Generator], tuple[float, float, str]]

    def __post_init__(self) -> None:
        if self.kind not in CHECK_KINDS:
            raise ValidationError(f"check kind must be one of {CHECK_KINDS}, got {self.kind!r}")


@dataclass(frozen=True)
class VerifyReport:
    """The checks of one derivation at one seed; ``passed`` is True only if every check passed."""

    derivation: str
    seed: int
    checks: tuple[DerivationCheck, ...]
    seconds: float
    mutations: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """True when every check passed."""
        return bool(self.checks) and all(c.passed for c in self.checks)

    @property
    def failures(self) -> tuple[DerivationCheck, ...]:
        """The checks that failed."""
        return tuple(c for c in self.checks if not c.passed)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return {
            "derivation": self.derivation,
            "seed": int(self.seed),
            "passed": self.passed,
            "seconds": round(float(self.seconds), 4),
            "mutations": list(self.mutations),
            "checks": [c.to_dict() for c in self.checks],
        }


def _latex(expr: Any) -> str:
    if isinstance(expr, sp.core.relational.Relational):
        op = {"==": "=", "<=": r"\le", ">=": r"\ge", "<": "<", ">": ">"}.get(expr.rel_op, "=")
        return f"{sp.latex(expr.lhs)} {op} {sp.latex(expr.rhs)}"
    if isinstance(expr, (tuple, list)):
        return r",\quad ".join(_latex(e) for e in expr)
    if isinstance(expr, str):
        return expr
    return sp.latex(expr)


def symbolic_residual(expr: Any) -> float:
    """0.0 if ``expr`` simplifies to exactly zero, else a positive size of what is left.

    Used by symbolic checks: the size is the absolute value at a fixed generic point (all free
    symbols set to distinct simple rationals), or 1.0 when it cannot be evaluated.
    """
    if isinstance(expr, sp.MatrixBase):
        return max((symbolic_residual(e) for e in expr), default=0.0)
    e = sp.simplify(sp.expand(expr))
    if e == 0:
        return 0.0
    subs = {s: sp.Rational(3 + 2 * i, 7 + i) for i, s in enumerate(sorted(e.free_symbols, key=str))}
    try:
        val = abs(complex(e.subs(subs).evalf()))
    except (TypeError, ValueError):
        return 1.0
    return val if val > 0 else 1e-300


def relative_error(actual: Any, expected: Any, floor: float = 1e-300) -> float:
    """Max |actual - expected| / max(|expected|, floor), elementwise, as a float."""
    a = np.asarray(actual, dtype=np.float64)
    b = np.asarray(expected, dtype=np.float64)
    if a.shape != b.shape and a.size != 1 and b.size != 1:
        return math.inf
    with np.errstate(divide="ignore", invalid="ignore"):
        err = np.abs(a - b) / np.maximum(np.abs(b), floor)
    if not np.all(np.isfinite(err)):
        return math.inf
    return float(np.max(err)) if err.size else 0.0


# --------------------------------------------------------------------------------------------
# Predictions and their parameters
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """One parameter of a prediction.

    ``kind`` names a :class:`tangentlab.config.Bound` in :data:`PARAM_KINDS` (the same constraint
    type the configs declare, checked by the same code): ``"positive"`` (> 0), ``"nonneg"``
    (>= 0), ``"real"``, ``"int>=1"``, ``"int>=2"``, ``"prob"`` (in (0, 1)); or ``"choice"`` (one
    of ``choices``) or ``"array"`` (passed through; the predictor validates). ``default`` of
    ``REQUIRED`` means it must be given.
    """

    name: str
    kind: str
    description: str
    default: Any = None
    choices: tuple[str, ...] = ()
    required: bool = True


@dataclass(frozen=True)
class Prediction:
    """A numeric prediction: its parameters, its words, and ``fn(derivation, **params)``."""

    quantity: str
    description: str
    params: tuple[Param, ...]
    fn: Callable[..., Any]
    returns: str = ""

    def signature(self) -> str:
        """The prediction's call signature, e.g. ``visibility(t, ii_norm_sq, m, sampling='gaussian')``."""
        parts = []
        for p in self.params:
            if p.required:
                parts.append(p.name)
            else:
                parts.append(f"{p.name}={p.default!r}")
        return f"{self.quantity}({', '.join(parts)})"


#: The parameter kinds and the bound each stands for (one table; checked by Bound.problem).
PARAM_KINDS: dict[str, Bound] = {
    "positive": Bound(gt=0, finite=False),
    "nonneg": Bound(ge=0),
    "real": Bound(),
    "int>=0": Bound(ge=0, integer=True),
    "int>=1": Bound(ge=1, integer=True),
    "int>=2": Bound(ge=2, integer=True),
    "prob": Bound(gt=0, lt=1),
}


def _validate_param(quantity: str, p: Param, value: Any) -> Any:
    if p.kind == "array":
        return value
    if p.kind == "choice":
        bound = Bound(choices=p.choices)
    elif p.kind in PARAM_KINDS:
        bound = PARAM_KINDS[p.kind]
    else:
        raise ValidationError(f"{quantity}: parameter {p.name} has unknown kind {p.kind!r}; "
                              f"use one of {[*PARAM_KINDS, 'choice', 'array']}")
    if value is None:
        raise ValidationError(f"{quantity}: {p.name} is required ({p.description})")
    if p.kind != "choice":
        try:
            arr = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValidationError(
                f"{quantity}: {p.name} must be a number or numeric array, got {value!r}"
            ) from None
    why = bound.problem(value if p.kind == "choice" else arr)
    if why is not None:
        raise ValidationError(f"{quantity}: {p.name} {why} ({p.description}), got {value!r}")
    return value if p.kind == "choice" else (arr if arr.ndim else float(arr))


# --------------------------------------------------------------------------------------------
# The Derivation type
# --------------------------------------------------------------------------------------------


class _Recorder:
    """Collects steps during :meth:`Derivation._build`, applying mutations as they are recorded."""

    def __init__(self, mutations: Mapping[str, Callable[[Any], Any]]) -> None:
        self._mutations = dict(mutations)
        self.steps: list[Step] = []
        self.used: set[str] = set()

    def __call__(self, key: str, description: str, expr: Any) -> Any:
        if any(s.key == key for s in self.steps):
            raise ValueError(f"duplicate step key {key!r}")  # programming error
        mutated = False
        if key in self._mutations:
            expr = self._mutations[key](expr)
            self.used.add(key)
            mutated = True
        self.steps.append(Step(key, description, expr, mutated))
        return expr


class Derivation(abc.ABC):
    """Base class of every derivation (see the module docstring for the contract).

    Subclasses set ``name``, ``title``, ``summary``, ``model_assumptions`` and implement
    :meth:`_build` (record steps, return the key of the statement step and a dict of named
    symbols), :meth:`_predictions` and :meth:`_check_specs`.
    """

    name: str = ""
    title: str = ""
    summary: str = ""
    model_assumptions: tuple[str, ...] = ()
    #: Where the literature's statement is wrong or incomplete (rendered prominently).
    gaps: tuple[str, ...] = ()

    def __init__(self, mutations: Mapping[str, Callable[[Any], Any]] | None = None) -> None:
        self._mutations = dict(mutations or {})
        self._built: tuple[tuple[Step, ...], str, dict[str, sp.Symbol]] | None = None
        self._cache: dict[str, Any] = {}

    # -- construction ---------------------------------------------------------------------

    @abc.abstractmethod
    def _build(self, step: Callable[[str, str, Any], Any]) -> tuple[str, dict[str, sp.Symbol]]:
        """Record the steps via ``step(key, description, expr) -> expr``.

        Return ``(statement_key, symbols)``.
        """

    @abc.abstractmethod
    def _predictions(self) -> tuple[Prediction, ...]:
        """The predictions this derivation offers."""

    @abc.abstractmethod
    def _check_specs(self) -> tuple[CheckSpec, ...]:
        """The verification checks."""

    def _ensure_built(self) -> tuple[tuple[Step, ...], str, dict[str, sp.Symbol]]:
        if self._built is None:
            rec = _Recorder(self._mutations)
            statement_key, symbols = self._build(rec)
            unknown = set(self._mutations) - rec.used
            if unknown:
                raise UnknownNameError(
                    f"derivation {self.name!r} has no step {sorted(unknown)}; steps are "
                    f"{[s.key for s in rec.steps]}"
                )
            self._built = (tuple(rec.steps), statement_key, dict(symbols))
        return self._built

    def mutated(self, key: str, fn: Callable[[Any], Any]) -> Derivation:
        """A new instance of this derivation whose step ``key`` is replaced by ``fn(expr)``.

        The mutation propagates to every later step, prediction and check.
        """
        muts = dict(self._mutations)
        muts[key] = fn
        new = type(self)(mutations=muts)
        new._ensure_built()
        return new

    # -- public view ------------------------------------------------------------------------

    @property
    def steps(self) -> tuple[Step, ...]:
        """The derivation's steps, in order."""
        return self._ensure_built()[0]

    @property
    def symbols(self) -> dict[str, sp.Symbol]:
        """The sympy symbols of the assumptions, by name."""
        return dict(self._ensure_built()[2])

    @property
    def assumptions(self) -> dict[str, Any]:
        """``{"symbols": {name: {assumption: True, ...}}, "model": [sentence, ...]}``."""
        syms = {}
        for key, s in self.symbols.items():
            a0 = s.assumptions0
            shown = [k for k in ("positive", "nonnegative", "real") if a0.get(k)][:1]
            if a0.get("integer"):
                shown.append("integer")
            syms[key] = {"symbol": str(s), "assumptions": shown}
        return {"symbols": syms, "model": list(self.model_assumptions)}

    def step(self, key: str) -> Step:
        """The step named ``key`` (UnknownNameError otherwise)."""
        for s in self.steps:
            if s.key == key:
                return s
        raise UnknownNameError(
            f"derivation {self.name!r} has no step {key!r}; steps are {[s.key for s in self.steps]}"
        )

    def expr(self, key: str) -> Any:
        """The sympy object of step ``key``."""
        return self.step(key).expr

    @property
    def statement(self) -> Step:
        """The final step: the derivation's statement."""
        return self.step(self._ensure_built()[1])

    @property
    def mutations(self) -> tuple[str, ...]:
        """The names of the steps replaced by :meth:`mutated` (empty for the real derivation)."""
        return tuple(sorted(self._mutations))

    # -- predictions --------------------------------------------------------------------------

    def predictions(self) -> tuple[Prediction, ...]:
        """The numeric predictions this derivation hands out."""
        if "predictions" not in self._cache:
            self._cache["predictions"] = tuple(self._predictions())
        return self._cache["predictions"]

    def quantities(self) -> tuple[str, ...]:
        """The quantity names :meth:`predict` accepts."""
        return tuple(p.quantity for p in self.predictions())

    def prediction(self, quantity: str) -> Prediction:
        """The prediction named ``quantity`` (UnknownNameError otherwise)."""
        for p in self.predictions():
            if p.quantity == quantity:
                return p
        raise UnknownNameError(
            f"derivation {self.name!r} predicts no quantity {quantity!r}; "
            f"known quantities: {list(self.quantities())}"
        )

    def predict(self, quantity: str, **params: Any) -> Any:
        """Evaluate prediction ``quantity`` (numpy-vectorised; floats for scalar input)."""
        pred = self.prediction(quantity)
        known = {p.name for p in pred.params}
        extra = set(params) - known
        if extra:
            raise ValidationError(
                f"{self.name}/{quantity}: unknown parameter(s) {sorted(extra)}; "
                f"signature is {pred.signature()}"
            )
        values = {}
        for p in pred.params:
            if p.name in params:
                v = params[p.name]
            elif p.required:
                raise ValidationError(
                    f"{self.name}/{quantity}: missing parameter {p.name!r} ({p.description}); "
                    f"signature is {pred.signature()}"
                )
            else:
                v = p.default
            if v is None and not p.required:
                if p.default is None:
                    values[p.name] = None
                    continue
                v = p.default
            values[p.name] = _validate_param(f"{self.name}/{quantity}", p, v)
        out = pred.fn(self, **values)
        return _finish(out)

    def lambdified(self, key: str, args: Sequence[sp.Symbol], modules: Any = "numpy"):
        """``sympy.lambdify(args, expr(key))``, cached per instance."""
        ck = ("lambdify", key, tuple(str(a) for a in args))
        if ck not in self._cache:
            expr = self.expr(key)
            if isinstance(expr, sp.core.relational.Relational):
                expr = expr.rhs
            self._cache[ck] = sp.lambdify(list(args), expr, modules=modules)
        return self._cache[ck]

    # -- verification -------------------------------------------------------------------------

    def check_specs(self) -> tuple[CheckSpec, ...]:
        """The specifications of the checks :meth:`verify` runs."""
        return tuple(self._check_specs())

    def verify(self, seed: int = 0) -> VerifyReport:
        """Run every check at ``seed``; a check that raises counts as failed (error in detail)."""
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValidationError(f"seed must be a non-negative integer, got {seed!r}")
        t0 = time.perf_counter()
        checks = []
        for i, spec in enumerate(self.check_specs()):
            rng = np.random.default_rng([int(seed), i])
            try:
                residual, tol, detail = spec.fn(self, rng)
                residual = float(residual)
                passed = bool(math.isfinite(residual) and residual <= tol)
            except Exception as exc:  # noqa: BLE001 - a crashing check is a failed check
                residual, tol, passed = math.inf, 0.0, False
                detail = f"raised {type(exc).__name__}: {exc}"
            checks.append(DerivationCheck(spec.name, spec.kind, passed, residual, float(tol), detail))
        return VerifyReport(
            self.name, int(seed), tuple(checks), time.perf_counter() - t0, self.mutations
        )

    # -- rendering ----------------------------------------------------------------------------

    def to_markdown(self) -> str:
        """The derivation as a Markdown page with LaTeX (``$$ ... $$``) formulas."""
        from tangentlab.theory.render import derivation_markdown

        return derivation_markdown(self)

    def to_latex(self) -> str:
        """The derivation as a LaTeX fragment (an ``enumerate`` of steps)."""
        from tangentlab.theory.render import derivation_latex

        return derivation_latex(self)

    def __repr__(self) -> str:
        muts = f", mutations={list(self.mutations)}" if self._mutations else ""
        return f"<Derivation {self.name!r}{muts}>"


def _finish(out: Any) -> Any:
    if isinstance(out, tuple):
        return tuple(_finish(o) for o in out)
    if isinstance(out, dict):
        return {k: _finish(v) for k, v in out.items()}
    arr = np.asarray(out, dtype=np.float64)
    return float(arr) if arr.ndim == 0 else arr


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------

#: name -> "module:ClassName" (imported on first use; one cached, unmutated instance per name).
_REGISTRY = Registry("derivation", {
    "curvature-visibility": "tangentlab.theory.visibility:CurvatureVisibility",
    "frequency-attenuation": "tangentlab.theory.attenuation:FrequencyAttenuation",
    "gradient-components": "tangentlab.theory.gradients:GradientComponents",
    "tangent-amplification": "tangentlab.theory.amplification:TangentAmplification",
    "river-valley": "tangentlab.theory.river_valley:RiverValley",
}, make=lambda cls: cls(), known="known derivations")


def names() -> tuple[str, ...]:
    """The registered derivation names, in a fixed order."""
    return _REGISTRY.names()


def derivation_class(name: str) -> type[Derivation]:
    """The class registered as ``name`` (UnknownNameError otherwise)."""
    return _REGISTRY.load(name)


def get(name: str) -> Derivation:
    """The registered derivation ``name`` (one cached, unmutated instance per name)."""
    return _REGISTRY.get(name)


def predict(name: str, quantity: str, **params: Any) -> Any:
    """Shortcut for ``get(name).predict(quantity, **params)``."""
    return get(name).predict(quantity, **params)
