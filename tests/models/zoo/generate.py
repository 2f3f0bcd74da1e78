"""Build the model zoo: real architectures, exported by real tools, small enough to commit.

    python -m tests.models.zoo.generate            # every model (a few minutes)
    python -m tests.models.zoo.generate -k bert    # only the recipes whose name contains "bert"

Needs the generation venv (requirements-generate.txt: torch, transformers,
onnxscript, onnxconverter-common, ...); CI needs none of it, since the .onnx
files and manifest.json are committed. Weights are random with a seed per
recipe (never from a hub); configs are small (hidden 32-64, 2 layers).

Each recipe writes one or more models and their manifest entries: the file,
the family, how it was made (which exporter or converter), its inputs with
dtypes and value kinds, its dynamic dims and the concrete shapes to test.
Before a torch export is written, onnxruntime runs it at every test shape and
is compared with torch eager: a shape the export gets wrong (a dim the
exporter baked in) is dropped and the reason recorded in the entry, so the
test never judges relaxpack against a wrong reference. An export that fails
is recorded under "export_failures", not faked.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.json"
MAX_BYTES = 2 * 1024 * 1024

log = logging.getLogger("zoo")


def seed_of(name: str) -> int:
    """A seed per recipe, independent of which other recipes run."""
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def load_manifest() -> dict:
    if MANIFEST.exists():
        return json.loads(MANIFEST.read_text())
    return {"models": [], "export_failures": []}


def write_manifest(manifest: dict) -> None:
    manifest["models"].sort(key=lambda e: e["name"])
    manifest["export_failures"].sort(key=lambda e: e["name"])
    MANIFEST.write_text(compact_json(manifest) + "\n")


def compact_json(value) -> str:
    """JSON with one line per list or object that holds no list or object (a shape, an input spec)."""
    text = json.dumps(value, indent=1)
    flat = re.compile(r"([\[{])\n\s*([^\[\]{}]*?)\n\s*([\]}])")
    while True:
        new = flat.sub(lambda m: m[1] + re.sub(r",\n\s*", ", ", m[2]) + m[3], text)
        if new == text:
            return text
        text = new


#: (module, function) of each recipe list, in an order where converter recipes come after the
#: models they convert
RECIPE_LISTS = [("hf_models", "hf_recipes"), ("kv_models", "kv_recipes"), ("merged_models", "merged_recipes"),
                ("cnn_models", "cnn_recipes"), ("pattern_models", "pattern_recipes"),
                ("spox_models", "spox_recipes"), ("converted", "converted_recipes"), ("tv_models", "tv_recipes")]


def all_recipes() -> list:
    """Every recipe this venv can run. The torchvision recipes need a venv of their own
    (tv_models.py says which) and the others need packages that one lacks: a list whose
    imports fail is skipped and named, and its models keep their committed entries."""
    import importlib
    recipes = []
    for module, function in RECIPE_LISTS:
        try:
            recipes.extend(getattr(importlib.import_module(f".{module}", __package__), function)())
        except ImportError as err:
            log.warning("skipping %s's recipes in this venv: %s", module, err)
    return recipes


def run_recipe(recipe, manifest: dict) -> None:
    """Run one recipe and replace its entries (and failures) in ``manifest``."""
    produced, failures = recipe.make()
    names = {e["name"] for e in produced} | {f["name"] for f in failures} | set(recipe.names())
    manifest["models"] = [e for e in manifest["models"] if e["name"] not in names]
    manifest["export_failures"] = [f for f in manifest["export_failures"] if f["name"] not in names]
    for entry in produced:
        size = (HERE / entry["file"]).stat().st_size
        if size > MAX_BYTES:
            raise SystemExit(f"{entry['file']} is {size} bytes, over the zoo's {MAX_BYTES}: make its config smaller")
        entry["bytes"] = size
    manifest["models"].extend(produced)
    manifest["export_failures"].extend(failures)
    for f in failures:
        log.warning("%s: %s", f["name"], f["error"])


def main(argv=None) -> int:
    if os.environ.get("PYTHONHASHSEED") != "0":
        # torch.export writes sets of symbols into the model (their order follows str hashes):
        # a fixed hash seed makes the files the same from run to run and with or without -k
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        os.execve(sys.executable, [sys.executable, "-m", "tests.models.zoo.generate", *(argv or sys.argv[1:])], env)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="only recipes whose name contains this")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    manifest = load_manifest()
    recipes = [r for r in all_recipes() if args.k in r.name]
    if not recipes:
        raise SystemExit(f"no recipe name contains {args.k!r}")
    if not any(r.name.startswith("tv_") for r in recipes):   # tv_ entries record their own versions
        manifest["generated_with"] = versions()
    for recipe in recipes:
        log.info("== %s", recipe.name)
        run_recipe(recipe, manifest)
        write_manifest(manifest)
    total = sum(e["bytes"] for e in manifest["models"])
    log.info("%d models, %.1f MB; %d export failures", len(manifest["models"]), total / 1e6,
             len(manifest["export_failures"]))
    return 0


def versions() -> dict:
    from importlib.metadata import version
    names = ["torch", "transformers", "onnxscript", "onnxconverter-common", "onnx", "onnxruntime",
             "scikit-learn", "skl2onnx", "spox", "numpy"]
    return {n: version(n) for n in names}


if __name__ == "__main__":
    sys.exit(main())
