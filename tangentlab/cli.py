"""The single command-line entry point: ``tangentlab <area> <verb> ...``.

Each area's arguments live in :mod:`tangentlab.commands` (one small module per area, importing
only :mod:`argparse` at module level), so ``tangentlab --help`` never imports torch, sympy or
transformers. Heavy modules load inside the command functions.

Errors and exit codes (all listed in :data:`EXIT_CODES`, shown by ``tangentlab --help`` and in
``docs/cli.md``):

- any :class:`~tangentlab.errors.TangentlabError` (and any argument error) is printed as one line
  ``tangentlab: error: ...`` on stderr, with the error's ``exit_code`` (2 for bad input, 4 when
  another process holds the run directory);
- any other exception is an internal error: one line naming what failed and the path of a crash
  log (:mod:`tangentlab.crash`), exit 3; ``--debug`` or ``TANGENTLAB_DEBUG=1`` prints the
  traceback instead;
- an ``OSError`` that a bad path causes (too long, a folder where a file belongs, no permission,
  a read-only file system) is bad input too: one line naming the path and the fix, exit 2;
- Ctrl-C exits 130 and SIGTERM 143, after the command's clean-up (temporary files removed, run
  lock released); a closed output pipe exits 141;
- commands return their own exit code otherwise (for example ``theory verify`` returns 1 when a
  check fails).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import sys
from collections.abc import Iterator, Sequence

from tangentlab._version import __version__
from tangentlab.errors import TangentlabError

__all__ = ["main", "build_parser", "iter_parsers", "COMMAND_MODULES", "EXIT_CODES"]

#: Every exit code the CLI returns, and what it means (the one list: ``--help``'s epilog and
#: ``docs/cli.md`` are generated from it).
EXIT_CODES: tuple[tuple[int, str], ...] = (
    (0, "success"),
    (1, "the command ran, but a check or stage failed (theory verify, reproduce, report)"),
    (2, "bad input: a usage error or a typed tangentlab error (one line on stderr); nothing "
        "was written"),
    (3, "internal error: one line on stderr names it and the crash log holding the traceback "
        "(--debug or TANGENTLAB_DEBUG=1 prints the traceback instead)"),
    (4, "the run directory is in use by another live process (named on stderr); wait for it "
        "or choose another --out"),
    (130, "interrupted (Ctrl-C); temporary files removed, the run can be resumed"),
    (141, "the output pipe was closed early (e.g. `tangentlab theory list | head -1`)"),
    (143, "terminated (SIGTERM); temporary files removed, the run can be resumed"),
)

#: The command modules, in the order ``--help`` lists them. Each defines
#: ``register(subparsers) -> None`` and sets ``func(args) -> int`` on its parsers.
COMMAND_MODULES: tuple[str, ...] = (
    "tangentlab.commands.theory",
    "tangentlab.commands.synthetic",
    "tangentlab.commands.empirical",
    "tangentlab.commands.report",
    "tangentlab.commands.summary",
    "tangentlab.commands.reproduce",
    "tangentlab.commands.validate",
)


class OneLineErrorParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message} (see '{self.prog} --help')\n")
        raise SystemExit(2)


def exit_codes_text() -> str:
    """The exit-code table as plain text (``--help``'s epilog), wrapped at 96 columns."""
    import textwrap

    lines = ["exit codes:"]
    for code, meaning in EXIT_CODES:
        lines += textwrap.wrap(meaning, 96, initial_indent=f"  {code:<4d} ",
                               subsequent_indent=" " * 7)
    return "\n".join(lines)


_DEBUG_HELP = "print the traceback of an internal error instead of writing a crash log"


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (all areas registered).

    ``--debug`` is accepted before the area and after any command (``tangentlab --debug empirical
    train ...`` or ``tangentlab empirical train ... --debug``).
    """
    parser = OneLineErrorParser(
        prog="tangentlab",
        description=(
            "Test the geometric account of anisotropy in language Transformers: "
            "theory (sympy derivations), synthetic manifolds with known geometry, and real "
            "Transformer gradients, rendered side by side in one report."
        ),
        epilog=exit_codes_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"tangentlab {__version__}")
    parser.add_argument("--debug", action="store_true", help=_DEBUG_HELP)
    sub = parser.add_subparsers(dest="area", metavar="<area>", parser_class=OneLineErrorParser)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    for _, p in iter_parsers(parser):
        if p is not parser:  # SUPPRESS: a command without --debug keeps the top-level value
            p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                           help=_DEBUG_HELP)
    return parser


class _Terminated(BaseException):
    """Raised by the SIGTERM handler so that clean-up code runs before exit.

    ``finally`` blocks and ``except BaseException`` handlers run, then the CLI exits 143.
    """


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    def handler(signum, frame):
        raise _Terminated

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _command_name(args: argparse.Namespace) -> str:
    return " ".join(str(x) for x in (getattr(args, "area", None), getattr(args, "verb", None)) if x)


def _internal_error(exc: BaseException, args: argparse.Namespace, argv: Sequence[str],
                    debug: bool) -> int:
    from tangentlab import crash

    what = _command_name(args) or "tangentlab"
    if debug:
        crash.print_traceback(exc)
        sys.stderr.write(f"tangentlab: internal error in '{what}': {crash.one_line(exc)}\n")
        return crash.CRASH_EXIT_CODE
    fields = {k: v for k, v in vars(args).items() if k != "func"}
    path = crash.write_crash_log(exc, argv=argv, args=fields)
    where = (f"crash log: {path}" if path is not None
             else "no crash log could be written (no writable folder)")
    sys.stderr.write(f"tangentlab: internal error in '{what}': {crash.one_line(exc)}; {where}; "
                     "rerun with --debug to see the traceback, and report it with the log\n")
    return crash.CRASH_EXIT_CODE


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code (see :data:`EXIT_CODES`)."""
    from tangentlab import crash

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    debug = bool(getattr(args, "debug", False)) or crash.debug_enabled()
    crash.reset()
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what --nproc relaunches
    from tangentlab import distributed

    if distributed.launched():  # one rank of torchrun / --nproc: one error line from rank 0
        return distributed.run_rank(func, args)
    try:
        with _sigterm_raises():
            return int(func(args) or 0)
    except TangentlabError as exc:
        message = " ".join(_shorten(word) for word in str(exc).split())
        sys.stderr.write(f"tangentlab: error: {message}\n")
        return int(getattr(exc, "exit_code", 2))
    except KeyboardInterrupt:
        sys.stderr.write("tangentlab: interrupted\n")
        return 130
    except _Terminated:
        sys.stderr.write("tangentlab: terminated\n")
        return 143
    except BrokenPipeError:
        import os

        # the reader went away: stop quietly, and keep Python from complaining at exit
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):  # stdout is not a real file (tests)
            pass
        return 141
    except OSError as exc:
        line = _path_error_line(exc)
        if line is None:
            return _internal_error(exc, args, argv, debug)
        sys.stderr.write(f"tangentlab: error: {line}\n")
        return 2
    except Exception as exc:
        return _internal_error(exc, args, argv, debug)


