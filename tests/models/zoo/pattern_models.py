"""Torch models written after the real ones users bring, for the patterns the other recipes lack.

- ShuffleNetV2: channel split, channel shuffle (Reshape / Transpose / Reshape), depthwise convs.
- YOLOv8 detect head on the zoo's YOLO neck: per-level box (DFL bins) and class maps concatenated,
  anchors made from each feature map's shape (arange, meshgrid, Expand), DFL (Softmax over 16 bins, a
  fixed 1x1 Conv), dist2bbox, strides, Sigmoid: the graph ultralytics exports.
- PP-OCR DB detection (DBNet): a small PP-LCNet-like backbone (depthwise, hardswish), an FPN and the
  DB head (Conv + BN + two ConvTranspose x2, Sigmoid); one variant resizes to the lateral's size (any
  image size), one by scale 2 as paddle's does (multiples of 32 only, in paddle too).
- CRNN recognition: conv backbone that pools the height to 1, Squeeze + Transpose to a sequence,
  bidirectional LSTM, Linear, Softmax over classes; dynamic width.
- Whisper's encoder front end: two Conv1d (the second stride 2) + GELU, Transpose, the sinusoid position
  table sliced to the number of frames, LayerNorm; dynamic frames.
- Control flow: ``torch.cond`` choosing between two conv branches on the input's mean (dynamo), and a
  ``torch.jit.script`` GRU-cell loop over a run-time number of steps with an ``if`` inside (TorchScript).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from .cnn_models import ANY_SIZE, EXPORT, PIXELS, YoloNeck, cnn, conv_bn
from .torch_export import TorchRecipe


def channel_shuffle(x, groups: int = 2):
    b, c, h, w = x.shape
    return x.view(b, groups, c // groups, h, w).transpose(1, 2).reshape(b, c, h, w)


class ShuffleUnit(nn.Module):
    """ShuffleNetV2's unit: stride 1 splits the channels in two and transforms one half; stride 2
    transforms the whole input on two branches; then concat and channel shuffle."""

    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.stride, half = stride, c_out // 2
        branch_in = c_in if stride == 2 else half
        self.right = nn.Sequential(conv_bn(branch_in, half, 1), conv_bn(half, half, 3, stride, None, groups=half),
                                   conv_bn(half, half, 1))
        self.left = nn.Sequential(conv_bn(c_in, c_in, 3, 2, None, groups=c_in), conv_bn(c_in, half, 1)) \
            if stride == 2 else None

    def forward(self, x):
        if self.stride == 1:
            a, b = x.chunk(2, 1)
            out = torch.cat([a, self.right(b)], 1)
        else:
            out = torch.cat([self.left(x), self.right(x)], 1)
        return channel_shuffle(out)


class ShuffleNetV2(nn.Module):
    def __init__(self, widths=(16, 32, 48, 64), repeats=(2, 2, 1), classes=10):
        super().__init__()
        layers, c = [conv_bn(3, widths[0], 3, 2), nn.MaxPool2d(3, 2, 1)], widths[0]
        for w, n in zip(widths[1:], repeats):
            layers += [ShuffleUnit(c, w, 2)] + [ShuffleUnit(w, w, 1) for _ in range(n - 1)]
            c = w
        self.features = nn.Sequential(*layers, conv_bn(c, 96, 1))
        self.fc = nn.Linear(96, classes)

    def forward(self, x):
        return self.fc(self.features(x).mean((2, 3)))


class YoloV8(nn.Module):
    """The zoo's YOLO neck with ultralytics' Detect head in export mode: (batch, 4 + classes, anchors)."""

    def __init__(self, classes=4, reg_max=16):
        super().__init__()
        self.classes, self.reg_max, self.strides = classes, reg_max, (8, 16, 32)
        self.neck = YoloNeck(w=4, outs=4 * reg_max + classes)
        self.dfl = nn.Conv2d(reg_max, 1, 1, bias=False).requires_grad_(False)
        self.dfl.weight.data[:] = torch.arange(reg_max, dtype=torch.float).view(1, reg_max, 1, 1)

    def forward(self, x):
        feats = self.neck(x)
        b = x.shape[0]
        flat = torch.cat([f.view(b, 4 * self.reg_max + self.classes, -1) for f in feats], 2)
        box, cls = flat.split((4 * self.reg_max, self.classes), 1)
        anchors, strides = make_anchors(feats, self.strides)
        a = box.shape[2]
        dist = self.dfl(box.view(b, 4, self.reg_max, a).transpose(2, 1).softmax(1)).view(b, 4, a)
        lt, rb = dist.chunk(2, 1)
        x1y1, x2y2 = anchors - lt, anchors + rb
        boxes = torch.cat([(x1y1 + x2y2) / 2, x2y2 - x1y1], 1) * strides
        return torch.cat([boxes, cls.sigmoid()], 1)


def make_anchors(feats, strides, offset=0.5):
    points, stride_column = [], []
    for f, s in zip(feats, strides):
        h, w = f.shape[2:]
        sx = torch.arange(w, dtype=f.dtype) + offset
        sy = torch.arange(h, dtype=f.dtype) + offset
        gy, gx = torch.meshgrid(sy, sx, indexing="ij")
        points.append(torch.stack((gx, gy), -1).view(-1, 2))
        stride_column.append(torch.full((h * w, 1), s, dtype=f.dtype))
    return torch.cat(points).transpose(0, 1), torch.cat(stride_column).transpose(0, 1)


class DBNet(nn.Module):
    """PP-OCR's DB text detector at small widths: backbone strides 4-32, FPN, DB probability head."""

    def __init__(self, widths=(8, 16, 24, 32), c=16, by_size=True):
        super().__init__()
        hs = nn.Hardswish
        self.stem = nn.Sequential(conv_bn(3, widths[0], 3, 2, hs), nn.MaxPool2d(3, 2, 1))          # stride 4
        self.stages = nn.ModuleList(
            [conv_bn(widths[0], widths[0], 1, 1, hs)]
            + [nn.Sequential(conv_bn(a, a, 3, 2, hs, groups=a), conv_bn(a, b, 1, 1, hs))       # strides 8-32
               for a, b in zip(widths, widths[1:])])
        self.lateral = nn.ModuleList(nn.Conv2d(w, c, 1, bias=False) for w in widths)
        self.smooth = nn.ModuleList(nn.Conv2d(c, c // 4, 3, 1, 1, bias=False) for _ in widths)
        self.head = nn.Sequential(conv_bn(c, c // 4, 3), nn.ConvTranspose2d(c // 4, c // 4, 2, 2),
                                  nn.BatchNorm2d(c // 4), nn.ReLU(), nn.ConvTranspose2d(c // 4, 1, 2, 2), nn.Sigmoid())
        self.by_size = by_size

    def up(self, x, like, scale):
        if self.by_size:
            return F.interpolate(x, size=like.shape[-2:], mode="nearest")
        return F.interpolate(x, scale_factor=scale, mode="nearest")

    def forward(self, x):
        x, feats = self.stem(x), []
        for stage in self.stages:
            x = stage(x)
            feats.append(x)
        lat = [conv(f) for conv, f in zip(self.lateral, feats)]
        for i in range(len(lat) - 2, -1, -1):
            lat[i] = lat[i] + self.up(lat[i + 1], lat[i], 2)
        maps = [self.up(s(l), lat[0], 2 ** i) if i else s(l) for i, (s, l) in enumerate(zip(self.smooth, lat))]
        return self.head(torch.cat(maps[::-1], 1))


class CRNN(nn.Module):
    """A CRNN recognizer (PP-OCR's mobile rec before SVTR): height 32 pooled to 1, width / 4 steps."""

    def __init__(self, classes=20, hidden=24):
        super().__init__()
        self.body = nn.Sequential(conv_bn(3, 16, 3), nn.MaxPool2d(2, 2), conv_bn(16, 24, 3), nn.MaxPool2d(2, 2),
                                  conv_bn(24, 32, 3), nn.MaxPool2d((2, 1), (2, 1)), conv_bn(32, 32, 3),
                                  nn.MaxPool2d((2, 1), (2, 1)), nn.Conv2d(32, 32, (2, 1), bias=False),
                                  nn.BatchNorm2d(32), nn.ReLU())
        self.rnn = nn.LSTM(32, hidden, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(2 * hidden, classes)

    def forward(self, x):
        seq = self.body(x).squeeze(2).permute(0, 2, 1)
        return self.fc(self.rnn(seq)[0]).softmax(-1)


class WhisperFrontEnd(nn.Module):
    """WhisperEncoder's input layers on any number of frames: conv1, conv2 (stride 2), GELU, the
    sinusoid position table sliced to the output length, LayerNorm."""

    def __init__(self, mels=16, d=32, max_positions=64):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv1d(mels, d, 3, padding=1), nn.Conv1d(d, d, 3, stride=2, padding=1)
        scale = math.log(10000) / (d // 2 - 1)
        freq = torch.exp(-scale * torch.arange(d // 2))
        angle = torch.arange(max_positions)[:, None] * freq[None, :]
        self.register_buffer("positions", torch.cat([angle.sin(), angle.cos()], 1))
        self.norm = nn.LayerNorm(d)

    def forward(self, features):
        x = F.gelu(self.conv2(F.gelu(self.conv1(features)))).permute(0, 2, 1)
        return self.norm(x + self.positions[: x.shape[1]])


class CondBranches(nn.Module):
    """``torch.cond`` on the input's mean: a 3x3 conv stack or a 1x1 conv with a residual."""

    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(conv_bn(3, 8, 3), conv_bn(8, 8, 3))
        self.b = nn.Sequential(conv_bn(3, 8, 1, act=nn.Hardswish))

    def forward(self, x):
        return torch.cond(x.mean() > 0, lambda t: self.a(t), lambda t: self.b(t) - 1.0, (x,))


class GRULoop(nn.Module):
    """A GRU cell (written out: the TorchScript exporter cannot export a scripted nn.GRUCell) stepped
    over the sequence in a scripted ``for`` loop; an ``if`` clips the state on steps whose input is
    loud (the data decides: both branches are taken)."""

    def __init__(self, d=8, hidden=16):
        super().__init__()
        self.ih, self.hh, self.out, self.hidden = nn.Linear(d, 3 * hidden), nn.Linear(hidden, 3 * hidden), \
            nn.Linear(hidden, 4), hidden

    def forward(self, x):
        h = torch.zeros([x.shape[0], self.hidden])
        for t in range(x.shape[1]):
            step = x.select(1, t)
            ir, iz, i_n = self.ih(step).chunk(3, 1)
            hr, hz, h_n = self.hh(h).chunk(3, 1)
            r, z = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
            h = (1 - z) * torch.tanh(i_n + r * h_n) + z * h
            if bool(step.abs().mean() > 0.8):
                h = h.clamp(-0.5, 0.5)
        return self.out(h)


def scripted_gru_loop():
    return torch.jit.script(GRULoop())


#: shapes whose seeded inputs have a positive mean and a negative one (generation prints which branch)
COND_SHAPES = [*ANY_SIZE, {"batch": 2, "height": 33, "width": 40}, {"batch": 1, "height": 17, "width": 20}]


def pattern_recipes() -> list[TorchRecipe]:
    pixels32 = [{"name": "pixel_values", "dtype": "float32", "shape": ["batch", 3, 32, "width"]}]
    features = [{"name": "input_features", "dtype": "float32", "shape": ["batch", 16, "frames"]}]
    sequence = [{"name": "x", "dtype": "float32", "shape": ["batch", "steps", 8]}]
    multiple = "paddle's FPN upsamples by 2 and adds: height and width must be multiples of 32 (in paddle too)"
    return [
        cnn("shufflenet_v2", "shufflenet", "ShuffleNetV2 units: channel split, channel shuffle, depthwise "
            "(written here)", ShuffleNetV2),
        cnn("yolov8", "yolo", "YOLOv8 Detect head (DFL, anchors from feature shapes, dist2bbox) on the zoo's "
            "YOLO neck (written here after ultralytics)", YoloV8, ("output0",),
            [{"batch": 1, "height": 64, "width": 96}, {"batch": 3, "height": 32, "width": 160}],
            "the neck concatenates an upsampled map with a skip connection: multiples of 32"),
        cnn("db_det", "ppocr", "PP-OCR DB text detector: depthwise hardswish backbone, FPN resized to the "
            "lateral's size, DB head with ConvTranspose x2 x2 (written here)", DBNet, ("maps",),
            [{"batch": 1, "height": 70, "width": 100}, {"batch": 2, "height": 45, "width": 64}]),
        cnn("db_det_x2", "ppocr", "PP-OCR DB text detector as paddle's: FPN upsampled by scale 2 (written here)",
            lambda: DBNet(by_size=False), ("maps",),
            [{"batch": 1, "height": 64, "width": 96}, {"batch": 2, "height": 96, "width": 32}], multiple),
        TorchRecipe("crnn_rec", "ppocr", "CRNN text recognizer: conv backbone to height 1, BiLSTM, Softmax over "
                    "20 classes (written here)", CRNN, pixels32, ["probs"], {"batch": 2, "width": 64},
                    [{"batch": 1, "width": 80}, {"batch": 3, "width": 157}, {"batch": 2, "width": 4}]),
        TorchRecipe("whisper_frontend", "whisper", "WhisperEncoder's conv front end and sinusoid positions on "
                    "any number of frames (written here)", WhisperFrontEnd, features, ["last_hidden_state"],
                    {"batch": 2, "frames": 40}, [{"batch": 1, "frames": 30}, {"batch": 3, "frames": 17}]),
        TorchRecipe("torch_cond", "control_flow", "torch.cond between two conv branches on the input's mean "
                    "(written here)", CondBranches, PIXELS, ["y"], EXPORT, COND_SHAPES,
                    exporters=("dynamo",)),
        TorchRecipe("gru_loop", "control_flow", "torch.jit.script GRU cell loop over a run-time number of steps "
                    "with a data-dependent if (written here)", scripted_gru_loop, sequence, ["y"],
                    {"batch": 2, "steps": 5}, [{"batch": 1, "steps": 1}, {"batch": 3, "steps": 7},
                                               {"batch": 2, "steps": 0}], exporters=("ts",)),
    ]
