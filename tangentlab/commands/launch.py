"""``--nproc N``: run a ``tangentlab`` command as N ranks on this node.

:func:`launch` starts the ranks through torch's elastic launcher (what ``torchrun
--nproc-per-node N --master-addr 127.0.0.1 -m tangentlab`` does), on loopback, each forked from
the fork server (:func:`tangentlab._runtime.fork_server`), which imported torch and
transformers once and ran nothing else.
Inside a rank, :func:`tangentlab.distributed.run_rank` sets up the process group and reports
failures (see :mod:`tangentlab.distributed`).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Sequence

from tangentlab._runtime import fork_server, threads_per_rank
from tangentlab.distributed import LAUNCHER_SIGNAL, REPORTED_ENV, free_port, strip_nproc
from tangentlab.errors import ConfigError

__all__ = ["launch"]


def _rank_main(argv: list[str], environ: dict[str, str]) -> None:
    """One rank of :func:`launch`: ``python -m tangentlab ARGV``, run in a fork server's child.

    It dies with the launcher (:func:`~tangentlab._runtime.die_with_parent`); its environment is
    the launcher's at this launch over what the elastic agent set; its default ``multiprocessing``
    start method is the platform's, as in a fresh interpreter (the server's own made tqdm's lock
    a named semaphore, which a rank leaving with ``os._exit`` left to the resource tracker).
    """
    import multiprocessing
    import runpy

    from tangentlab._runtime import die_with_parent

    die_with_parent()
    os.environ.update(environ)
    multiprocessing.set_start_method(None, force=True)
    sys.argv = ["tangentlab", *argv]
    runpy.run_module("tangentlab", run_name="__main__", alter_sys=True)


def launch(argv: Sequence[str], nproc: int, *, port: int | None = None) -> int:
    """Run the command as ``nproc`` ranks on this node.

    Run the ``tangentlab`` command ARGV as ``nproc`` ranks on this node through torch's elastic
    launcher (see the module docstring), with unbuffered output (as ``python -u``). Rank 0
    prints the run's one error line; this launcher prints it instead when rank 0 did not (killed,
    or stopped before it could). SIGTERM and SIGINT are this launcher's own: it writes the
    signal's name where rank 0 reads it (:data:`~tangentlab.distributed.LAUNCHER_SIGNAL`, beside
    the file of ``REPORTED_ENV``), then stops the agent, which stops the ranks; rank 0's line then
    says "stopped by SIGTERM" rather than "another rank stopped part-way".

    ``cores // nproc`` threads per rank unless ``OMP_NUM_THREADS`` is set. Returns 0, the first
    failing rank's code, or 128 + the signal that stopped this launcher.
    """
    if nproc < 1:
        raise ConfigError(f"--nproc must be >= 1; got {nproc}")
    import logging
    import tempfile

    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs, SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    os.environ.setdefault("OMP_NUM_THREADS", str(threads_per_rank(local_size=nproc)))
    os.environ.setdefault("PYTHONUNBUFFERED", "1")  # read by the fork server as it starts
    fork_server()  # the ranks' server imports FORK_SERVER_PRELOAD
    # "Terminating process ...", "Received 15 death signal ...": our error line says it. Each
    # elastic module's logger has a level of its own, so the parents' would not reach them.
    for name in list(logging.root.manager.loggerDict):
        if name.startswith(("torch.distributed.elastic", "torch.distributed.launcher",
                            "torch.multiprocessing")):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    port = port or free_port()
    with tempfile.TemporaryDirectory(prefix="tangentlab-launch-") as tmp:
        reported = os.path.join(tmp, "rank-0-reported")
        config = LaunchConfig(
            min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=f"tangentlab-{port}",
            rdzv_backend="static", rdzv_endpoint=f"127.0.0.1:{port}", rdzv_configs={"rank": 0},
            max_restarts=0, monitor_interval=0.1, start_method="forkserver",
            local_addr="127.0.0.1", signals_to_handle="SIGHUP,SIGQUIT",  # SIGTERM, SIGINT: below
            # the agent's per-rank folders, here rather than a torchelastic_* left in the temp dir
            logs_specs=DefaultLogsSpecs(log_dir=os.path.join(tmp, "elastic")),
        )

        def _on_signal(signum, frame):  # noqa: ARG001
            # first tell rank 0 why the agent is about to stop it, then stop the agent
            with open(os.path.join(tmp, LAUNCHER_SIGNAL), "w") as f:
                f.write(signal.Signals(signum).name)
            raise SignalException(f"the launcher got {signal.Signals(signum).name}",
                                  sigval=signal.Signals(signum))

        main = threading.current_thread() is threading.main_thread()  # where handlers can go
        previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGINT)
                    if main}
        try:
            elastic_launch(config, _rank_main)(strip_nproc(argv),
                                               {**os.environ, REPORTED_ENV: reported})
        except ChildFailedError as exc:
            first = min(exc.failures.values(), key=lambda f: f.timestamp)
            why, code = f"rank {first.local_rank} of {nproc} stopped with exit code " \
                f"{first.exitcode}", first.exitcode if first.exitcode > 0 else 1
        except SignalException as exc:  # SIGTERM or SIGINT to this launcher: the ranks stopped
            why, code = f"stopped by {signal.Signals(exc.sigval).name}", 128 + int(exc.sigval)
        else:
            return 0
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        if not os.path.exists(reported):
            # rank 0 ended without reporting (killed, or stopped before it could): say it here
            sys.stderr.write(f"tangentlab: error: {why}; no results were written\n")
        return code
