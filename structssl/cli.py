"""The ``structssl`` command."""

from __future__ import annotations

import argparse
from typing import Optional, Sequence


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="structssl",
        description="Semi-supervised structured prediction on batched semiring dynamic programs.",
    )
    sub = parser.add_subparsers(dest="command")
    demo = sub.add_parser("demo", help="train a linear-chain CRF on built-in synthetic HMM data")
    demo.add_argument("--states", type=int, default=5, help="number of HMM states (labels)")
    demo.add_argument("--dim", type=int, default=20, help="emission dimension")
    demo.add_argument("--train", type=int, default=200, help="training sequences")
    demo.add_argument("--test", type=int, default=200, help="test sequences")
    demo.add_argument("--iterations", type=int, default=60, help="L-BFGS iterations")
    demo.add_argument("--seed", type=int, default=0, help="random seed")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from structssl.demo import run_demo

        run_demo(num_states=args.states, dim=args.dim, num_train=args.train, num_test=args.test,
                 iterations=args.iterations, seed=args.seed)
        return 0
    parser.print_help()
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
