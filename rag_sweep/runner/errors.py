"""What stops a sweep run, each as one line that names the cause."""

from __future__ import annotations


class DataDirError(RuntimeError):
    """The data dir cannot hold a run's artifacts and stores."""


class CheckFailed(RuntimeError):
    """A blocking asset check failed with severity ERROR: the sweep stops before bad data spreads."""


class StepFailed(RuntimeError):
    """A step raised: the message is one line naming the step and the cause; the cause is chained."""

    @classmethod
    def of(cls, where: str, cause: BaseException) -> Exception:
        import dagster as dg

        from rag_assets.batch import PartitionsFailed
        from rag_core.data.datasets import DatasetError
        from rag_core.planning.spec import SpecError

        if isinstance(cause, PartitionsFailed) and len(cause.failures) == 1:  # as a run of its own would say
            key, error = cause.failures[0]
            return cls.of(f"{cause.stage}[{key}]", error)
        if isinstance(cause, DatasetError | SpecError):  # already names the file, row and field
            return cause
        what = cause.description if isinstance(cause, dg.Failure) else f"{type(cause).__name__}: {cause}"
        return cls(f"{where}: {what}")
