"""The reproduce job's stages as a table of producers (what runs, on what, into which folder).

Each :class:`Producer` row names a public producer function of a pillar (``"module:function"``),
the keyword arguments that decide its result (``params``: hashed for resume and passed as they
are), the arguments that do not (``runtime``: the device), the folders it reads from the stages it
depends on (``inputs``) and the output check of its run directory (``check``: keywords of
:func:`tangentlab.contract.check_run`). :func:`run_producer` and :func:`check_output` are the one
stage function and the one output check of every row, so no stage has an adapter or a reader of
its own.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tangentlab.pipeline.stages import Stage, StageContext

__all__ = ["Producer", "run_producer", "check_output", "stage"]


@dataclass(frozen=True)
class Producer:
    """One stage of the table.

    Attributes:
        name: the stage name (:mod:`tangentlab.contract`'s constants).
        target: ``"module:function"``, called as ``function(**{out_arg: output}, **params,
            **runtime, **inputs)``.
        params: the keyword arguments that decide the result (the stage's hashed params).
        out_arg: the keyword that takes the stage's output path (``None``: none).
        runtime: keyword arguments that do not change the numbers (``device``).
        inputs: keyword -> path relative to the run directory (``"."`` is the run directory).
        depends: stages that must be done first (their outputs are the inputs).
        resume_marker: a resumable stage gets ``resume=True`` when an interrupted attempt left
            this file in its output.
        check: keywords of :func:`tangentlab.contract.check_run` for the output.
        output: the output path relative to the run directory (default: ``name``).
        after_all: run after every other stage has finished, whatever its status (the report).
        description: one line for progress messages and the report.
    """

    name: str
    target: str
    params: Mapping[str, Any] = field(default_factory=dict)
    out_arg: str | None = "out"
    runtime: Mapping[str, Any] = field(default_factory=dict)
    inputs: Mapping[str, str] = field(default_factory=dict)
    depends: tuple[str, ...] = ()
    resume_marker: str | None = None
    check: Mapping[str, Any] = field(default_factory=dict)
    output: str | None = None
    after_all: bool = False
    description: str = ""


def run_producer(producer: Producer, ctx: StageContext) -> None:
    """The stage function of every row: call the producer on the stage's output and inputs."""
    module, _, name = producer.target.partition(":")
    func = getattr(importlib.import_module(module), name)
    kwargs: dict[str, Any] = {**producer.params, **producer.runtime}
    for key, rel in producer.inputs.items():
        kwargs[key] = ctx.run_dir if rel == "." else ctx.run_dir / rel
    if producer.out_arg is not None:
        kwargs[producer.out_arg] = ctx.output
    if producer.resume_marker is not None:
        kwargs["resume"] = ctx.resume and (ctx.output / producer.resume_marker).is_file()
    func(**kwargs)


def check_output(producer: Producer, out: Path) -> None:
    """The output check of every row (:func:`tangentlab.contract.check_run`)."""
    from tangentlab.contract import check_run

    check_run(out, **producer.check)


def stage(producer: Producer, *, after: tuple[str, ...] = ()) -> Stage:
    """The runner's :class:`~tangentlab.pipeline.stages.Stage` of one row."""
    from functools import partial

    return Stage(name=producer.name, func=partial(run_producer, producer),
                 params=dict(producer.params), output=producer.output, depends=producer.depends,
                 after=after, check=partial(check_output, producer), always=producer.after_all,
                 resumable=producer.resume_marker is not None, description=producer.description)
