"""CLI area ``tangentlab summary RUN``: the headline numbers, one row per (model, site, step)."""

from __future__ import annotations

import argparse

from tangentlab.commands import add_validation_arg


def _summary(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tangentlab.report.summary import (
        format_summary,
        headline_table,
        summary_output_path,
        write_summary,
    )

    run = Path(args.run)
    # every argument is checked before anything is written: the table, the verdicts (and so
    # --validation), then the output path
    table = headline_table(run)
    if table.empty:
        from tangentlab.errors import DataError

        raise DataError(f"{args.run!r} stores no enrichment or energy rows to summarise (a "
                        "measurement without gradients, e.g. an encoder without its LM head?)")
    verdicts = _verdict_lines(run, args.validation)
    out = summary_output_path(run, args.out)
    path = write_summary(table, out)
    print(format_summary(table))
    print(f"{len(table)} rows written to {path}")
    for line in verdicts:
        print(line)
    return 0


def _verdict_lines(run, validation) -> list[str]:
    """For a reproduce run: each prediction's status as the report gives it (gating included)."""
    from tangentlab.report.gating import status_text
    from tangentlab.report.load import RunData
    from tangentlab.report.verdicts import build_verdicts
    from tangentlab.runs import run_kind

    if run_kind(run) != "reproduce":
        if validation is not None:
            from tangentlab.errors import DataError

            raise DataError(f"--validation gates a reproduce run's verdicts; {str(run)!r} is not "
                            "a reproduce run directory")
        return []
    data = RunData.open(run, validation=validation)
    lines = ["predictions (as the report reads them):"]
    for v in build_verdicts(data):
        if v.section != "prediction":
            continue
        why = (f"  [raw: {v.raw_status}; gated: {v.gated}]" if v.gated
               else f"  [validated by {v.certified}]" if v.certified else "")
        lines.append(f"  {v.key}: {status_text(v)}{why}")
    return lines


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``summary`` command to the CLI's subparsers."""
    p = sub.add_parser(
        "summary",
        help="the headline numbers of a measurement: one row per (model, site, step)",
        description=(
            "Print the headline numbers of RUN (a `tangentlab empirical measure` run, or a "
            "reproduce run: each of its measure stages and external measurements) and write them "
            "as RUN/summary.csv (or --out), one row per (run, model, site, step): enrichment with "
            "its bootstrap CI, the step-0 enrichment, the energy fraction E_T with its CI, the "
            "control mean, the baseline r/d, the oracle, the position between null and oracle, "
            "the p-value with n_controls and its floor, and the refit-proxy and constrained-space "
            "enrichment where stored. The full-space, fixed-proxy, all-token rows are read; "
            "docs/report.md lists every column. For a reproduce run it then prints each "
            "prediction's status as the report reads it: 'inconclusive (not validated)' where "
            "the end-to-end battery did not validate the row at the run's setting, with the raw "
            "verdict. In Python: tangentlab.load_results(RUN)."
        ),
    )
    p.add_argument("run", metavar="RUN", help="a measurement or reproduce run directory")
    add_validation_arg(p, run="RUN")
    p.add_argument("--out", metavar="PATH",
                   help="write the CSV here (a file, or a folder to hold summary.csv) instead of "
                        "RUN/summary.csv; refused, with nothing written, when PATH is inside a "
                        "run directory (other than RUN/summary.csv) or is an existing file that "
                        "is not a summary")
    p.set_defaults(func=_summary)
