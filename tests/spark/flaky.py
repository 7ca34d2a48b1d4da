"""A pyrmq sink whose first micro-batch commit fails *after* its tasks published (importable by workers)."""

from __future__ import annotations

import os

from connectors.spark.datasource import PyrmqDataSource
from connectors.spark.options import sink_options
from connectors.spark.sink import PyrmqStreamWriter

MARKER_OPTION = "failCommitMarker"


class CommitFailure(RuntimeError):
    pass


class FlakyCommitWriter(PyrmqStreamWriter):
    def __init__(self, opts, schema, marker: str) -> None:
        super().__init__(opts, schema)
        self.marker = marker

    def commit(self, messages, batchId: int) -> None:
        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise CommitFailure(f"injected: commit of batch {batchId} fails after its messages were published")
        super().commit(messages, batchId)


class FlakyCommitSource(PyrmqDataSource):
    @classmethod
    def name(cls) -> str:
        return "pyrmq_flaky_commit"

    def streamWriter(self, schema, overwrite: bool):
        options = {k: v for k, v in self.options.items() if k.lower() != MARKER_OPTION.lower()}
        marker = next(v for k, v in self.options.items() if k.lower() == MARKER_OPTION.lower())
        return FlakyCommitWriter(sink_options(options), schema, marker)
