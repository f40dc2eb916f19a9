"""A max segment tree over GPU indices: the leftmost GPU whose value is at least ``need`` in
O(log n). The cheap policies keep "free memory of a GPU that can take one more job" in it, so a
placement on 2,048 GPUs costs a few dozen steps instead of a scan."""

from __future__ import annotations

NEG = float("-inf")


class MaxTree:
    __slots__ = ("size", "t", "n")

    def __init__(self, values):
        self.n = len(values)
        size = 1
        while size < max(1, self.n):
            size *= 2
        self.size = size
        t = [NEG] * (2 * size)
        t[size:size + self.n] = list(values)
        for i in range(size - 1, 0, -1):
            a, b = t[2 * i], t[2 * i + 1]
            t[i] = a if a >= b else b
        self.t = t

    def get(self, i: int) -> float:
        return self.t[self.size + i]

    def set(self, i: int, v: float) -> None:
        t = self.t
        i += self.size
        t[i] = v
        i >>= 1
        while i:
            a, b = t[2 * i], t[2 * i + 1]
            m = a if a >= b else b
            if t[i] == m:
                break
            t[i] = m
            i >>= 1

    def first_at_least(self, need: float, start: int = 0) -> int:
        """Leftmost index >= ``start`` with value >= ``need``, or -1 (iterative, O(log n))."""
        t, size = self.t, self.size
        if start >= self.n or t[1] < need:
            return -1
        i = start + size
        while True:
            if t[i] >= need:
                while i < size:
                    i = 2 * i if t[2 * i] >= need else 2 * i + 1
                return i - size if i - size < self.n else -1
            while i & 1:
                i >>= 1
            if i == 0:
                return -1
            i += 1
