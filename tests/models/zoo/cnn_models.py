"""Torch CNNs written here after the torchvision / ultralytics designs, at small widths.

(torchvision from PyPI does not import beside torch 2.13.0, so the
definitions are ours.) All take ``pixel_values`` (batch, 3, height, width)
with every one of those dims dynamic. The classifiers and the FPN (whose
top-down path resizes to the lateral's size) accept any image size, so they
are tested at sizes that are no multiple of their stride (61); the UNet and
the YOLO neck concatenate an upsampled map with a skip connection, which in
torch itself needs the size to be a multiple of the stride they reach.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .torch_export import TorchRecipe


def conv_bn(c_in, c_out, k=3, s=1, act=nn.ReLU, groups=1):
    layers = [nn.Conv2d(c_in, c_out, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(c_out)]
    return nn.Sequential(*layers, act()) if act else nn.Sequential(*layers)


class BasicBlock(nn.Module):
    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.body = nn.Sequential(conv_bn(c_in, c_out, 3, stride), conv_bn(c_out, c_out, 3, 1, None))
        self.down = conv_bn(c_in, c_out, 1, stride, None) if stride != 1 or c_in != c_out else nn.Identity()

    def forward(self, x):
        return F.relu(self.body(x) + self.down(x))


class ResNet(nn.Module):
    """ResNet-18's layout (7x7 stem, max pool, four stages of BasicBlocks) at widths 16-64."""

    def __init__(self, widths=(16, 24, 32, 64), classes=10):
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, widths[0], 7, 2), nn.MaxPool2d(3, 2, 1))
        blocks, c = [], widths[0]
        for i, w in enumerate(widths):
            blocks += [BasicBlock(c, w, 1 if i == 0 else 2), BasicBlock(w, w, 1)]
            c = w
        self.stages = nn.Sequential(*blocks)
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.stages(self.stem(x)), 1), 1))


class SqueezeExcite(nn.Module):
    def __init__(self, c, squeeze, act=nn.ReLU, gate=nn.Sigmoid):
        super().__init__()
        self.fc1, self.fc2, self.act, self.gate = nn.Conv2d(c, squeeze, 1), nn.Conv2d(squeeze, c, 1), act(), gate()

    def forward(self, x):
        return x * self.gate(self.fc2(self.act(self.fc1(F.adaptive_avg_pool2d(x, 1)))))


class InvertedResidual(nn.Module):
    """MobileNetV2 / V3 / EfficientNet's block: expand 1x1, depthwise kxk, (squeeze-excite), project 1x1."""

    def __init__(self, c_in, c_out, stride, expand, k=3, act=nn.ReLU6, se=None):
        super().__init__()
        hidden = c_in * expand
        layers = [conv_bn(c_in, hidden, 1, act=act)] if expand != 1 else []
        layers.append(conv_bn(hidden, hidden, k, stride, act=act, groups=hidden))
        if se:
            layers.append(se(hidden))
        layers.append(conv_bn(hidden, c_out, 1, act=None))
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


class MobileNet(nn.Module):
    """A stride-32 stack of inverted residuals; ``blocks`` are (c_out, stride, expand, kernel)."""

    def __init__(self, blocks, act, se=None, stem=16, head=64, classes=10):
        super().__init__()
        layers, c = [conv_bn(3, stem, 3, 2, act=act)], stem
        for c_out, stride, expand, k in blocks:
            layers.append(InvertedResidual(c, c_out, stride, expand, k, act, se))
            c = c_out
        layers.append(conv_bn(c, head, 1, act=act))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(head, classes))

    def forward(self, x):
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


def mobilenet_v2():
    blocks = [(8, 1, 1, 3), (12, 2, 6, 3), (12, 1, 6, 3), (16, 2, 6, 3), (24, 2, 6, 3), (24, 1, 6, 3), (32, 2, 6, 3)]
    return MobileNet(blocks, nn.ReLU6)


