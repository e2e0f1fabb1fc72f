"""Where a migration's report goes: its folder (made when missing, removed again when the check
stops before its report), and the MLflow store it is logged to."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autotune.errors import TrackingError, UsageError

EXPERIMENT = "autotune-migrate"


@contextlib.contextmanager
def removed_if_stopped(made: list[Path]) -> Iterator[None]:
    """A check stopped before its report (Ctrl-C, an error) leaves no empty folder it made for
    the report, and a Ctrl-C says so in one line."""
    try:
        yield
    except BaseException as e:
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()  # only an empty one: what was written stays
        if isinstance(e, KeyboardInterrupt):
            print("autotune: migrate interrupted: no report written", file=sys.stderr)
        raise


#: What a migration writes in its folder besides its MLflow store: the report, its plot, the
#: recipe at a layout that held, the re-tuned recipe and the re-tune's study.
WRITTEN = (
    "migration.md",
    "migration-curve.png",
    "recipe-migrated.yaml",
    "recipe-retuned.yaml",
    "retune",
)


def previous(out: Path, force: bool) -> None:
    """A folder that holds an earlier migration's report is refused (a UsageError), before
    anything runs: the new report would sit beside that migration's re-tuned recipe and study,
    read as this one's. With `force`, the earlier migration's files (`WRITTEN`) go; its report
    is replaced (atomically) when the new one is written. The MLflow store (`mlflow.db`,
    `mlruns`) stays: `-o .` may be the source study's own folder, and its store the study's."""
    import shutil

    if not (out / WRITTEN[0]).exists():
        return  # an interrupted migration wrote no report: the same command carries on
    if not force:
        found = [name for name in WRITTEN if (out / name).exists()]
        raise UsageError(
            f"-o {out}: holds an earlier migration ({', '.join(found)}); give another folder, "
            "or --force to replace its files"
        )
    for name in WRITTEN[1:]:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def make_out(out: Path) -> list[Path]:
    """`-o`'s folder, made (with those above it) when missing; the folders made. A folder that
    cannot be made is a UsageError naming it, before anything is made."""
    from autotune.tracking import folder_problem, make_folder

    problem = folder_problem(out)
    try:
        if problem is None:
            return make_folder(out)
    except OSError as e:
        problem = e.strerror or str(e)
    raise UsageError(f"-o {out}: cannot make the report folder: {problem}")


def connect(tracking_uri: str) -> Any:
    """A client of the MLflow store the report goes to; a TrackingError when mlflow is not
    installed in this environment or the store does not answer."""
    try:
        import mlflow  # noqa: F401
    except ImportError:
        raise TrackingError(
            f"--tracking-uri {tracking_uri}: mlflow is not installed in this environment"
        ) from None
    from autotune import tracking

    return tracking.connect(tracking.resolve_uri(tracking_uri))


def log_report(client: Any, result: dict[str, Any]) -> str:
    """The report, its plot and the verdict as a run of the experiment `autotune-migrate`."""
    from autotune import tracking

    experiment_id = tracking.ensure_experiment(client, EXPERIMENT)
    run = client.create_run(
        experiment_id,
        run_name=f"migrate-{result['recipe']}",
        tags={
            "autotune.recipe": result["recipe"],
            "autotune.migrate.verdict": result["verdict"][:250],
            "autotune.recipe.fp_hash": str(result["recorded_hash"]),
            "autotune.fp.hash": str(result["here_hash"]),
        },
    )
    run_id = str(run.info.run_id)
    client.log_metric(run_id, "samples", float(result["compute"]["samples"]))
    client.log_artifact(run_id, result["report"])
    if result.get("png"):
        client.log_artifact(run_id, result["png"])
    client.set_terminated(run_id)
    return run_id
