"""Image classifiers from torchvision: ImageNet (3x224x224, 1000 classes) and CIFAR-10 (3x32x32).

Every entry is a row of ``_TABLE``; one builder turns a row into a workload. Models are built
with ``weights=None`` (random init, nothing downloaded). The CIFAR-10 rows are the same
torchvision definitions with ``num_classes=10``. The CIFAR ResNets take the CIFAR stem of He et
al. 2016 (Sec. 4.2) as the common CIFAR-10 training code does (e.g. kuangliu/pytorch-cifar, which
Gavel's ResNet-18 job uses): a 3x3 stride-1 first convolution and no max-pool, so the 32x32 map
is not shrunk 4x before the first block. VGG and MobileNet keep torchvision's layers (their
adaptive pooling lets them run at 32x32).
"""

from __future__ import annotations

from gpucast.zoo import register
from gpucast.zoo.base import Workload, WorkloadSpec, classification_loss

IMAGENET = (3, 224, 224)
CIFAR = (3, 32, 32)


def _cifar_resnet(name: str):
    """torchvision's ResNet with the CIFAR stem (see module docstring)."""

    def build(weights=None, **kwargs):
        import torch.nn as nn
        import torchvision.models as tvm

        model = getattr(tvm, name)(weights=weights, **kwargs)
        model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
        return model

    return build


def _regnet_y_400mf(weights=None, **kwargs):
    """torchvision's ``regnet_y_400mf`` with its block widths computed on the CPU: torchvision
    derives them with torch ops and ``.tolist()``, which cannot run on the meta device. Same
    constants (Radosavovic et al. 2020, RegNetY-400MF) and defaults as torchvision's builder."""
    import torch
    from torchvision.models.regnet import BlockParams, RegNet

    assert weights is None
    with torch.device("cpu"):
        params = BlockParams.from_init_params(depth=16, w_0=48, w_a=27.89, w_m=2.09,
                                              group_width=8, se_ratio=0.25)
    return RegNet(params, **kwargs)


# name, torchvision builder (or a function here), extra kwargs, input shape, classes,
# default batch, description
_TABLE = [
    ("alexnet", "alexnet", {}, IMAGENET, 1000, 128, "AlexNet (Krizhevsky et al. 2012)"),
    ("vgg16", "vgg16", {}, IMAGENET, 1000, 64, "VGG-16 (Simonyan & Zisserman 2015)"),
    ("vgg19", "vgg19", {}, IMAGENET, 1000, 64, "VGG-19 (Simonyan & Zisserman 2015)"),
    ("resnet18", "resnet18", {}, IMAGENET, 1000, 128, "ResNet-18 (He et al. 2016)"),
    ("resnet34", "resnet34", {}, IMAGENET, 1000, 128, "ResNet-34 (He et al. 2016)"),
    ("resnet50", "resnet50", {}, IMAGENET, 1000, 64, "ResNet-50 (He et al. 2016)"),
    ("resnet101", "resnet101", {}, IMAGENET, 1000, 64, "ResNet-101 (He et al. 2016)"),
    ("resnet152", "resnet152", {}, IMAGENET, 1000, 32, "ResNet-152 (He et al. 2016)"),
    ("resnext50-32x4d", "resnext50_32x4d", {}, IMAGENET, 1000, 64,
     "ResNeXt-50 32x4d (Xie et al. 2017)"),
    ("densenet121", "densenet121", {}, IMAGENET, 1000, 64, "DenseNet-121 (Huang et al. 2017)"),
    ("mobilenet-v2", "mobilenet_v2", {}, IMAGENET, 1000, 128, "MobileNetV2 (Sandler et al. 2018)"),
    ("mobilenet-v3-large", "mobilenet_v3_large", {}, IMAGENET, 1000, 128,
     "MobileNetV3-Large (Howard et al. 2019)"),
    ("mobilenet-v3-small", "mobilenet_v3_small", {}, IMAGENET, 1000, 128,
     "MobileNetV3-Small (Howard et al. 2019)"),
    ("shufflenet-v2", "shufflenet_v2_x1_0", {}, IMAGENET, 1000, 128,
     "ShuffleNetV2 1.0x (Ma et al. 2018)"),
    ("squeezenet", "squeezenet1_0", {}, IMAGENET, 1000, 128,
     "SqueezeNet 1.0 (Iandola et al. 2016)"),
    ("googlenet", "googlenet", {"aux_logits": False, "init_weights": True}, IMAGENET, 1000, 128,
     "GoogLeNet / Inception-v1 without aux heads (Szegedy et al. 2015)"),
    ("inception-v3", "inception_v3", {"aux_logits": False, "init_weights": True}, (3, 299, 299),
     1000, 64, "Inception-v3 without aux head (Szegedy et al. 2016)"),
    ("efficientnet-b0", "efficientnet_b0", {}, IMAGENET, 1000, 128,
     "EfficientNet-B0 (Tan & Le 2019)"),
    ("regnet-y-400mf", _regnet_y_400mf, {}, IMAGENET, 1000, 128,
     "RegNetY-400MF (Radosavovic et al. 2020)"),
    ("convnext-tiny", "convnext_tiny", {}, IMAGENET, 1000, 64, "ConvNeXt-T (Liu et al. 2022)"),
    ("vit-b16", "vit_b_16", {}, IMAGENET, 1000, 64, "ViT-B/16 (Dosovitskiy et al. 2021)"),
    ("resnet18-cifar", _cifar_resnet("resnet18"), {}, CIFAR, 10, 128, "ResNet-18, torchvision (CIFAR stem)"),
    ("resnet50-cifar", _cifar_resnet("resnet50"), {}, CIFAR, 10, 128, "ResNet-50, torchvision (CIFAR stem)"),
    ("vgg16-cifar", "vgg16", {}, CIFAR, 10, 128, "VGG-16, torchvision (4096-wide classifier)"),
    ("mobilenet-v2-cifar", "mobilenet_v2", {}, CIFAR, 10, 128, "MobileNetV2, torchvision"),
]

# Builders whose definition fixes the input resolution: told the spec's size.
_SIZED = {"vit_b_16": "image_size"}


def _model_fn(builder, kwargs: dict, num_classes: int):
    def model_fn(spec: WorkloadSpec):
        import torchvision.models as tvm

        extra = dict(kwargs)
        if builder in _SIZED:
            _, h, w = spec.input_shape
            if h != w:
                raise ValueError(f"{builder} needs a square input, got {h}x{w}")
            extra[_SIZED[builder]] = h
        build = builder if callable(builder) else getattr(tvm, builder)
        return build(weights=None, num_classes=num_classes, **extra)

    return model_fn


def image_input(spec: WorkloadSpec, batch_size: int):
    import torch

    return (torch.randn(batch_size, *spec.input_shape),)


for _name, _builder, _kwargs, _shape, _classes, _batch, _what in _TABLE:
    _data = "ImageNet" if _classes == 1000 else "CIFAR-10"
    _family = "transformer" if _name.startswith("vit") else "cnn"
    register(Workload(
        name=_name, family=_family, source="torchvision",
        description=f"{_what}, {_data} {_shape[1]}x{_shape[2]}, {_classes} classes",
        model_fn=_model_fn(_builder, _kwargs, _classes), input_fn=image_input,
        loss_fn=classification_loss, default_batch_size=_batch, default_input_shape=_shape,
        tags=("vision", _data.lower()),
    ))
