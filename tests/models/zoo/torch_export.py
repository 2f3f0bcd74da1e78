"""A torch model exported by both torch exporters, each export checked against torch.

``TorchRecipe(name, ...).make()`` writes ``<name>_ts.onnx`` (TorchScript,
``torch.onnx.export(..., dynamo=False)``, dynamic_axes) and
``<name>_dynamo.onnx`` (``dynamo=True``, dynamic_shapes of named ``Dim``s,
or ``Dim.DYNAMIC`` when torch.export rejects the named ones), one file each
(no external data).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
import onnxruntime as ort
import torch

from .generate import HERE, seed_of
from .inputs import concrete_shape, make_inputs

log = logging.getLogger("zoo")

EXPORTERS = {"ts": "torch.onnx.export(dynamo=False) (TorchScript)",
             "dynamo": "torch.onnx.export(dynamo=True)"}


@dataclass
class TorchRecipe:
    """One torch model: how to build it, its inputs and the shapes to test.

    ``inputs`` are manifest input entries (shape with dim names);
    ``export_dims`` the dim values of the example inputs; ``test_dims`` the
    shapes to test (at least two per dynamic dim); ``fixed`` maps an input
    axis's dim that is *not* dynamic to the reason (e.g. an absolute position
    table sized for one image size).
    """

    name: str
    family: str
    source: str
    build: Callable[[], torch.nn.Module]
    inputs: list[dict]
    outputs: list[str]
    export_dims: dict[str, int]
    test_dims: list[dict[str, int]]
    fixed: dict[str, str] = field(default_factory=dict)
    exporters: tuple[str, ...] = ("ts", "dynamo")
    judge: str = "float32"
    note: str | None = None

    def names(self) -> list[str]:
        return [f"{self.name}_{e}" for e in self.exporters]

    def make(self):
        torch.manual_seed(seed_of(self.name))
        module = perturb_norms(self.build().eval())
        produced, failures = [], []
        for exporter in self.exporters:
            entry = self.entry(exporter)
            try:
                export(module, self, exporter, HERE / entry["file"])
            except Exception as err:  # a real exporter failure is recorded, not faked
                failures.append({"name": entry["name"], "exporter": EXPORTERS[exporter], "family": self.family,
                                 "error": one_line(err)})
                continue
            verify(module, entry, self.export_dims)
            if not entry["shapes"]:
                failures.append({"name": entry["name"], "exporter": EXPORTERS[exporter], "family": self.family,
                                 "error": "onnxruntime disagrees with torch at every shape: "
                                          + "; ".join(entry["dropped_shapes"].values())})
                (HERE / entry["file"]).unlink()
                continue
            produced.append(entry)
        return produced, failures

    def dynamic_dims(self) -> list[str]:
        dims = []
        for spec in self.inputs:
            for d in spec["shape"]:
                if isinstance(d, str) and d not in dims:
                    dims.append(d)
        return dims

    def entry(self, exporter: str) -> dict:
        name = f"{self.name}_{exporter}"
        return {"name": name, "file": f"{name}.onnx", "family": self.family, "source": self.source,
                "exporter": EXPORTERS[exporter], "inputs": self.inputs, "outputs": self.outputs,
                "dynamic_dims": self.dynamic_dims(), "fixed_dims": self.fixed, "shapes": list(self.test_dims),
                "judge": self.judge, **({"shape_note": self.note} if self.note else {})}


def perturb_norms(module: torch.nn.Module) -> torch.nn.Module:
    """Give every normalization layer trained-looking statistics and affine parameters.

    Fresh layers are identities in eval mode (scale 1, shift 0, running mean 0,
    variance 1): a converter that dropped them, or folded them wrongly into a
    conv, would still match. Uses torch's global generator (seeded per recipe).
    """
    with torch.no_grad():
        for layer in module.modules():
            if "norm" not in type(layer).__name__.lower():
                continue
            for name, tensor in [*layer.named_parameters(recurse=False), *layer.named_buffers(recurse=False)]:
                if not tensor.is_floating_point():
                    continue
                if name in ("weight", "running_var"):
                    tensor.mul_(torch.empty_like(tensor).uniform_(0.5, 1.5))
                elif name in ("bias", "running_mean"):
                    tensor.add_(torch.randn_like(tensor) * 0.2)
    return module


def example_tensors(recipe: TorchRecipe, dims: dict[str, int]) -> tuple[torch.Tensor, ...]:
    arrays = make_inputs({"name": recipe.name, "inputs": recipe.inputs}, dims)
    return tuple(torch.from_numpy(arrays[s["name"]]) for s in recipe.inputs)


def export(module, recipe: TorchRecipe, exporter: str, path) -> None:
    args = example_tensors(recipe, recipe.export_dims)
    names = [s["name"] for s in recipe.inputs]
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        if exporter == "ts":
            axes = {s["name"]: {i: d for i, d in enumerate(s["shape"]) if isinstance(d, str)} for s in recipe.inputs}
            axes.update({o: output_axes(module, recipe, o) for o in recipe.outputs})
            torch.onnx.export(module, args, str(path), input_names=names, output_names=recipe.outputs,
                              dynamic_axes=axes, opset_version=17, dynamo=False)
        else:
            export_dynamo(module, recipe, args, names, path)
    model = onnx.load(str(path))
    drop_stack_traces(model)
    onnx.save(model, str(path))  # one self-contained file, whatever the exporter wrote


def drop_stack_traces(model: onnx.ModelProto) -> None:
    """Remove the dynamo exporter's per-node Python stack traces: they hold this machine's paths and
    the generator's line numbers (so files would change with every edit), and nothing reads them."""
    graphs = [model.graph]
    while graphs:
        graph = graphs.pop()
        for node in graph.node:
            keep = [p for p in node.metadata_props if p.key != "pkg.torch.onnx.stack_trace"]
            del node.metadata_props[:]
            node.metadata_props.extend(keep)
            graphs.extend(a.g for a in node.attribute if a.HasField("g"))
            graphs.extend(g for a in node.attribute for g in a.graphs)