#: errno -> what to do, for the file-system errors that bad input causes (a path too long, a
#: folder where a file belongs, no permission, a read-only file system)
_PATH_ERRNO_HINTS = {
    "ENAMETOOLONG": "the path is longer than the file system allows; choose a shorter one",
    "EISDIR": "it is a folder where a file was expected; pass a file path",
    "ENOTDIR": "a part of the path is a file, not a folder; fix the path",
    "EACCES": "no permission; choose a location you can read and write, or fix its permissions",
    "EPERM": "the operation is not permitted there; choose another location",
    "EROFS": "the file system is read-only; choose a writable location",
}


def _shorten(word: str, limit: int = 160) -> str:
    """A very long word of an error message (a path of thousands of characters) cut to its ends."""
    if len(word) <= limit:
        return word
    return f"{word[:60]}...{word[-60:]} ({len(word)} characters)"


def _path_error_line(exc: OSError) -> str | None:
    """One line for an ``OSError`` that a bad path causes, or None for any other OSError.

    The line names the path (shortened when very long), the system's words and what to do.
    """
    import errno

    name = errno.errorcode.get(exc.errno or -1)
    if name not in _PATH_ERRNO_HINTS or exc.filename is None:
        return None
    where = _shorten(str(exc.filename))
    return f"cannot use {where}: {exc.strerror or name}; {_PATH_ERRNO_HINTS[name]}"


def iter_parsers(parser: argparse.ArgumentParser | None = None) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every (command path, parser) pair, depth first: ``tangentlab``, ``tangentlab theory``, ..."""
    if parser is None:
        parser = build_parser()
    seen: set[int] = set()

    def walk(p: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
        if id(p) in seen:
            return
        seen.add(id(p))
        yield p.prog, p
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    yield from walk(child)

    yield from walk(parser)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