def mobilenet_v3():
    def se(c):
        return SqueezeExcite(c, max(4, c // 4), nn.ReLU, nn.Hardsigmoid)
    blocks = [(8, 2, 1, 3), (12, 2, 4, 3), (16, 2, 3, 5), (16, 1, 3, 5), (24, 2, 6, 3), (24, 1, 3, 3)]
    return MobileNet(blocks, nn.Hardswish, se)


def efficientnet():
    def se(c):
        return SqueezeExcite(c, max(4, c // 4), nn.SiLU, nn.Sigmoid)
    blocks = [(8, 1, 1, 3), (12, 2, 6, 3), (16, 2, 6, 5), (24, 2, 6, 3), (32, 1, 6, 5), (32, 2, 6, 5)]
    return MobileNet(blocks, nn.SiLU, se)


class DenseLayer(nn.Module):
    def __init__(self, c_in, growth):
        super().__init__()
        self.body = nn.Sequential(nn.BatchNorm2d(c_in), nn.ReLU(), nn.Conv2d(c_in, 2 * growth, 1, bias=False),
                                  nn.BatchNorm2d(2 * growth), nn.ReLU(), nn.Conv2d(2 * growth, growth, 3, 1, 1, bias=False))

    def forward(self, x):
        return torch.cat([x, self.body(x)], 1)


class DenseNet(nn.Module):
    """DenseNet-121's layout (dense blocks of concatenating layers, 1x1 + avg-pool transitions), growth 8."""

    def __init__(self, growth=8, layers=(2, 3, 3, 2), classes=10):
        super().__init__()
        mods, c = [nn.Conv2d(3, 16, 7, 2, 3, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(3, 2, 1)], 16
        for i, n in enumerate(layers):
            for _ in range(n):
                mods.append(DenseLayer(c, growth))
                c += growth
            if i < len(layers) - 1:
                mods += [nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c // 2, 1, bias=False), nn.AvgPool2d(2, 2)]
                c //= 2
        self.features = nn.Sequential(*mods, nn.BatchNorm2d(c), nn.ReLU())
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


class UNet(nn.Module):
    """Three down levels; up by ConvTranspose (twice) and bilinear Upsample (once), each then
    concatenated with the skip connection of its level."""

    def __init__(self, w=8, classes=3):
        super().__init__()
        def double(c_in, c_out):
            return nn.Sequential(conv_bn(c_in, c_out), conv_bn(c_out, c_out))
        self.enc = nn.ModuleList([double(3, w), double(w, 2 * w), double(2 * w, 4 * w)])
        self.mid = double(4 * w, 8 * w)
        self.up = nn.ModuleList([nn.ConvTranspose2d(8 * w, 4 * w, 2, 2), nn.ConvTranspose2d(4 * w, 2 * w, 2, 2),
                                 nn.Sequential(nn.Upsample(scale_factor=2, mode="bilinear"), nn.Conv2d(2 * w, w, 1))])
        self.dec = nn.ModuleList([double(8 * w, 4 * w), double(4 * w, 2 * w), double(2 * w, w)])
        self.out = nn.Conv2d(w, classes, 1)

    def forward(self, x):
        skips = []
        for enc in self.enc:
            x = enc(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.mid(x)
        for up, dec, skip in zip(self.up, self.dec, reversed(skips)):
            x = dec(torch.cat([up(x), skip], 1))
        return self.out(x)


def conv_silu(c_in, c_out, k=1, s=1):
    return conv_bn(c_in, c_out, k, s, nn.SiLU)


class C2f(nn.Module):
    """YOLOv8's CSP block: split, a chain of bottlenecks, concat of every stage, 1x1."""

    def __init__(self, c_in, c_out, n=1):
        super().__init__()
        self.c = c_out // 2
        self.cv1, self.cv2 = conv_silu(c_in, 2 * self.c), conv_silu((2 + n) * self.c, c_out)
        self.m = nn.ModuleList(nn.Sequential(conv_silu(self.c, self.c, 3), conv_silu(self.c, self.c, 3))
                               for _ in range(n))

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            y.append(y[-1] + m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.cv1, self.cv2, self.pool = conv_silu(c, c // 2), conv_silu(2 * c, c), nn.MaxPool2d(5, 1, 2)

    def forward(self, x):
        x = self.cv1(x)
        y1 = self.pool(x)
        y2 = self.pool(y1)
        return self.cv2(torch.cat([x, y1, y2, self.pool(y2)], 1))


class YoloNeck(nn.Module):
    """A YOLOv8-style backbone (stride 32, C2f, SPPF) and PAN neck: nearest Upsample x2 + Concat
    top-down, strided conv + Concat bottom-up; one 1x1 head per scale (strides 8, 16, 32)."""

    def __init__(self, w=8, outs=12):
        super().__init__()
        self.b1 = nn.Sequential(conv_silu(3, w, 3, 2), conv_silu(w, 2 * w, 3, 2), C2f(2 * w, 2 * w),
                                conv_silu(2 * w, 4 * w, 3, 2), C2f(4 * w, 4 * w))           # stride 8
        self.b2 = nn.Sequential(conv_silu(4 * w, 8 * w, 3, 2), C2f(8 * w, 8 * w))        # stride 16
        self.b3 = nn.Sequential(conv_silu(8 * w, 8 * w, 3, 2), C2f(8 * w, 8 * w), SPPF(8 * w))  # stride 32
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.td4, self.td3 = C2f(16 * w, 8 * w), C2f(12 * w, 4 * w)
        self.down3, self.bu4 = conv_silu(4 * w, 4 * w, 3, 2), C2f(12 * w, 8 * w)
        self.down4, self.bu5 = conv_silu(8 * w, 8 * w, 3, 2), C2f(16 * w, 8 * w)
        self.heads = nn.ModuleList([nn.Conv2d(4 * w, outs, 1), nn.Conv2d(8 * w, outs, 1), nn.Conv2d(8 * w, outs, 1)])

    def forward(self, x):
        p3 = self.b1(x)
        p4 = self.b2(p3)
        p5 = self.b3(p4)
        t4 = self.td4(torch.cat([self.up(p5), p4], 1))
        n3 = self.td3(torch.cat([self.up(t4), p3], 1))
        n4 = self.bu4(torch.cat([self.down3(n3), t4], 1))
        n5 = self.bu5(torch.cat([self.down4(n4), p5], 1))
        return tuple(h(n) for h, n in zip(self.heads, (n3, n4, n5)))


class FPN(nn.Module):
    """torchvision's FeaturePyramidNetwork on a small ResNet: lateral 1x1 convs, top-down nearest
    interpolation *to the lateral's size* (so any image size works), 3x3 output convs, and a
    stride-2 max pool for the extra level."""

    def __init__(self, widths=(8, 16, 24, 32), c=16):
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, widths[0], 3, 2), nn.MaxPool2d(3, 2, 1))
        stages, c_in = [], widths[0]
        for i, w in enumerate(widths):
            stages.append(BasicBlock(c_in, w, 1 if i == 0 else 2))
            c_in = w
        self.stages = nn.ModuleList(stages)
        self.lateral = nn.ModuleList(nn.Conv2d(w, c, 1) for w in widths)
        self.output = nn.ModuleList(nn.Conv2d(c, c, 3, 1, 1) for _ in widths)

    def forward(self, x):
        feats, x = [], self.stem(x)
        for stage in self.stages:
            x = stage(x)
            feats.append(x)
        last = self.lateral[-1](feats[-1])
        results = [self.output[-1](last)]
        for i in range(len(feats) - 2, -1, -1):
            lateral = self.lateral[i](feats[i])
            last = lateral + F.interpolate(last, size=lateral.shape[-2:], mode="nearest")
            results.insert(0, self.output[i](last))
        results.append(F.max_pool2d(results[-1], 1, 2, 0))
        return tuple(results)


PIXELS = [{"name": "pixel_values", "dtype": "float32", "shape": ["batch", 3, "height", "width"]}]
EXPORT = {"batch": 2, "height": 64, "width": 64}
ANY_SIZE = [{"batch": 1, "height": 61, "width": 96}, {"batch": 3, "height": 64, "width": 45}]


def cnn(name, family, source, build, outputs=("logits",), tests=ANY_SIZE, note=None):
    return TorchRecipe(name, family, source, build, PIXELS, list(outputs), EXPORT, tests, note=note)


def cnn_recipes() -> list[TorchRecipe]:
    multiple = "{} concatenates an upsampled map with a skip connection: torch itself needs height and width " \
               "to be multiples of {}"
    return [
        cnn("resnet", "resnet", "ResNet-18 layout, widths 16-64 (written here)", ResNet),
        cnn("mobilenet_v2", "mobilenet", "MobileNetV2 inverted residuals, ReLU6 (written here)", mobilenet_v2),
        cnn("mobilenet_v3", "mobilenet", "MobileNetV3 blocks, hardswish, squeeze-excite with hardsigmoid "
            "(written here)", mobilenet_v3),
        cnn("efficientnet", "efficientnet", "EfficientNet MBConv blocks, SiLU, squeeze-excite (written here)",
            efficientnet),
        cnn("densenet", "densenet", "DenseNet-121 layout, growth 8 (written here)", DenseNet),
        cnn("unet", "unet", "UNet, 3 levels, ConvTranspose and bilinear Upsample + Concat skips (written here)",
            UNet, ("mask",), [{"batch": 1, "height": 64, "width": 40}, {"batch": 3, "height": 24, "width": 56}],
            multiple.format("The UNet", 8)),
        cnn("yolo_neck", "yolo", "YOLOv8-style backbone + PAN neck: Upsample x2 + Concat (written here)",
            YoloNeck, ("p3", "p4", "p5"), [{"batch": 1, "height": 64, "width": 96}, {"batch": 3, "height": 32,
                                                                                     "width": 160}],
            multiple.format("The neck", 32)),
        cnn("fpn", "fpn", "torchvision-style FeaturePyramidNetwork on a small ResNet (written here)", FPN,
            ("p2", "p3", "p4", "p5", "pool")),
    ]
