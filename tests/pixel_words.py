"""Words of noisy 0/1 pixels, OCR-like (the tests of a margin loss's L-BFGS start at w = 0,
where every labeling ties: tests/test_training.py, tests/test_ddp.py)."""

from __future__ import annotations

from typing import Any

import torch

from structssl.data import SemiSupervisedDataModule
from structssl.data.modules.base import with_index


class PixelWords(SemiSupervisedDataModule):
    """Labeled and dev words of 5 letters (4 labels), each letter 12 pixels: its label's seeded
    0/1 prototype with 20 % of the pixels switched on at random."""

    num_labels = 4

    def __init__(self, num_labeled: int = 20, num_dev: int = 5,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.num_labeled, self.num_dev, self.dtype = num_labeled, num_dev, dtype

    def build(self) -> dict[str, list[Any]]:
        gen = torch.Generator().manual_seed(0)
        prototypes = (torch.rand(4, 12, generator=gen) < 0.4).to(self.dtype)

        def word() -> dict[str, Any]:
            y = torch.randint(0, 4, (5,), generator=gen)
            noise = (torch.rand(5, 12, generator=gen) < 0.2).to(self.dtype)
            return {"inputs": ((prototypes[y] + noise) > 0).to(self.dtype), "labels": y}

        labeled = with_index([word() for _ in range(self.num_labeled)])
        return {"labeled": labeled, "unlabeled": [],
                "dev": with_index([word() for _ in range(self.num_dev)]), "test": []}
