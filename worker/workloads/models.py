"""Small models for the built-in workloads.

Chosen so that gradient accumulation and uneven per-rank batch shares give the same update as
the full batch: no BatchNorm (its statistics depend on the micro-batch; GroupNorm and
LayerNorm are per-sample) and no dropout (its masks depend on the random stream's position).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional


class BasicBlock(nn.Module):
    def __init__(self, channels_in: int, channels_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels_in, channels_out, 3, stride, 1, bias=False)
        self.norm1 = nn.GroupNorm(4, channels_out)
        self.conv2 = nn.Conv2d(channels_out, channels_out, 3, 1, 1, bias=False)
        self.norm2 = nn.GroupNorm(4, channels_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or channels_in != channels_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(channels_in, channels_out, 1, stride, bias=False),
                nn.GroupNorm(4, channels_out),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = functional.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return functional.relu(out + self.shortcut(x))


class ResNet8(nn.Module):
    """A CIFAR-shaped (3x32x32) residual network: a stem and three stages of one block."""

    def __init__(self, classes: int = 10, width: int = 16) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.GroupNorm(4, width), nn.ReLU()
        )
        self.stages = nn.Sequential(
            BasicBlock(width, width, 1),
            BasicBlock(width, 2 * width, 2),
            BasicBlock(2 * width, 4 * width, 2),
        )
        self.head = nn.Linear(4 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.stages(self.stem(x))
        logits: torch.Tensor = self.head(features.mean(dim=(2, 3)))
        return logits


class LstmLanguageModel(nn.Module):
    def __init__(self, vocab: int, embedding: int = 64, hidden: int = 128, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, embedding)
        self.lstm = nn.LSTM(embedding, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embed(tokens))
        logits: torch.Tensor = self.head(out)
        return logits


class TransformerLanguageModel(nn.Module):
    """A causal Transformer encoder stack with learned positions (pre-norm, no dropout)."""

    def __init__(
        self, vocab: int, length: int, width: int = 64, heads: int = 4, layers: int = 2
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.zeros(length, width))
        nn.init.normal_(self.position, std=0.02)
        layer = nn.TransformerEncoderLayer(
            width, heads, dim_feedforward=2 * width, dropout=0.0, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)
        self.causal: torch.Tensor
        self.register_buffer(
            "causal", nn.Transformer.generate_square_subsequent_mask(length), persistent=False
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        x = self.embed(tokens) + self.position[:length]
        mask = self.causal[:length, :length]
        x = self.encoder(x, mask=mask, is_causal=True)
        logits: torch.Tensor = self.head(self.norm(x))
        return logits


class RecommendationMlp(nn.Module):
    """User and item embeddings plus dense features into an MLP that predicts a click."""

    def __init__(self, users: int, items: int, dense: int, embedding: int = 32) -> None:
        super().__init__()
        self.users = nn.Embedding(users, embedding)
        self.items = nn.Embedding(items, embedding)
        self.mlp = nn.Sequential(
            nn.Linear(2 * embedding + dense, 128),
            nn.ReLU(),
            nn.Linear(128, 64),
            nn.ReLU(),
            nn.Linear(64, 1),
        )

    def forward(
        self, users: torch.Tensor, items: torch.Tensor, dense: torch.Tensor
    ) -> torch.Tensor:
        features = torch.cat([self.users(users), self.items(items), dense], dim=1)
        logits: torch.Tensor = self.mlp(features).squeeze(1)
        return logits
