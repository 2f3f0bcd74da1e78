"""torchvision's detection models (its own classes) on tiny backbones, random weights.

torchvision from PyPI needs a newer torch than the zoo venv's, so these
recipes are generated in a venv of their own (``tv_venv``); the other
recipes' venv skips them (generate.py logs it), and they skip the others:

    python3 -m venv /work/venvs/tv && /work/venvs/tv/bin/pip install torch==2.14.1 torchvision==0.29.1 \\
        onnx==1.23.2 onnxruntime==1.31.1 onnxscript==0.7.2
    PYTHONPATH=. /work/venvs/tv/bin/python -m tests.models.zoo.generate -k tv_

Each entry records the versions that made it (``generated_with``).
TorchScript exports only: torchvision's detection models take a list of
images and return a list of dicts, which the dynamo exporter's dynamic
shapes do not describe. The postprocess is data-dependent end to end
(top-k per level, NMS, a Loop that pastes each mask into the image).
"""

from __future__ import annotations

import torch
from torch import nn
from torchvision.models.detection import MaskRCNN
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor
from torchvision.models.detection.rpn import RPNHead
from torchvision.ops import MultiScaleRoIAlign

from .torch_export import TorchRecipe

IMAGE = [{"name": "image", "dtype": "float32", "shape": [3, "height", "width"]}]
WIDTH = 16
CLASSES = 3


def tiny_backbone() -> nn.Module:
    """Two stride-2 convs: one feature map at stride 4, ``WIDTH`` channels."""
    body = nn.Sequential(nn.Conv2d(3, WIDTH, 3, 2, 1), nn.BatchNorm2d(WIDTH), nn.ReLU(),
                         nn.Conv2d(WIDTH, WIDTH, 3, 2, 1), nn.BatchNorm2d(WIDTH), nn.ReLU())
    body.out_channels = WIDTH
    return body


def tiny_mask_rcnn() -> nn.Module:
    anchors = AnchorGenerator(sizes=((8, 16),), aspect_ratios=((0.5, 1.0, 2.0),))
    model = MaskRCNN(
        tiny_backbone(), min_size=64, max_size=96, rpn_anchor_generator=anchors,
        rpn_head=RPNHead(WIDTH, anchors.num_anchors_per_location()[0]),
        rpn_pre_nms_top_n_test=60, rpn_post_nms_top_n_test=20,
        box_roi_pool=MultiScaleRoIAlign(["0"], 7, 2), box_head=TwoMLPHead(WIDTH * 49, 32),
        box_predictor=FastRCNNPredictor(32, CLASSES), box_detections_per_img=8,
        mask_roi_pool=MultiScaleRoIAlign(["0"], 14, 2), mask_head=MaskRCNNHeads(WIDTH, [WIDTH, WIDTH], 1),
        mask_predictor=MaskRCNNPredictor(WIDTH, WIDTH, CLASSES))
    spread_scores(model)
    return Detections(model, ("boxes", "labels", "scores", "masks"))


def spread_scores(model: nn.Module) -> None:
    """Larger random classifier weights: fresh ones give every proposal and detection nearly the
    same score, and then the order of near-ties (which rounding decides) is the output."""
    with torch.no_grad():
        for layer in (model.rpn.head.cls_logits, model.roi_heads.box_predictor.cls_score):
            layer.weight.normal_(0.0, 1.0)


class Detections(nn.Module):
    """One image in, the detection dict's fields out, as a tuple."""

    def __init__(self, model, fields):
        super().__init__()
        self.model, self.fields = model, fields

    def forward(self, image):
        (found,) = self.model([image])
        return tuple(found[f] for f in self.fields)


def versions() -> dict:
    from importlib.metadata import version
    return {n: version(n) for n in ("torch", "torchvision", "onnx", "onnxruntime")}


class TvRecipe(TorchRecipe):
    """A TorchRecipe whose entries say which versions made them (another venv than the zoo's)."""

    def make(self):
        produced, failures = super().make()
        for entry in produced:
            entry["generated_with"] = versions()
        return produced, failures


def tv_recipes() -> list[TorchRecipe]:
    return [
        TvRecipe("tv_mask_rcnn", "mask_rcnn",
                 "torchvision.models.detection.MaskRCNN on a 2-conv backbone, 3 classes (its postprocess: "
                 "RPN top-k, NMS, RoIAlign, the mask paste Loop)", tiny_mask_rcnn, IMAGE,
                 ["boxes", "labels", "scores", "masks"], {"height": 64, "width": 80},
                 [{"height": 64, "width": 80}, {"height": 72, "width": 61}, {"height": 90, "width": 70},
                  {"height": 50, "width": 77}], exporters=("ts",)),
    ]
