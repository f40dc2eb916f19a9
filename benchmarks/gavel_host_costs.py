"""Host work of two Gavel scripts that gpucast has no source for, timed on this machine's CPU.

Nothing here reads Gavel's throughputs: each timing is of operations with the script's shapes on
synthetic data, written here from what the scripts do (not their code), on one thread, the best
of several repeats. Printed per core and scaled to gpucast's reference core the way
:mod:`gpucast.learn.lucid` does: the CIFAR recipe (``Image.fromarray`` + ``RandomCrop(32, 4)`` +
flip + ``ToTensor`` + ``Normalize``) is timed here too, and ``Environment.small_image_sample_s``
(80 us on the reference core) over that time is the factor.

* ``recommendation`` (recoder's ``BatchCollator.collate`` with negative sampling, in the loop): a
  random batch of users' rows of a 116,677 x 20,108 CSR matrix with 73 interactions per user
  (ML-20M as VAE-CF preprocesses it), ``nonzero``, ``np.unique(..., return_inverse=True)`` of the
  item columns, ``torch.LongTensor([rows, cols])`` from two numpy arrays (the per-element path),
  ``FloatTensor(values)``, the sparse tensor. Seconds per user.
* ``a3c-adam`` (rl/shared_optim.py's ``SharedAdam`` with amsgrad on the CPU model, one thread as
  main.py's ``OMP_NUM_THREADS=1``): one Adam + amsgrad step, parameter by parameter, over the
  A3Clstm's 16 parameter tensors (3,249,639 values). Seconds per iteration.

The installed PyTorch is not Gavel's 1.4: the per-element tensor construction and the elementwise
CPU kernels may differ between releases (not measured).

Run (from the repository root)::

    .venv/bin/python benchmarks/gavel_host_costs.py
"""

from __future__ import annotations

import sys
import time


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def cifar_sample_s(n: int = 500) -> float:
    import numpy as np
    from PIL import Image
    from torchvision import transforms

    t = transforms.Compose([transforms.RandomCrop(32, padding=4), transforms.RandomHorizontalFlip(),
                            transforms.ToTensor(),
                            transforms.Normalize((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010))])
    imgs = np.random.randint(0, 256, (n, 32, 32, 3), dtype=np.uint8)
    return _best(lambda: [t(Image.fromarray(a)) for a in imgs], 15) / n


def recoder_collate_s(batch: int = 2048, users: int = 116_677, items: int = 20_108, per_user: int = 73) -> float:
    import numpy as np
    import scipy.sparse as sp
    import torch

    rng = np.random.default_rng(0)
    indptr = np.arange(users + 1, dtype=np.int64) * per_user
    indices = np.sort(rng.integers(0, items, (users, per_user)), axis=1).ravel()
    m = sp.csr_matrix((np.ones(users * per_user, dtype=np.float32), indices, indptr), shape=(users, items))

    def collate():
        idx = rng.permutation(users)[:batch]
        rows = sp.vstack([m[idx[o:o + 2000]] for o in range(0, batch, 2000)])  # CSR_MATRIX_INDEX_SIZE_LIMIT
        _, cols = rows.nonzero()
        _, cols = np.unique(cols, return_inverse=True)
        r = rows.nonzero()[0]
        ind = torch.LongTensor([r, cols])
        val = torch.FloatTensor(rows.data)
        torch.sparse_coo_tensor(ind, val, (batch, items))

    return _best(collate, 15) / batch


def a3c_adam_s() -> float:
    import torch

    shapes = [(32, 1, 5, 5), (32,), (32, 32, 5, 5), (32,), (64, 32, 4, 4), (64,), (64, 64, 3, 3), (64,),
              (2048, 1024), (2048, 512), (2048,), (2048,), (1, 512), (1,), (6, 512), (6,)]
    params = [torch.randn(s) for s in shapes]
    grads = [torch.randn(s) for s in shapes]
    state = [(torch.zeros(s), torch.zeros(s), torch.zeros(s)) for s in shapes]
    b1, b2, eps, lr = 0.9, 0.999, 1e-3, 1e-4

    def step():
        for p, g, (m, v, vmax) in zip(params, grads, state):
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            torch.maximum(vmax, v, out=vmax)
            denom = vmax.sqrt().add_(eps)
            p.addcdiv_(m, denom, value=-lr)

    step()
    return _best(step, 60)


def main() -> int:
    import torch

    torch.set_num_threads(1)
    cifar = cifar_sample_s()
    scale = 80e-6 / cifar
    rec = recoder_collate_s()
    adam = a3c_adam_s()
    print(f"this core: CIFAR recipe {cifar * 1e6:.0f} us/sample -> scale to the reference core {scale:.3f}")
    print(f"recommendation collate: {rec * 1e6:.2f} us/user here, {rec * scale * 1e6:.2f} us on the reference core")
    print(f"a3c SharedAdam(amsgrad) step: {adam * 1e3:.2f} ms here, {adam * scale * 1e3:.2f} ms on the reference core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
