"""GANs, written here (no maintained library ships them as models).

A GAN's training step updates two (or four) networks. Each workload is one module whose forward
runs every pass of one step, with ``detach`` where the step detaches, so one backward over the
summed losses costs what the real generator and discriminator updates cost.
"""

from __future__ import annotations

from gpucast.zoo import register
from gpucast.zoo.base import Workload, WorkloadSpec


def _dcgan(spec: WorkloadSpec, nz: int = 100, ngf: int = 64, ndf: int = 64):
    """DCGAN (Radford et al. 2016), the PyTorch example's 64x64 nets; one more stride-2 stage
    per doubling of the resolution. Forward -> (D(real), D(G(z)) detached, D(G(z)))."""
    import torch.nn as nn

    c, size, _ = spec.input_shape
    stages = size.bit_length() - 4  # 64x64 -> 3 inner stride-2 stages (4->8->16->32), then 64
    if size < 16 or size != 1 << (size.bit_length() - 1):
        raise ValueError(f"dcgan needs a power-of-two resolution >= 16, got {size}")

    g = [nn.ConvTranspose2d(nz, ngf << stages, 4, 1, 0, bias=False),
         nn.BatchNorm2d(ngf << stages), nn.ReLU(True)]
    for i in range(stages, 0, -1):
        g += [nn.ConvTranspose2d(ngf << i, ngf << (i - 1), 4, 2, 1, bias=False),
              nn.BatchNorm2d(ngf << (i - 1)), nn.ReLU(True)]
    g += [nn.ConvTranspose2d(ngf, c, 4, 2, 1, bias=False), nn.Tanh()]

    d = [nn.Conv2d(c, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, True)]
    for i in range(stages):
        d += [nn.Conv2d(ndf << i, ndf << (i + 1), 4, 2, 1, bias=False),
              nn.BatchNorm2d(ndf << (i + 1)), nn.LeakyReLU(0.2, True)]
    d += [nn.Conv2d(ndf << stages, 1, 4, 1, 0, bias=False), nn.Flatten()]

    class DCGAN(nn.Module):
        def __init__(self):
            super().__init__()
            self.generator, self.discriminator = nn.Sequential(*g), nn.Sequential(*d)

        def forward(self, z, real):
            fake = self.generator(z)
            return (self.discriminator(real), self.discriminator(fake.detach()),
                    self.discriminator(fake))

    return DCGAN()


def _dcgan_input(spec: WorkloadSpec, batch_size: int, nz: int = 100):
    import torch

    return torch.randn(batch_size, nz, 1, 1), torch.randn(batch_size, *spec.input_shape)


def _bce(logits, label: float):
    import torch
    import torch.nn.functional as F

    logits = logits.float()
    return F.binary_cross_entropy_with_logits(logits, torch.full_like(logits, label))


def _dcgan_loss(output, inputs):
    """D: BCE(D(real), 1) + BCE(D(fake.detach()), 0); G: BCE(D(fake), 1) (non-saturating)."""
    d_real, d_fake_detached, d_fake = output
    return _bce(d_real, 1.0) + _bce(d_fake_detached, 0.0) + _bce(d_fake, 1.0)


