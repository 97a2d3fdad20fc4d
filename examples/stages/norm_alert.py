#!/usr/bin/python3
"""norm_alert: a tprobe stage in Python that prints every tensor whose norm exceeds a threshold
and passes every record on unchanged, so that it can stand where tprobe-stats stands:

    {"name": "alert", "exec": "../examples/stages/norm_alert.py", "inputs": ["capture"],
     "options": {"threshold": 5}}

Everything but the function below is tprobe.stage (docs/stage-protocol.md). Norms come with the
records: the capture computes statistics in place for what it does not save; a tensor whose
statistics are still unknown is named as such once.
"""
import os
import sys

# tprobe run puts python/ on a stage's PYTHONPATH (docs/stage-protocol.md, section 1); this line is
# for running the example by hand from a checkout.
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from tprobe.stage import Option, Stage  # noqa: E402


def handle(record, stage):
    if record.kind == "tensor":
        norm = record.stats.get("norm")
        if isinstance(norm, (int, float)) and norm > stage.options["threshold"]:
            print(f"norm-alert: step {record.step} rank {record.rank} {record.entry} {record.slot} "
                  f"norm={norm:.6g}", flush=True)
    return record


if __name__ == "__main__":
    Stage("norm-alert", "print the tensors whose norm exceeds a threshold; pass every record on",
          [Option("threshold", "float", 10.0, "norm above which a tensor is printed", min=0)]).main(handle)
