"""PointNet classification (Qi et al. 2017, "PointNet: Deep Learning on Point Sets for 3D
Classification and Segmentation"), written here over ``torch.nn``: ModelNet40, 1024 points."""

from __future__ import annotations

from gpucast.zoo import register
from gpucast.zoo.base import Workload, WorkloadSpec, classification_loss


def _pointnet(spec: WorkloadSpec, num_classes: int = 40):
    """Input and feature T-Nets, shared per-point MLPs (64, 64) and (64, 128, 1024), max pool,
    classifier 512-256-classes with dropout 0.3. Forward -> (logits, 64x64 feature transform)."""
    import torch
    import torch.nn as nn

    def pointwise(*sizes):  # shared MLP over points: 1x1 Conv1d + BN + ReLU
        return nn.Sequential(*[m for a, b in zip(sizes, sizes[1:])
                               for m in (nn.Conv1d(a, b, 1), nn.BatchNorm1d(b), nn.ReLU())])

    def head(*sizes, dropout=0.0):  # FC + BN + ReLU layers, then a plain linear output
        layers = [m for a, b in zip(sizes[:-2], sizes[1:-1])
                  for m in (nn.Linear(a, b), nn.BatchNorm1d(b), nn.ReLU())]
        if dropout:  # after the last hidden FC, as the reference PyTorch port does
            layers.insert(-2, nn.Dropout(dropout))
        return nn.Sequential(*layers, nn.Linear(sizes[-2], sizes[-1]))

    class TNet(nn.Module):
        def __init__(self, k):
            super().__init__()
            self.k = k
            self.features, self.fc = pointwise(k, 64, 128, 1024), head(1024, 512, 256, k * k)

        def forward(self, x):  # (B, k, N) -> (B, k, k)
            m = self.fc(self.features(x).amax(dim=2)).view(-1, self.k, self.k)
            return m + torch.eye(self.k, device=x.device, dtype=x.dtype)

    class PointNet(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.input_tnet, self.mlp1 = TNet(dim), pointwise(dim, 64, 64)
            self.feature_tnet, self.mlp2 = TNet(64), pointwise(64, 64, 128, 1024)
            self.classifier = head(1024, 512, 256, num_classes, dropout=0.3)

        def forward(self, points):  # (B, N, dim)
            x = points.transpose(1, 2)
            x = self.mlp1(torch.bmm(self.input_tnet(x).transpose(1, 2), x))
            t = self.feature_tnet(x)
            x = self.mlp2(torch.bmm(t.transpose(1, 2), x)).amax(dim=2)
            return self.classifier(x), t

    return PointNet(spec.input_shape[-1])


def _points(spec: WorkloadSpec, batch_size: int):
    import torch

    return (torch.randn(batch_size, *spec.input_shape),)


def _pointnet_loss(output, inputs, reg: float = 0.001):
    """Cross-entropy plus the paper's orthogonality penalty ||I - A A^T||^2 on the feature
    transform (weight 0.001)."""
    import torch

    logits, t = output
    t = t.float()
    eye = torch.eye(t.shape[-1], device=t.device)
    penalty = ((eye - t @ t.transpose(1, 2)) ** 2).sum(dim=(1, 2)).mean()
    return classification_loss(logits, inputs) + reg * penalty


register(Workload(
    name="pointnet", family="pointnet", source="gpucast",
    description="PointNet classifier (Qi et al. 2017), ModelNet40, 1024 points x 3, 40 classes",
    model_fn=_pointnet, input_fn=_points, loss_fn=_pointnet_loss,
    default_batch_size=32, default_input_shape=(1024, 3), tags=("point-cloud",),
))
