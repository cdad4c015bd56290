"""Neural scorers: any ``nn.Module`` that produces potentials plugs into the structures and losses.

:class:`BiLSTMEncoder` embeds the tokens (word ids, sparse feature bags or dense vectors),
runs a bidirectional LSTM over each sentence (packed by ``lengths``, so padding never reaches
the recurrence) and returns per-position states, 0 at padded positions.
:class:`NeuralChainScorer` puts a linear layer and a :class:`~structssl.scorers.chain.ChainHead`
(transition, start, end) on top of **any** encoder with the contract

    encoder(inputs, lengths) -> (B, N, H) per-position states,

giving (B, N, C, C) linear-chain potentials (the BiLSTM-CRF of Huang, Xu and Yu 2015; Lample
et al. 2016). Unlike the linear scorers, the potentials are not linear in the parameters, so
the convex objectives of the papers become non-convex; the losses need no change.

Time O(B N (E H + H^2) * layers) for the LSTM, memory O(B N H * layers) plus autograd.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from structssl.scorers.base import LinearInputs, Scorer, check_lengths
from structssl.scorers.chain import ChainHead
from structssl.structures.base import positive_int
from structssl.structures.linear_chain import LinearChain

__all__ = ["BiLSTMEncoder", "NeuralChainScorer"]


def _dropout(p: float) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise ValueError(f"dropout must be a float in [0, 1); got {p!r}")
    return float(p)


class BiLSTMEncoder(nn.Module):
    """Token embeddings -> bidirectional LSTM -> (B, N, 2 hidden_dim) states.

    Exactly one of ``num_words``, ``num_features``, ``input_dim`` is given.

    Args:
        hidden_dim: H, the LSTM state size per direction (the output has 2 H features).
        num_words: word vocabulary (inputs (B, N) long word ids).
        num_features: sparse feature index space (inputs (B, N, F) long, 0 = padding); each
            token is embedded as the sum of its features' embeddings.
        input_dim: D of dense inputs (B, N, D), projected linearly to ``embedding_dim``.
        embedding_dim: E.
        num_layers: stacked LSTM layers.
        dropout: dropout on the embeddings, between layers and on the output (training only).
        embedding_std: embeddings / projection ~ N(0, embedding_std^2); the LSTM keeps torch's
            default initialisation. Both are deterministic given the torch seed.
        validate: check value ranges of inputs and lengths (device syncs).

    Attributes:
        output_dim: 2 H.
    """

    def __init__(
        self,
        hidden_dim: int,
        num_words: Optional[int] = None,
        num_features: Optional[int] = None,
        input_dim: Optional[int] = None,
        embedding_dim: int = 64,
        num_layers: int = 1,
        dropout: float = 0.0,
        embedding_std: float = 0.1,
        validate: bool = True,
    ) -> None:
        super().__init__()
        self.hidden_dim = positive_int(hidden_dim, "hidden_dim")
        self.embedding_dim = positive_int(embedding_dim, "embedding_dim")
        self.num_layers = positive_int(num_layers, "num_layers")
        self.dropout = _dropout(dropout)
        self.validate = bool(validate)
        self.output_dim = 2 * self.hidden_dim
        self.embedding = LinearInputs(
            self.embedding_dim, num_features, num_words, input_dim, bias=False,
            init_std=embedding_std, validate=validate,
        )  # fmt: skip
        self.lstm = nn.LSTM(
            self.embedding_dim,
            self.hidden_dim,
            num_layers=self.num_layers,
            batch_first=True,
            bidirectional=True,
            dropout=self.dropout if self.num_layers > 1 else 0.0,  # torch warns otherwise
        )
        self.drop = nn.Dropout(self.dropout)

    def forward(self, inputs: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        """Per-position BiLSTM states; outputs at valid positions ignore the padding.

        Args:
            inputs: word ids (B, N), feature indices (B, N, F) or dense (B, N, D).
            lengths: (B,) long in [1, N] (default: all N).

        Returns:
            (B, N, 2 H) states, 0 at positions ``>= lengths``.

        Raises:
            ValueError: wrong input shape, dtype or values, or ``lengths`` not matching.
        """
        self.embedding.check(inputs, "B, N")
        b, n = inputs.shape[:2]
        if n == 0:
            raise ValueError(f"inputs must have N >= 1 positions; got shape {tuple(inputs.shape)}")
        lengths = check_lengths(lengths, b, n, inputs.device, self.validate)
        embedded = self.drop(self.embedding(inputs))  # (B, N, E)
        # packing needs the lengths on the CPU (one device sync)
        packed = pack_padded_sequence(
            embedded, lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        states, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(
            states, batch_first=True, total_length=n
        )  # (B, N, 2H), 0-padded
        return self.drop(out)


class NeuralChainScorer(Scorer):
    """Linear-chain potentials from any encoder: ``encoder -> linear -> unary -> chain``.

    Args:
        encoder: an ``nn.Module`` called as ``encoder(inputs, lengths)`` returning (B, N, H).
        encoder_dim: H.
        num_labels: C.
        transitions: learn a transition matrix.
        start_end: learn start and end weights.
        init_std: transition / start / end ~ N(0, init_std^2); 0 (default) gives zeros. The
            output layer keeps torch's default ``nn.Linear`` initialisation.
        validate: check value ranges of ``lengths`` (a device sync).

    Example:
        >>> encoder = BiLSTMEncoder(hidden_dim=8, num_words=20, embedding_dim=4)
        >>> scorer = NeuralChainScorer(encoder, encoder.output_dim, num_labels=3)
        >>> scorer(torch.zeros(2, 5, dtype=torch.long), torch.tensor([5, 2])).shape
        torch.Size([2, 5, 3, 3])
    """

    def __init__(
        self,
        encoder: nn.Module,
        encoder_dim: int,
        num_labels: int,
        transitions: bool = True,
        start_end: bool = True,
        init_std: float = 0.0,
        validate: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(encoder, nn.Module):
            raise TypeError(f"encoder must be an nn.Module; got {type(encoder).__name__}")
        self.encoder = encoder
        self.encoder_dim = positive_int(encoder_dim, "encoder_dim")
        self.num_labels = positive_int(num_labels, "num_labels")
        self.validate = bool(validate)
        self.output = nn.Linear(self.encoder_dim, self.num_labels)
        self.head = ChainHead(self.num_labels, transitions, start_end, init_std)

    def unary(self, inputs: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        """Per-position label potentials, 0 at padded positions.

        Shape:
            inputs: what the encoder reads, lengths: (B,) -> (B, N, C).
        """
        return self._unary(inputs, lengths)[0]

    def _unary(self, inputs: Tensor, lengths: Optional[Tensor]) -> tuple[Tensor, Tensor]:
        states = self.encoder(inputs, lengths)
        if (
            not isinstance(states, Tensor)
            or states.dim() != 3
            or states.shape[2] != self.encoder_dim
        ):
            got = tuple(states.shape) if isinstance(states, Tensor) else type(states).__name__
            raise ValueError(
                "encoder output must have shape (B, N, H) with H = encoder_dim = "
                f"{self.encoder_dim}; got {got}"
            )
        b, n, _ = states.shape
        lengths = check_lengths(lengths, b, n, states.device, self.validate)
        unary = self.output(states)  # (B, N, C)
        valid = LinearChain.valid_mask(lengths, n).unsqueeze(2)
        return torch.where(
            valid, unary, torch.zeros((), dtype=unary.dtype, device=unary.device)
        ), lengths

    def forward(self, inputs: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        """Chain potentials.

        Args:
            inputs: what the encoder reads.
            lengths: (B,) long in [1, N] (default: all N).

        Returns:
            (B, N, C, C) potentials in the :class:`~structssl.structures.LinearChain` layout,
            0 at positions ``>= lengths``.
        """
        unary, lengths = self._unary(inputs, lengths)
        return self.head(unary, lengths)
