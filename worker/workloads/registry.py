"""The built-in workloads: name -> model, synthetic data, loss and optimizer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional

from worker.workloads.models import (
    LstmLanguageModel,
    RecommendationMlp,
    ResNet8,
    TransformerLanguageModel,
)

Batch = tuple[torch.Tensor, ...]


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    description: str
    default_batch_size: int
    # Model name in throughput-model keys: "<family> (batch size <B>)".
    family: str
    build_model: Callable[[], nn.Module]
    # ``count`` samples drawn from ``generator`` (on the CPU).
    make_samples: Callable[[torch.Generator, int], Batch]
    # Mean loss of ``model`` over a batch already on the model's device.
    loss: Callable[[nn.Module, Batch], torch.Tensor]
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer]

    def job_type(self, batch_size: int | None = None) -> str:
        return f"{self.family} (batch size {batch_size or self.default_batch_size})"


class UnknownWorkloadError(KeyError):
    def __str__(self) -> str:
        return f"unknown workload {self.args[0]!r}; known: {', '.join(sorted(WORKLOADS))}"


# Image classification on CIFAR-shaped inputs, labelled by a fixed random linear "teacher" so
# the loss can actually fall.
_IMAGE_CLASSES = 10
_TEACHER = torch.randn(3 * 32 * 32, _IMAGE_CLASSES, generator=torch.Generator().manual_seed(7))


def _images(generator: torch.Generator, count: int) -> Batch:
    images = torch.randn(count, 3, 32, 32, generator=generator)
    labels = (images.reshape(count, -1) @ _TEACHER).argmax(dim=1)
    return images, labels


def _classification_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    images, labels = batch
    return functional.cross_entropy(model(images), labels)


# Language modelling: token streams from a noisy affine recurrence (learnable, not trivial).
_VOCAB = 1000
_LENGTH = 32


def _tokens(generator: torch.Generator, count: int) -> Batch:
    tokens = torch.empty(count, _LENGTH + 1, dtype=torch.int64)
    tokens[:, 0] = torch.randint(0, _VOCAB, (count,), generator=generator)
    noise = torch.randint(0, _VOCAB, (count, _LENGTH), generator=generator)
    keep = torch.rand(count, _LENGTH, generator=generator) < 0.8
    for position in range(_LENGTH):
        follow = (tokens[:, position] * 7 + 13) % _VOCAB
        tokens[:, position + 1] = torch.where(keep[:, position], follow, noise[:, position])
    return (tokens,)


def _language_model_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    (tokens,) = batch
    logits = model(tokens[:, :-1])
    return functional.cross_entropy(logits.reshape(-1, _VOCAB), tokens[:, 1:].reshape(-1))


# Click prediction: users x items with a hidden affinity rule, plus dense features.
_USERS = 5000
_ITEMS = 5000
_DENSE = 13


def _interactions(generator: torch.Generator, count: int) -> Batch:
    users = torch.randint(0, _USERS, (count,), generator=generator)
    items = torch.randint(0, _ITEMS, (count,), generator=generator)
    dense = torch.randn(count, _DENSE, generator=generator)
    clicked = (((users * 31 + items * 17) % 7 < 3) ^ (dense[:, 0] > 1.0)).float()
    return users, items, dense, clicked


def _click_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    users, items, dense, clicked = batch
    return functional.binary_cross_entropy_with_logits(model(users, items, dense), clicked)


def _sgd(learning_rate: float) -> Callable[[nn.Module], torch.optim.Optimizer]:
    def make(model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=learning_rate, momentum=0.9)

    return make


def _adam(learning_rate: float) -> Callable[[nn.Module], torch.optim.Optimizer]:
    def make(model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.Adam(model.parameters(), lr=learning_rate)

    return make


WORKLOADS: dict[str, Workload] = {
    workload.name: workload
    for workload in (
        Workload(
            name="resnet",
            description="ResNet-8 with GroupNorm on synthetic 3x32x32 images, 10 classes",
            default_batch_size=32,
            family="Hadar ResNet-8",
            build_model=ResNet8,
            make_samples=_images,
            loss=_classification_loss,
            make_optimizer=_sgd(0.05),
        ),
        Workload(
            name="lstm",
            description="2-layer LSTM language model, vocabulary 1000, sequences of 32 tokens",
            default_batch_size=20,
            family="Hadar LSTM-LM",
            build_model=lambda: LstmLanguageModel(_VOCAB),
            make_samples=_tokens,
            loss=_language_model_loss,
            make_optimizer=_adam(2e-3),
        ),
        Workload(
            name="transformer",
            description="2-layer causal Transformer (width 64, 4 heads), sequences of 32 tokens",
            default_batch_size=16,
            family="Hadar Transformer-2L",
            build_model=lambda: TransformerLanguageModel(_VOCAB, _LENGTH),
            make_samples=_tokens,
            loss=_language_model_loss,
            make_optimizer=_adam(1e-3),
        ),
        Workload(
            name="recommendation",
            description="Embedding + MLP click model, 5000 users x 5000 items, 13 dense features",
            default_batch_size=256,
            family="Hadar Recommendation-MLP",
            build_model=lambda: RecommendationMlp(_USERS, _ITEMS, _DENSE),
            make_samples=_interactions,
            loss=_click_loss,
            make_optimizer=_adam(1e-3),
        ),
    )
}


def get_workload(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UnknownWorkloadError(name) from None
