"""Notebooks 03 to 10: MNIST and Fashion-MNIST from the first source that works, and ``tf.data`` pipelines.

Sources, in order:

1. a local cache (the files Keras keeps under ``$KERAS_HOME/datasets``, default ``~/.keras``);
2. the real loaders (``keras.datasets``, or ``tensorflow_datasets`` for MNIST) when the network
   answers and ``COURSE_OFFLINE`` is not set;
3. a built-in stand-in generated on the spot (:mod:`course_utils.synthetic`): deterministic,
   28x28x1 ``uint8`` images in 10 named classes, and learnable.

One printed line says which source was used. With ``COURSE_FAST=1`` the sets are cut to
:data:`FAST_SIZES` so that every notebook stays quick.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from . import synthetic
from .config import settings

FASHION_MNIST_CLASSES: tuple[str, ...] = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
MNIST_CLASSES: tuple[str, ...] = tuple(str(d) for d in range(10))

#: (train, test) examples of the real sets, and of the cut used with ``COURSE_FAST=1``.
FULL_SIZES = (60_000, 10_000)
FAST_SIZES = (6_000, 1_000)

_PRETTY = {"mnist": "MNIST", "fashion_mnist": "Fashion-MNIST"}
_NETWORK_PROBE = ("storage.googleapis.com", 443)


@dataclass
class ImageData:
    """A labelled image set split into train and test, with the source it came from."""

    name: str
    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    class_names: tuple[str, ...]
    source: str
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def train(self) -> tuple[np.ndarray, np.ndarray]:
        return self.train_images, self.train_labels

    @property
    def test(self) -> tuple[np.ndarray, np.ndarray]:
        return self.test_images, self.test_labels

    def summary(self) -> str:
        return (
            f"Data: {_PRETTY.get(self.name, self.name)} from {self.source}: "
            f"{len(self.train_labels):,} train / {len(self.test_labels):,} test images, "
            f"{self.train_images.shape[1]}x{self.train_images.shape[2]}x"
            f"{self.train_images.shape[3]} {self.train_images.dtype}, "
            f"{len(self.class_names)} classes"
        )


def keras_home() -> Path:
    """Where Keras caches downloads: ``$KERAS_HOME`` or ``~/.keras``."""
    return Path(os.environ.get("KERAS_HOME") or Path.home() / ".keras")


def network_available(timeout: float = 2.0) -> bool:
    """True when the datasets' host answers within ``timeout`` seconds (never hangs longer)."""
    try:
        with socket.create_connection(_NETWORK_PROBE, timeout=timeout):
            return True
    except OSError:
        return False


def _keras_cache_ready(name: str) -> bool:
    base = keras_home() / "datasets"
    if name == "mnist":
        return (base / "mnist.npz").is_file()
    files = [
        "train-labels-idx1-ubyte.gz",
        "train-images-idx3-ubyte.gz",
        "t10k-labels-idx1-ubyte.gz",
        "t10k-images-idx3-ubyte.gz",
    ]
    return all((base / "fashion-mnist" / f).is_file() for f in files)


def _from_keras_cache(name: str) -> tuple[np.ndarray, ...]:
    """Read the files Keras keeps after a download, exactly as ``keras.datasets`` reads them."""
    import gzip

    base = keras_home() / "datasets"
    if name == "mnist":
        with np.load(base / "mnist.npz", allow_pickle=False) as f:
            x_train, y_train, x_test, y_test = f["x_train"], f["y_train"], f["x_test"], f["y_test"]
    else:
        folder = base / "fashion-mnist"

        def read(kind: str, prefix: str) -> np.ndarray:
            offset = 8 if kind == "labels" else 16
            suffix = "idx1" if kind == "labels" else "idx3"
            with gzip.open(folder / f"{prefix}-{kind}-{suffix}-ubyte.gz", "rb") as f:
                return np.frombuffer(f.read(), np.uint8, offset=offset)

        y_train, y_test = read("labels", "train"), read("labels", "t10k")
        x_train = read("images", "train").reshape(len(y_train), 28, 28)
        x_test = read("images", "t10k").reshape(len(y_test), 28, 28)
    return x_train[..., None], y_train.astype(np.int64), x_test[..., None], y_test.astype(np.int64)


def _from_keras(name: str) -> tuple[np.ndarray, ...]:
    import keras

    module = keras.datasets.mnist if name == "mnist" else keras.datasets.fashion_mnist
    (x_train, y_train), (x_test, y_test) = module.load_data()
    return x_train[..., None], y_train.astype(np.int64), x_test[..., None], y_test.astype(np.int64)


def _from_tfds(name: str) -> tuple[np.ndarray, ...]:
    import tensorflow_datasets as tfds

    train, test = tfds.as_numpy(tfds.load(name, split=["train", "test"], batch_size=-1, as_supervised=True))
    return train[0], train[1].astype(np.int64), test[0], test[1].astype(np.int64)


