"""Notebooks 03 to 10, offline: built-in stand-ins for MNIST and Fashion-MNIST when no real copy can be had.

They are generated, never downloaded: deterministic for a given seed, shaped like the real sets
(28x28x1 ``uint8`` images, 10 named classes) and learnable. Each class has a template drawn from
simple shapes (a 5x7 pixel font for the digits, clothing silhouettes for Fashion-MNIST); each
example is its template scaled, slanted, shifted, thickened, shaded and sprinkled with noise, so a
small CNN has to learn shapes rather than memorise pixels.
"""

from __future__ import annotations

import numpy as np

SIZE = 28

# A 5x7 font for the digits 0-9, one string of 5 characters per row.
_DIGITS = {
    0: ["01110", "10001", "10011", "10101", "11001", "10001", "01110"],
    1: ["00100", "01100", "00100", "00100", "00100", "00100", "01110"],
    2: ["01110", "10001", "00001", "00010", "00100", "01000", "11111"],
    3: ["11111", "00010", "00100", "00010", "00001", "10001", "01110"],
    4: ["00010", "00110", "01010", "10010", "11111", "00010", "00010"],
    5: ["11111", "10000", "11110", "00001", "00001", "10001", "01110"],
    6: ["00110", "01000", "10000", "11110", "10001", "10001", "01110"],
    7: ["11111", "00001", "00010", "00100", "01000", "01000", "01000"],
    8: ["01110", "10001", "10001", "01110", "10001", "10001", "01110"],
    9: ["01110", "10001", "10001", "01111", "00001", "00010", "01100"],
}


def _digit_templates() -> np.ndarray:
    templates = np.zeros((10, SIZE, SIZE), np.float32)
    for digit, rows in _DIGITS.items():
        glyph = np.array([[c == "1" for c in row] for row in rows], np.float32)  # 7x5
        big = np.kron(glyph, np.ones((3, 3), np.float32))  # 21x15
        top, left = (SIZE - big.shape[0]) // 2, (SIZE - big.shape[1]) // 2
        templates[digit, top : top + big.shape[0], left : left + big.shape[1]] = big
    return templates


def _fill(canvas: np.ndarray, rows: slice, cols: slice, value: float = 1.0) -> None:
    canvas[rows, cols] = value


def _fashion_templates() -> np.ndarray:
    t = np.zeros((10, SIZE, SIZE), np.float32)
    y, x = np.mgrid[0:SIZE, 0:SIZE]
    # 0 T-shirt/top: torso with short sleeves
    _fill(t[0], slice(5, 25), slice(8, 20))
    _fill(t[0], slice(5, 11), slice(2, 26))
    _fill(t[0], slice(5, 7), slice(12, 16), 0.0)
    # 1 Trouser: waistband and two long legs
    _fill(t[1], slice(2, 7), slice(8, 20))
    _fill(t[1], slice(2, 27), slice(8, 13))
    _fill(t[1], slice(2, 27), slice(15, 20))
    # 2 Pullover: torso with long sleeves, plain
    _fill(t[2], slice(5, 25), slice(8, 20))
    _fill(t[2], slice(5, 23), slice(3, 8), 0.8)
    _fill(t[2], slice(5, 23), slice(20, 25), 0.8)
    # 3 Dress: narrow top widening to the hem
    half = 3 + (y - 3) * 9 / 24
    t[3][(y >= 3) & (y <= 26) & (np.abs(x - 13.5) <= half)] = 1.0
    # 4 Coat: long, long sleeves, opening down the middle
    _fill(t[4], slice(3, 27), slice(7, 21))
    _fill(t[4], slice(3, 25), slice(2, 7), 0.9)
    _fill(t[4], slice(3, 25), slice(21, 26), 0.9)
    _fill(t[4], slice(6, 27), slice(13, 15), 0.3)
    # 5 Sandal: a sole and thin straps with gaps
    _fill(t[5], slice(20, 23), slice(2, 26))
    for c in range(4, 25, 5):
        _fill(t[5], slice(13, 20), slice(c, c + 2))
    _fill(t[5], slice(13, 15), slice(4, 25))
    # 6 Shirt: like the pullover, with a collar and a button line
    _fill(t[6], slice(5, 25), slice(8, 20))
    _fill(t[6], slice(5, 22), slice(4, 8), 0.7)
    _fill(t[6], slice(5, 22), slice(20, 24), 0.7)
    _fill(t[6], slice(7, 25), slice(13, 15), 0.45)
    _fill(t[6], slice(4, 7), slice(10, 18), 0.5)
    # 7 Sneaker: a low solid shoe rising towards the heel
    t[7][(y >= 15) & (y <= 22) & (x >= 2) & (x <= 25) & (y >= 22 - (x - 2) * 0.45)] = 1.0
    _fill(t[7], slice(21, 23), slice(2, 26), 0.6)
    # 8 Bag: a box with a handle
    _fill(t[8], slice(11, 25), slice(4, 24))
    ring = np.abs(np.hypot(y - 11, x - 14) - 6) <= 1.2
    t[8][ring & (y <= 11)] = 1.0
    # 9 Ankle boot: a tall shaft and a foot
    _fill(t[9], slice(4, 24), slice(6, 15))
    _fill(t[9], slice(15, 24), slice(6, 25))
    _fill(t[9], slice(22, 25), slice(5, 26), 0.6)
    return t


