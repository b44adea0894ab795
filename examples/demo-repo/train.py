"""Fit the linear model on the training rows and write it as JSON.

    python3 train.py --data data/dataset.csv --out model.json
"""

from __future__ import annotations

import argparse
import sys

import linear


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    features, rows, targets = linear.read_dataset(args.data)
    train_rows, train_targets = linear.split(rows, targets, held_out=False)
    weights, bias = linear.fit(train_rows, train_targets)
    model = {"kind": "linear-least-squares", "features": features,
             "weights": [round(w, 6) for w in weights], "bias": round(bias, 6),
             "trained_rows": len(train_rows), "dataset": args.data}
    model["training"] = linear.metrics(model, train_rows, train_targets)
    linear.write_json(args.out, model)
    print(f"trained on {len(train_rows)} rows: weights {model['weights']} bias {model['bias']}")
    print(f"training mse {model['training']['mse']} r2 {model['training']['r2']}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