def _builtin(name: str, sizes: tuple[int, int]) -> tuple[np.ndarray, ...]:
    x_train, y_train = synthetic.make_images(name, sizes[0], seed=2024)
    x_test, y_test = synthetic.make_images(name, sizes[1], seed=2025)
    return x_train, y_train, x_test, y_test


def _load(name: str, classes: tuple[str, ...], fast: Optional[bool], quiet: bool) -> ImageData:
    env = settings()
    fast = env.fast if fast is None else fast
    sizes = FAST_SIZES if fast else FULL_SIZES
    arrays: Optional[tuple[np.ndarray, ...]] = None
    source = ""
    reason = ""
    if _keras_cache_ready(name):
        try:
            arrays, source = _from_keras_cache(name), "the local Keras cache"
        except Exception as error:  # a damaged cache: say so and go on
            reason = f"the cache could not be read ({type(error).__name__})"
    if arrays is None and not env.offline:
        if network_available():
            loaders: list[tuple[str, Callable[[str], tuple[np.ndarray, ...]]]] = (
                [("tensorflow-datasets", _from_tfds), ("keras.datasets", _from_keras)]
                if name == "mnist"
                else [("keras.datasets", _from_keras)]
            )
            for label, loader in loaders:
                try:
                    arrays, source = loader(name), f"{label} (downloaded)"
                    break
                except Exception as error:
                    reason = f"{label} failed ({type(error).__name__})"
        else:
            reason = "no network"
    elif arrays is None:
        reason = "COURSE_OFFLINE=1"
    if arrays is None:
        arrays = _builtin(name, sizes)
        source = f"the built-in offline stand-in ({reason})"
    x_train, y_train, x_test, y_test = arrays
    if fast:
        x_train, y_train = x_train[: sizes[0]], y_train[: sizes[0]]
        x_test, y_test = x_test[: sizes[1]], y_test[: sizes[1]]
        source += ", cut for COURSE_FAST=1"
    data = ImageData(name, x_train, y_train, x_test, y_test, classes, source)
    if not quiet:
        print(data.summary())
    return data


def load_fashion_mnist(*, fast: Optional[bool] = None, quiet: bool = False) -> ImageData:
    """Fashion-MNIST (10 kinds of clothing) from the first source that works; prints which."""
    return _load("fashion_mnist", FASHION_MNIST_CLASSES, fast, quiet)


def load_mnist(*, fast: Optional[bool] = None, quiet: bool = False) -> ImageData:
    """MNIST (hand-written digits) from the first source that works; prints which."""
    return _load("mnist", MNIST_CLASSES, fast, quiet)


# --------------------------------------------------------------------------- tf.data pipelines


@dataclass
class Pipelines:
    """Train and test ``tf.data`` pipelines batched with the global batch size."""

    train: Any
    test: Any
    per_replica_batch: int
    replicas: int

    @property
    def global_batch(self) -> int:
        """Global batch = per-replica batch x number of replicas."""
        return self.per_replica_batch * self.replicas


def scale_images(images: Any, labels: Any) -> tuple[Any, Any]:
    """``uint8`` pixels in [0, 255] -> ``float32`` in [0, 1]; labels unchanged."""
    import tensorflow as tf

    return tf.cast(images, tf.float32) / 255.0, labels


def make_pipelines(
    data: ImageData,
    strategy: Any = None,
    *,
    per_replica_batch: int = 64,
    shuffle_seed: int = 42,
    drop_remainder: bool = False,
) -> Pipelines:
    """Build train and test pipelines: scale, cache, shuffle (train), batch globally, prefetch.

    The global batch is ``per_replica_batch * strategy.num_replicas_in_sync``; with no strategy,
    the current one (the default strategy outside any scope) is used.
    """
    import tensorflow as tf

    strategy = strategy or tf.distribute.get_strategy()
    replicas = int(strategy.num_replicas_in_sync)
    global_batch = per_replica_batch * replicas
    autotune = tf.data.AUTOTUNE
    train = (
        tf.data.Dataset.from_tensor_slices(data.train)
        .map(scale_images, num_parallel_calls=autotune)
        .cache()
        .shuffle(len(data.train_labels), seed=shuffle_seed, reshuffle_each_iteration=True)
        .batch(global_batch, drop_remainder=drop_remainder)
        .prefetch(autotune)
    )
    test = (
        tf.data.Dataset.from_tensor_slices(data.test)
        .map(scale_images, num_parallel_calls=autotune)
        .cache()
        .batch(global_batch, drop_remainder=drop_remainder)
        .prefetch(autotune)
    )
    return Pipelines(train, test, per_replica_batch, replicas)
