"""CLI area ``tangentlab report RUN_DIR``: re-render a reproduce run's report from stored results."""

from __future__ import annotations

import argparse

from tangentlab.commands import add_validation_arg


def _report(args: argparse.Namespace) -> int:
    from tangentlab.report.load import parse_measure_args
    from tangentlab.report.render import render_report
    from tangentlab.runs import run_lock

    measures = parse_measure_args(args.measure or [])
    if args.summary_figure:
        _check_figure_path(args.summary_figure)  # before anything is rendered
    # the folder written holds its run lock meanwhile: a reproduce still writing that run (or
    # another report) makes this one exit 4 instead of racing it
    with run_lock(args.out or args.run_dir, command="report"):
        result = render_report(args.run_dir, measures=measures, out=args.out, pool=args.pool,
                               validation=args.validation)
    print(result.html)
    print(result.markdown)
    if args.summary_figure:
        from tangentlab.report.render import summary_figure

        print(summary_figure(args.run_dir, args.summary_figure, measures=measures,
                             validation=args.validation))
    if result.row_errors:
        import sys

        for err in result.row_errors:
            sys.stderr.write(f"tangentlab: a verdict rule raised: {err}\n")
        return 1
    return 0


def _check_figure_path(path: str) -> None:
    """Refuse a ``--summary-figure`` path that is a folder or lies under a file."""
    from pathlib import Path

    from tangentlab.errors import OutputPathError

    p = Path(path)
    try:
        is_dir = p.is_dir()
        blocked = next((q for q in p.parents if q.exists() and not q.is_dir()), None)
    except OSError as exc:
        raise OutputPathError(f"--summary-figure {path[:120]!r} cannot be used "
                              f"({exc.strerror or exc}); pass a PNG file path such as "
                              "figures/summary.png") from None
    if is_dir:
        raise OutputPathError(f"--summary-figure {path!r} is a folder; pass a PNG file path "
                              f"inside it, e.g. {str(p / 'summary.png')!r}")
    if blocked is not None:
        raise OutputPathError(f"--summary-figure {path!r} lies under {str(blocked)!r}, which is a "
                              "file, not a folder; pass a PNG file path in a folder")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``report`` command to the CLI's subparsers."""
    p = sub.add_parser(
        "report",
        help="re-render report.html and report.md of a reproduce run (no recomputation)",
        description=(
            "Re-render RUN_DIR/report.html (self-contained, figures embedded) and RUN_DIR/report.md "
            "(figures in RUN_DIR/figures/) from the results the stages stored, without recomputing "
            "anything. The report is rendered into a staging folder and swapped in at the end: a "
            "failed render leaves the previous report and figures as they were. --measure adds "
            "external measurement runs (`tangentlab empirical measure` outputs), each named, with "
            "its own (model, site) sub-tables and panels shown apart: they never change the "
            "verdicts of our own runs unless --pool is given. A prediction reads supported or not "
            "supported only where the end-to-end battery validated its row at the run's setting "
            "(read from RUN_DIR/validate/end-to-end, or --validation DIR); otherwise it reads "
            "'inconclusive (not validated)', its raw verdict kept in the reason. Exit 1 if a verdict rule could not "
            "read the stored results; exit 4 if another process holds the folder's run lock (a "
            "reproduce still writing it)."
        ),
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a directory written by `tangentlab reproduce` (e.g. runs/latest)")
    p.add_argument("--measure", metavar="NAME=DIR", action="append", default=[],
                   help="add an external measurement run DIR under the name NAME (repeatable); "
                        "a run's config may also list them under external_measures")
    p.add_argument("--pool", action="store_true",
                   help="judge the empirical rows by our runs and the external ones together "
                        "(default: external runs are shown apart and do not change our verdicts)")
    add_validation_arg(p, run="RUN_DIR")
    p.add_argument("--out", metavar="DIR",
                   help="write report.html, report.md and figures/ into DIR (new, empty, or "
                        "holding only an earlier report) instead of RUN_DIR")
    p.add_argument("--summary-figure", metavar="PNG",
                   help="also write a one-image summary (the headline rows' figures) to PNG, "
                        "e.g. docs/figures/report.png")
    p.set_defaults(func=_report)
