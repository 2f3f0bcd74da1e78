"""The README's memory table: the 9 real models of ONNX's backend suite
("light" versions, weights made at run time), built at -O2 at their static
shapes, and their memory plans against the lower bound.

    python -m benchmarks.memory            # a markdown table on stdout
"""

from __future__ import annotations

import argparse
from pathlib import Path

import onnx

import relaxpack

MODELS = ("resnet50", "squeezenet", "inception_v1", "inception_v2", "densenet121", "shufflenet", "vgg19",
          "bvlc_alexnet", "zfnet512")
LIGHT = Path(onnx.__path__[0]) / "backend" / "test" / "data" / "light"


def mib(n: int) -> str:
    return f"{n / 2 ** 20:.1f} MiB"


def row(name: str) -> str:
    """One table row: what the build's memory plan says of the model."""
    plan = relaxpack.build(relaxpack.from_onnx(str(LIGHT / f"light_{name}.onnx"))).metadata["memory_plan"]
    ratio = plan["arena_bytes"] / plan["lower_bound_bytes"]
    return (f"| {name} | {plan['intermediates']} | {plan['buffers']} | {mib(plan['arena_bytes'])} | {ratio:.3f} | "
            f"{mib(plan['naive_bytes'])} | {plan['workspaces']}, largest {mib(plan['largest_workspace_bytes'])} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-k", default="", help="only the models whose name contains this")
    args = parser.parse_args(argv)
    print("| model | intermediates | arena buffers | arena | arena / lower bound | naive (sum of intermediates) "
          "| workspaces (in the arena) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in MODELS:
        if args.k in name:
            print(row(name), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