def export_dynamo(module, recipe, args, names, path) -> None:
    dims = {d: torch.export.Dim(d) for d in recipe.dynamic_dims()}
    named = [{i: dims[d] for i, d in enumerate(s["shape"]) if isinstance(d, str)} for s in recipe.inputs]
    auto = [{i: torch.export.Dim.DYNAMIC for i, d in enumerate(s["shape"]) if isinstance(d, str)}
            for s in recipe.inputs]
    if takes_var_args(module):  # Wrap.forward(*args): the specs go in one tuple, for ``args``
        named, auto = (tuple(named),), (tuple(auto),)
    try:
        program = torch.onnx.export(module, args, input_names=names, output_names=recipe.outputs,
                                    dynamic_shapes=named, dynamo=True, external_data=False)
    except Exception as err:
        if "Constraints violated" not in str(err) and "specializ" not in str(err).lower():
            raise
        log.info("%s: named Dims rejected (%s); exporting with Dim.DYNAMIC", recipe.name, one_line(err)[:200])
        program = torch.onnx.export(module, args, input_names=names, output_names=recipe.outputs,
                                    dynamic_shapes=auto, dynamo=True, external_data=False)
    program.save(str(path), external_data=False)


def takes_var_args(module) -> bool:
    params = inspect.signature(module.forward).parameters.values()
    return any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)


def output_axes(module, recipe: TorchRecipe, output: str) -> list[int]:
    """The axes of ``output`` whose size changes between two test shapes (TorchScript's dynamic_axes)."""
    shapes = []
    for dims in (recipe.export_dims, *recipe.test_dims):
        outs = run_torch(module, recipe, dims)
        shapes.append(outs[recipe.outputs.index(output)].shape)
    return [i for i in range(len(shapes[0])) if len({s[i] for s in shapes}) > 1]


def run_torch(module, recipe, dims) -> list[np.ndarray]:
    with torch.no_grad():
        outs = module(*example_tensors(recipe, dims))
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    return [o.detach().numpy() for o in outs]


def verify(module, entry: dict, export_dims: dict) -> None:
    """Keep the test shapes at which onnxruntime matches torch eager; record why the others went.

    When one is dropped, the exporter baked a dim in: the export's own shape is
    tested instead (when onnxruntime gets that one right), and the entry says so.
    """
    session = ort.InferenceSession(str(HERE / entry["file"]), providers=["CPUExecutionProvider"])
    kept, dropped = [], {}
    for dims in entry["shapes"]:
        error = check_shape(module, session, entry, dims)
        if error:
            dropped[shape_key(entry, dims)] = error
        else:
            kept.append(dims)
    if dropped:
        entry["dropped_shapes"] = dropped
        log.warning("%s: dropped %s", entry["name"], dropped)
        if export_dims not in kept and not check_shape(module, session, entry, export_dims):
            kept.append(dict(export_dims))
            entry["baked_shape"] = (f"onnxruntime runs this export right only at some shapes (dropped_shapes says "
                                    f"how the others fail): the exporter baked a dim in; also tested at the "
                                    f"export's own shape {export_dims}")
    entry["shapes"] = kept


def check_shape(module, session, entry: dict, dims: dict) -> str | None:
    """None when onnxruntime matches torch eager at ``dims``, else what went wrong."""
    feeds = make_inputs(entry, dims)
    args = tuple(torch.from_numpy(feeds[s["name"]]) for s in entry["inputs"])
    with torch.no_grad():
        want = module(*args)
    want = [w.numpy() for w in (want if isinstance(want, (tuple, list)) else (want,))]
    try:
        got = session.run(None, feeds)
    except Exception as err:
        return f"onnxruntime fails: {one_line(err)[:200]}"
    bad = [(n, worst(g, w)) for n, g, w in zip(entry["outputs"], got, want) if not close(g, w)]
    if bad:
        return "onnxruntime differs from torch: " + ", ".join(f"{n} by {e}" for n, e in bad)
    return None


def shape_key(entry, dims) -> str:
    return ", ".join(f"{s['name']}{list(concrete_shape(s['shape'], dims))}" for s in entry["inputs"])


def close(got, want) -> bool:
    if got.shape != want.shape:
        return False
    return bool(np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-3, atol=1e-3))


def worst(got, want) -> str:
    if got.shape != want.shape:
        return f"shape {list(got.shape)} vs torch {list(want.shape)}"
    return f"{float(np.max(np.abs(got.astype(np.float64) - want))):.3g}"


def one_line(err: BaseException) -> str:
    """The first line of ``err``; for torch's exporter errors, the line under its "Exception summary"."""
    text = [line.replace(f"{HERE}/", "") for line in str(err).strip().splitlines() if line.strip()]
    if "## Exception summary" in text:
        return text[text.index("## Exception summary") + 1].strip()
    return f"{type(err).__name__}: {text[0] if text else ''}"
