"""The exception types of tangentlab.

Every error that bad input can cause is a :class:`TangentlabError`. Its message says what was
wrong and what would be right. The CLI turns any of them into one line on stderr and exits with
the error's :attr:`~TangentlabError.exit_code`: 2 (bad input) for all of them except
:class:`RunLockedError`, which exits 4 (the run directory is busy; retrying later can succeed).

The subclasses also derive from the matching built-in (``ValueError``, ``LookupError``, ...) so
that generic ``except ValueError`` code keeps working.
"""

from __future__ import annotations

__all__ = [
    "TangentlabError",
    "ValidationError",
    "ShapeError",
    "DTypeError",
    "NonFiniteError",
    "RankError",
    "InsufficientSamplesError",
    "EmptyGroupError",
    "NotOrthonormalError",
    "ConfigError",
    "UnknownNameError",
    "DataError",
    "CheckpointError",
    "CaptureError",
    "StageError",
    "OutputPathError",
    "SiteMismatchError",
    "RunLockedError",
]


class TangentlabError(Exception):
    """Base class of every error tangentlab raises on purpose."""

    #: The CLI's exit code for this error (see ``tangentlab --help``, "exit codes").
    exit_code: int = 2


class ValidationError(TangentlabError, ValueError):
    """An argument has the wrong value (shape, dtype, range, finiteness, ...)."""


class ShapeError(ValidationError):
    """An array has the wrong number of dimensions or the wrong size along one of them."""


class DTypeError(ValidationError, TypeError):
    """An array or value has a dtype/type that cannot be used (e.g. complex, object, string)."""


class NonFiniteError(ValidationError):
    """An array holds NaN or Inf entries."""


class RankError(ValidationError):
    """A requested rank is out of range (r < 1 or r >= d), or a matrix is rank deficient."""


class InsufficientSamplesError(ValidationError):
    """Too few samples (rows, neighbours, occurrences) for the requested computation."""


class EmptyGroupError(ValidationError):
    """A group (e.g. a frequency bucket) that was asked for holds no rows."""


class NotOrthonormalError(ValidationError):
    """A basis that must have orthonormal columns does not."""


class ConfigError(TangentlabError, ValueError):
    """A configuration key is unknown, or its value has the wrong type or range."""


class UnknownNameError(TangentlabError, LookupError):
    """A name (derivation, experiment, site, preset, metric, ...) is not registered."""

    def __str__(self) -> str:  # LookupError would otherwise repr() the message in quotes
        return str(self.args[0]) if self.args else ""


class DataError(TangentlabError, ValueError):
    """A corpus or data file is missing, empty, or unusable."""


class CheckpointError(TangentlabError, OSError):
    """A checkpoint or model directory is missing, incomplete, corrupt, or inconsistent."""


class CaptureError(TangentlabError, RuntimeError):
    """A capture hook did not fire, fired twice, saw the wrong shape, or lost its gradient."""


class StageError(TangentlabError, RuntimeError):
    """A stage of ``tangentlab reproduce`` failed; the message names the stage and the cause."""


class OutputPathError(ConfigError):
    """An output path cannot be used.

    It is a file, a run of another kind, or a folder that is not empty (see
    :func:`tangentlab.runs.check_output_dir`). Nothing was written.
    """


class SiteMismatchError(ConfigError):
    """A dictionary was trained at another site than the one it is applied to.

    For example a SAELens ``hook_name`` of ``blocks.3.hook_resid_post`` given for site
    ``blocks.5.resid_post``. The message names both and what to pass instead.
    """


class RunLockedError(TangentlabError, RuntimeError):
    """Another live process holds the run directory's lock.

    The message names it (pid, host, start time, command). The CLI exits 4: wait for that process,
    or choose another ``--out``.
    """

    exit_code = 4
