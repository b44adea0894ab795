"""Score the model that train pushed on the held-out rows and write the metrics.

    python3 evaluate.py --model model.json --data data/dataset.csv --out metrics.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import linear


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if not Path(args.model).exists():
        print(f"{args.model} is missing: run train first (evaluate reads the commit train "
              "pushed)", file=sys.stderr)
        return 2
    model = json.loads(Path(args.model).read_text(encoding="utf-8"))
    _features, rows, targets = linear.read_dataset(args.data)
    test_rows, test_targets = linear.split(rows, targets, held_out=True)
    result = {"model": args.model, "weights": model["weights"], "bias": model["bias"],
              **linear.metrics(model, test_rows, test_targets)}
    linear.write_json(args.out, result)
    print(f"evaluated on {result['rows']} held-out rows: mse {result['mse']} r2 {result['r2']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