def _cyclegan(spec: WorkloadSpec, blocks: int = 9):
    """CycleGAN (Zhu et al. 2017): two ResNet generators (c7s1-64, d128, d256, 9 x R256, u128,
    u64, c7s1-3; reflection padding, instance norm) and two 70x70 PatchGAN discriminators
    (C64-C128-C256-C512). Forward runs every pass of one step of the reference trainer."""
    import torch.nn as nn

    def conv(cin, cout, k, s=1, p=0, norm=True, act=nn.ReLU):
        layers = [nn.Conv2d(cin, cout, k, s, p)]
        return nn.Sequential(*layers, *([nn.InstanceNorm2d(cout)] if norm else []), act())

    class Residual(nn.Module):
        def __init__(self, ch):
            super().__init__()
            self.body = nn.Sequential(nn.ReflectionPad2d(1), conv(ch, ch, 3),
                                      nn.ReflectionPad2d(1), nn.Conv2d(ch, ch, 3),
                                      nn.InstanceNorm2d(ch))

        def forward(self, x):
            return x + self.body(x)

    def generator(c):
        up = [nn.ConvTranspose2d(256, 128, 3, 2, 1, output_padding=1), nn.InstanceNorm2d(128),
              nn.ReLU(), nn.ConvTranspose2d(128, 64, 3, 2, 1, output_padding=1),
              nn.InstanceNorm2d(64), nn.ReLU()]
        return nn.Sequential(nn.ReflectionPad2d(3), conv(c, 64, 7), conv(64, 128, 3, 2, 1),
                             conv(128, 256, 3, 2, 1), *[Residual(256) for _ in range(blocks)],
                             *up, nn.ReflectionPad2d(3), nn.Conv2d(64, c, 7), nn.Tanh())

    def patchgan(c):
        leaky = lambda: nn.LeakyReLU(0.2)  # noqa: E731
        return nn.Sequential(conv(c, 64, 4, 2, 1, norm=False, act=leaky),
                             conv(64, 128, 4, 2, 1, act=leaky), conv(128, 256, 4, 2, 1, act=leaky),
                             conv(256, 512, 4, 1, 1, act=leaky), nn.Conv2d(512, 1, 4, 1, 1))

    class CycleGAN(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.g_ab, self.g_ba = generator(c), generator(c)
            self.d_a, self.d_b = patchgan(c), patchgan(c)

        def forward(self, real_a, real_b):
            fake_b, fake_a = self.g_ab(real_a), self.g_ba(real_b)
            return dict(
                real_a=real_a, real_b=real_b, fake_a=fake_a, fake_b=fake_b,
                id_a=self.g_ba(real_a), id_b=self.g_ab(real_b),          # identity
                rec_a=self.g_ba(fake_b), rec_b=self.g_ab(fake_a),        # cycle
                gan_a=self.d_a(fake_a), gan_b=self.d_b(fake_b),          # generator GAN terms
                d_real_a=self.d_a(real_a), d_fake_a=self.d_a(fake_a.detach()),
                d_real_b=self.d_b(real_b), d_fake_b=self.d_b(fake_b.detach()))

    return CycleGAN(spec.input_shape[0])


def _cyclegan_input(spec: WorkloadSpec, batch_size: int):
    import torch

    return torch.randn(batch_size, *spec.input_shape), torch.randn(batch_size, *spec.input_shape)


def _cyclegan_loss(o, inputs, lambda_cyc: float = 10.0, lambda_id: float = 5.0):
    """LSGAN (MSE) adversarial terms, L1 cycle and identity terms, as in the reference trainer."""
    import torch
    import torch.nn.functional as F

    def ls(x, label):
        x = x.float()
        return F.mse_loss(x, torch.full_like(x, label))

    def l1(a, b):
        return F.l1_loss(o[a].float(), o[b].float())

    g = (ls(o["gan_a"], 1.0) + ls(o["gan_b"], 1.0)
         + lambda_cyc * (l1("rec_a", "real_a") + l1("rec_b", "real_b"))
         + lambda_id * (l1("id_a", "real_a") + l1("id_b", "real_b")))
    d = sum(ls(o[f"d_real_{s}"], 1.0) + ls(o[f"d_fake_{s}"], 0.0) for s in "ab") / 2
    return g + d


register(Workload(
    name="dcgan", family="gan", source="gpucast",
    description="DCGAN (Radford et al. 2016) generator + discriminator, 64x64 RGB, z 100",
    model_fn=_dcgan, input_fn=_dcgan_input, loss_fn=_dcgan_loss,
    default_batch_size=128, default_input_shape=(3, 64, 64), tags=("image-generation",),
))

register(Workload(
    name="cyclegan", family="gan", source="gpucast",
    description="CycleGAN (Zhu et al. 2017), 2 ResNet-9-block generators + 2 PatchGANs, 256x256",
    model_fn=_cyclegan, input_fn=_cyclegan_input, loss_fn=_cyclegan_loss,
    default_batch_size=1, default_input_shape=(3, 256, 256), tags=("image-translation",),
))
