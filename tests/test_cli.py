"""The CLI entry point: instant --help, one-line errors, exit codes."""

from __future__ import annotations

import subprocess
import sys

from tangentlab.cli import main


def test_help_imports_no_heavy_module():
    code = (
        "import sys; from tangentlab.cli import build_parser; build_parser().format_help(); "
        "heavy = [m for m in ('torch', 'sympy', 'transformers', 'geomstats', 'matplotlib', "
        "'pandas', 'sklearn', 'scipy') if m in sys.modules]; print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_unknown_area_is_a_one_line_error_with_exit_2(capsys):
    try:
        rc = main(["no-such-area"])
    except SystemExit as exc:
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error" in err[0]


def test_version_flag(capsys):
    try:
        main(["--version"])
    except SystemExit as exc:
        assert exc.code == 0
    assert "tangentlab" in capsys.readouterr().out
