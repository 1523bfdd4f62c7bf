"""What the master knows about the built-in workloads.

Workers report the names they can run when they register; this table adds what ListWorkloads
shows and the throughput-model key a job gets by default. It mirrors worker/workloads (the
master does not import the worker, which needs torch); a name a worker reports that is not
here is still runnable, with a generic description.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WorkloadInfo:
    name: str
    description: str
    default_batch_size: int
    family: str

    def job_type(self, batch_size: int = 0) -> str:
        return f"{self.family} (batch size {batch_size or self.default_batch_size})"


CATALOG: dict[str, WorkloadInfo] = {
    info.name: info
    for info in (
        WorkloadInfo(
            "resnet",
            "ResNet-8 with GroupNorm on synthetic 3x32x32 images, 10 classes",
            32,
            "Hadar ResNet-8",
        ),
        WorkloadInfo(
            "lstm",
            "2-layer LSTM language model, vocabulary 1000, sequences of 32 tokens",
            20,
            "Hadar LSTM-LM",
        ),
        WorkloadInfo(
            "transformer",
            "2-layer causal Transformer (width 64, 4 heads), sequences of 32 tokens",
            16,
            "Hadar Transformer-2L",
        ),
        WorkloadInfo(
            "recommendation",
            "Embedding + MLP click model, 5000 users x 5000 items, 13 dense features",
            256,
            "Hadar Recommendation-MLP",
        ),
    )
}


def workload_info(name: str) -> WorkloadInfo:
    """The catalog entry, or a generic one for a workload only a worker knows."""
    return CATALOG.get(name) or WorkloadInfo(
        name, f"workload {name} (reported by workers)", 0, name
    )
