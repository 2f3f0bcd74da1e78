"""A decoder merged as optimum merges it: one graph, an If on ``use_cache_branch``.

optimum's ``decoder_model_merged.onnx`` (what exporting a Hugging Face
decoder for generation gives by default) joins two exports: the first step
(no past: prompt in, presents out) and the later steps (with past). Its
inputs are those of the with-past model plus ``use_cache_branch`` (bool of
shape (1,)); one If holds each export's graph as a branch, both reading the
graph's inputs from the outer scope and its weights from outer initializers,
and their presents differ in length (sequence vs past + sequence). Here the
two are TorchScript exports of the same GPT-2 (the zoo's gpt2_kv config);
the first-step branch is fed an empty past, as optimum feeds it.
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path

import onnx
import onnxruntime as ort
import torch
import transformers as tf
from onnx import helper

from .generate import HERE, seed_of
from .inputs import make_inputs
from .kv_models import CausalLMWithPast, flat_layers, kv_recipes, with_total
from .torch_export import EXPORTERS, TorchRecipe, close, export, perturb_norms


class FirstStep(torch.nn.Module):
    """``(input_ids, attention_mask) -> (logits, *present)`` from an empty DynamicCache."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids, mask):
        out = self.model(input_ids=ids, attention_mask=mask, cache=tf.DynamicCache(config=self.model.config),
                         use_cache=True)
        return (out.logits, *flat_layers(out.past_key_values))


def renamed(graph: onnx.GraphProto, prefix: str, keep: set[str]) -> onnx.GraphProto:
    """``graph`` with every value name not in ``keep`` prefixed (so two exports can sit side by side)."""
    graph = copy.deepcopy(graph)

    def name(value: str) -> str:
        return value if not value or value in keep else prefix + value
    for node in graph.node:
        node.input[:] = [name(v) for v in node.input]
        node.output[:] = [name(v) for v in node.output]
        node.name = prefix + node.name
    for init in graph.initializer:
        init.name = name(init.name)
    for out in graph.output:
        out.name = name(out.name)
    del graph.value_info[:]
    return graph


def merge(with_past: onnx.ModelProto, first: onnx.ModelProto) -> onnx.ModelProto:
    """The merged model: with_past's inputs and ``use_cache_branch``, one If, with_past's outputs."""
    inputs = {i.name for i in with_past.graph.input}
    cached, fresh = renamed(with_past.graph, "with_past/", inputs), renamed(first.graph, "first/", inputs)
    initializers = [*cached.initializer, *fresh.initializer]
    for branch in (cached, fresh):
        del branch.initializer[:]
        del branch.input[:]
    node = helper.make_node("If", ["use_cache_branch"], [o.name for o in with_past.graph.output],
                            then_branch=cached, else_branch=fresh, name="optimum::if")
    flag = helper.make_tensor_value_info("use_cache_branch", onnx.TensorProto.BOOL, [1])
    graph = helper.make_graph([node], "merged", [*with_past.graph.input, flag], list(with_past.graph.output),
                              initializers)
    return helper.make_model(graph, opset_imports=list(with_past.opset_import), ir_version=with_past.ir_version)


class MergedDecoder:
    """The recipe: export both steps of one GPT-2, merge them, check the merge against torch."""

    name = "gpt2_kv_merged_ts"

    def names(self):
        return [self.name]

    def make(self):
        torch.manual_seed(seed_of(self.name))
        recipe = next(r for r in kv_recipes() if r.name == "gpt2_kv")
        module = perturb_norms(recipe.build().eval())
        first = TorchRecipe("gpt2_first", recipe.family, recipe.source, None, recipe.inputs[:1] + [
            {**recipe.inputs[1], "shape": ["batch", "sequence"]}], recipe.outputs,
            {"batch": 2, "sequence": 3}, [{"batch": 1, "sequence": 4}, {"batch": 3, "sequence": 6}])
        with tempfile.TemporaryDirectory() as tmp:
            export(module, recipe, "ts", Path(tmp) / "with_past.onnx")
            export(FirstStep(module.model).eval(), first, "ts", Path(tmp) / "first.onnx")
            merged = merge(onnx.load(str(Path(tmp) / "with_past.onnx")), onnx.load(str(Path(tmp) / "first.onnx")))
        onnx.checker.check_model(merged, full_check=True)
        onnx.save(merged, str(HERE / f"{self.name}.onnx"))
        entry = {"name": self.name, "file": f"{self.name}.onnx", "family": "gpt2",
                 "source": recipe.source + "; its first-step export (no past) and with-past export merged as "
                                           "optimum's decoder_model_merged (If on use_cache_branch)",
                 "exporter": EXPORTERS["ts"] + " twice, merged with onnx.helper",
                 "inputs": [*recipe.inputs, {"name": "use_cache_branch", "dtype": "bool", "shape": [1],
                                             "values": "dim", "dim": "use_cache"}],
                 "outputs": recipe.outputs, "dynamic_dims": ["batch", "sequence", "total_sequence", "past_sequence"],
                 "fixed_dims": {}, "judge": "float32",
                 "shapes": [with_total(d) for d in (
                     {"batch": 1, "sequence": 4, "past_sequence": 0, "use_cache": 0},
                     {"batch": 2, "sequence": 1, "past_sequence": 1, "use_cache": 1},
                     {"batch": 3, "sequence": 1, "past_sequence": 5, "use_cache": 1},
                     {"batch": 2, "sequence": 3, "past_sequence": 0, "use_cache": 0})],
                 "shape_note": "use_cache 0 takes the first-step branch, fed an empty past (past_sequence 0)"}
        check_against_torch(module, entry)
        return [entry], []


def check_against_torch(module, entry: dict) -> None:
    """onnxruntime runs the merged model as the with-past module computes, at every test shape."""
    session = ort.InferenceSession(str(HERE / entry["file"]), providers=["CPUExecutionProvider"])
    for dims in entry["shapes"]:
        feeds = make_inputs(entry, dims)
        with torch.no_grad():
            want = module(*(torch.from_numpy(feeds[s["name"]]) for s in entry["inputs"][:-1]))
        got = session.run(None, feeds)
        bad = [n for n, g, w in zip(entry["outputs"], got, want) if not close(g, w.numpy())]
        if bad:
            raise SystemExit(f"{entry['name']} at {dims}: onnxruntime differs from torch on {bad}")


def merged_recipes() -> list:
    return [MergedDecoder()]
