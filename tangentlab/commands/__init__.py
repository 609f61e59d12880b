"""Argument definitions for each CLI area (argparse only; heavy imports happen in the handlers)."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator

__all__ = ["add_common_run_args", "add_device_args", "add_validation_arg",
           "positive_int", "relaunch", "require_subcommand", "writing_run"]


def positive_int(text: str) -> int:
    """An argparse ``type``: a whole number >= 1 (``--nproc 0`` and ``--jobs -2`` are refused)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


def add_validation_arg(parser: argparse.ArgumentParser, *, run: str) -> None:
    """``--validation DIR`` of the commands that read a reproduce run's predictions (``report``,
    ``summary``): the end-to-end validation run they are gated on instead of the run's own
    ``validate/end-to-end`` (``run`` is the run argument's name in the help, e.g. ``RUN``)."""
    parser.add_argument(
        "--validation", metavar="DIR",
        help="gate a reproduce run's predictions on this end-to-end validation run (a directory "
             "written by `tangentlab validate --end-to-end`, e.g. a full one) instead of "
             f"{run}/validate/end-to-end",
    )


def add_common_run_args(parser: argparse.ArgumentParser) -> None:
    """``--config FILE``, ``--set KEY=VALUE`` (repeatable) and ``--seed N``."""
    parser.add_argument("--config", metavar="FILE", help="TOML file overriding the defaults")
    parser.add_argument(
        "--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[],
        help="override one config value (repeatable), e.g. --set rank=8",
    )


def add_device_args(parser: argparse.ArgumentParser, *, nproc: bool = False,
                    default: str | None = "auto") -> None:
    """``--device`` (auto | cpu | cuda | cuda:N | mps) and, with ``nproc``, ``--nproc N`` (see
    :mod:`tangentlab.distributed`)."""
    parser.add_argument(
        "--device", default=default, metavar="DEVICE",
        help="auto | cpu | cuda | cuda:N | mps (default: auto); under torchrun or --nproc "
             "each rank uses cuda:LOCAL_RANK",
    )
    if nproc:
        parser.add_argument(
            "--nproc", type=positive_int, default=1, metavar="N",
            help="run N ranks on this node with torch.distributed (gloo on CPU, NCCL on CUDA); "
                 "same as torchrun --nproc-per-node N -m tangentlab ...",
        )


def relaunch(args: argparse.Namespace) -> int | None:
    """With ``--nproc N`` > 1 outside a launch: start N ranks of this same command and return
    the run's exit code; otherwise None (the caller runs the command itself)."""
    from tangentlab import distributed
    from tangentlab.commands.launch import launch

    n = getattr(args, "nproc", 1) or 1
    if n <= 1 or distributed.launched():
        return None
    return launch(getattr(args, "argv", []), n)


def require_subcommand(parser: argparse.ArgumentParser):
    """A handler that prints the area's help and returns exit code 2 when no verb is given."""
    def _handler(args: argparse.Namespace) -> int:
        import sys

        parser.print_help(sys.stderr)
        return 2

    return _handler


@contextlib.contextmanager
def writing_run(out, *, kind: str, command: str, existing: str = "replace") -> Iterator[None]:
    """Check ``out`` as an output directory of ``kind`` and hold its run lock meanwhile.

    The output-path check (:func:`tangentlab.runs.check_output_dir`) runs before anything is
    written, then again under the lock (:func:`tangentlab.runs.run_lock`), which also clears
    what a killed earlier attempt left half-built beside ``out``.
    """
    from pathlib import Path

    from tangentlab import distributed
    from tangentlab.runs import check_output_dir, remove_partials, run_lock

    if not distributed.is_main_process():  # under torchrun / --nproc rank 0 alone checks and locks
        yield
        return
    check_output_dir(out, kind=kind, existing=existing)
    with run_lock(out, command=command):
        check_output_dir(out, kind=kind, existing=existing)
        out = Path(out)
        remove_partials(out.parent, name=out.name)
        yield
