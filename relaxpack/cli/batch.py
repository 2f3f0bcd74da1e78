"""``relaxpack batch``: score a directory of .npz input files on Dask (the ``dask`` extra)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from .common import Exit, command, echo, existing_file, positive, require_extra, user_errors
from .progress import Progress

DASK_EXTRA = ("dask", "distributed")


@command
def _parser(sub):
    p = sub.add_parser("batch", help="Score a directory of .npz inputs on a Dask cluster.",
                       description="Run an archive on every INPUT_DIR/*.npz (one input set per file) and write "
                                   "OUTPUT_DIR/<same name>.npz, as tasks on a Dask distributed cluster: a "
                                   "LocalCluster of --workers processes, or the scheduler at --scheduler (whose "
                                   "workers must see the archive and the directories at the same paths). A file "
                                   "that fails is reported at the end and never stops the others. "
                                   "Needs pip install 'relaxpack[dask]'.")
    p.add_argument("archive", type=Path, metavar="MODEL.rpk", help="The archive.")
    p.add_argument("input_dir", type=Path, metavar="INPUT_DIR", help="Directory of .npz input files.")
    p.add_argument("-o", "--output", dest="output_dir", type=Path, required=True, metavar="OUTPUT_DIR",
                   help="Directory for the outputs (created if missing).")
    p.add_argument("--workers", type=positive, metavar="N",
                   help="Worker processes of the LocalCluster (default 2); not with --scheduler.")
    p.add_argument("--scheduler", metavar="ADDRESS", help="An existing Dask scheduler, e.g. tcp://10.0.0.5:8786.")
    p.add_argument("--retries", type=int, default=2, metavar="N",
                   help="Retries of a task that failed for another reason than its file (default 2).")
    p.add_argument("--threads", type=positive, default=1, metavar="N",
                   help="BLAS threads per worker process (default 1).")
    p.set_defaults(handler=batch)


def batch(archive: Path, input_dir: Path, output_dir: Path, workers: int | None = None, scheduler: str | None = None,
          retries: int = 2, threads: int = 1):
    """Score every INPUT_DIR/*.npz into OUTPUT_DIR on Dask."""
    with user_errors():
        require_extra("relaxpack batch", DASK_EXTRA, "dask")
        from ..batch import Predictor
        from ..batch.dask_job import input_files, local_cluster, remote_client, score_directory
        from ..errors import InputError

        if retries < 0:
            raise InputError(f"--retries {retries} is below 0")
        if scheduler is not None and workers is not None:
            raise InputError("--workers sizes a LocalCluster; with --scheduler the cluster has its own workers")
        predictor = Predictor(existing_file(archive, "archive"), threads=threads)
        files = input_files(input_dir)
        if not files:
            raise InputError(f"no .npz files in {input_dir}")
        if output_dir.resolve() == input_dir.resolve():
            raise InputError("the output directory is the input directory; outputs would replace their inputs")
        client = remote_client(scheduler) if scheduler else local_cluster(workers or 2)
        with contextlib.closing(client), Progress() as progress:
            report = score_directory(predictor, input_dir, output_dir, client, retries=retries,
                                     progress=lambda done, total, failed: progress.status(
                                         f"scored {done}/{total} files ({failed} failed)"))
            if not scheduler:
                client.cluster.close()
    where = f"the scheduler at {scheduler}" if scheduler else "a LocalCluster"
    echo(f"scored {len(report.scored)} of {report.total} files into {output_dir} in {report.seconds:.1f} s "
         f"on {report.workers} worker(s) of {where}")
    if report.failed:
        echo(f"{len(report.failed)} failed:")
        for name, reason in sorted(report.failed.items()):
            echo(f"  {name}: {reason}")
        raise Exit(1)