def _render(
    templates: np.ndarray, labels: np.ndarray, rng: np.random.Generator, confusion: float
) -> np.ndarray:
    n = len(labels)
    # Some examples are ambiguous, as in the real sets (a shirt that looks like a pullover): the
    # template is blended with another class's. This keeps test accuracy below 100%.
    others = (labels + rng.integers(1, 10, n)) % 10
    weight = np.where(rng.random(n) < confusion, rng.uniform(0.25, 0.6, n), 0.0).astype(np.float32)
    mixed = (1 - weight)[:, None, None] * templates[labels] + weight[:, None, None] * templates[others]
    scale = rng.uniform(0.78, 1.12, n)[:, None, None]
    shear = rng.uniform(-0.25, 0.25, n)[:, None, None]
    dy = rng.uniform(-2.5, 2.5, n)[:, None, None]
    dx = rng.uniform(-2.5, 2.5, n)[:, None, None]
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32) - (SIZE - 1) / 2
    src_y = (yy[None] - dy) / scale + (SIZE - 1) / 2
    src_x = (xx[None] - dx - shear * yy[None]) / scale + (SIZE - 1) / 2
    iy = np.rint(src_y).astype(np.int32)
    ix = np.rint(src_x).astype(np.int32)
    inside = (iy >= 0) & (iy < SIZE) & (ix >= 0) & (ix < SIZE)
    img = mixed[np.arange(n)[:, None, None], np.clip(iy, 0, SIZE - 1), np.clip(ix, 0, SIZE - 1)]
    img = np.where(inside, img, 0.0)
    # Thicken about half the strokes by one pixel, then soften the edges.
    thick = rng.random(n) < 0.5
    grown = np.maximum(img, np.maximum(np.roll(img, 1, axis=2), np.roll(img, 1, axis=1)))
    img[thick] = grown[thick]
    soft = (img + np.roll(img, 1, 1) + np.roll(img, -1, 1) + np.roll(img, 1, 2) + np.roll(img, -1, 2)) / 5
    img = 0.6 * img + 0.4 * soft
    # Shade, add texture and background noise.
    img *= rng.uniform(0.55, 1.0, n)[:, None, None]
    img *= 1.0 - 0.35 * rng.random((n, SIZE, SIZE), dtype=np.float32)
    img += rng.normal(0.0, 0.1, (n, SIZE, SIZE)).astype(np.float32)
    return (np.clip(img, 0.0, 1.0) * 255).astype(np.uint8)[..., None]


def make_images(kind: str, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Generate ``count`` images of ``kind`` (``"mnist"`` or ``"fashion_mnist"``) and their labels.

    Labels are balanced and shuffled; the same ``(kind, count, seed)`` always gives the same arrays.
    """
    templates = _digit_templates() if kind == "mnist" else _fashion_templates()
    confusion = 0.12 if kind == "mnist" else 0.3
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(count) % 10).astype(np.int64)
    images = np.empty((count, SIZE, SIZE, 1), np.uint8)
    chunk = 4096
    for start in range(0, count, chunk):
        stop = min(start + chunk, count)
        images[start:stop] = _render(templates, labels[start:stop], rng, confusion)
    return images, labels
