"""Notebooks 01, 03, 04 and 09: the two models the TensorFlow tutorials train, built the same way every time.

* :func:`custom_training_cnn`: the CNN of the *Custom training with tf.distribute.Strategy*
  tutorial (Fashion-MNIST), with its L2 regulariser on the first dense layer.
* :func:`keras_tutorial_cnn`: the CNN of the *Distributed training with Keras* tutorial (MNIST).

Both return logits (no softmax): pair them with ``from_logits=True`` losses. Build them inside
``strategy.scope()`` to get distributed variables.
"""

from __future__ import annotations

from typing import Any, Callable, Optional


def custom_training_cnn(l2: float = 1e-4, seed: Optional[int] = None, num_classes: int = 10) -> Any:
    """Conv(32) -> MaxPool -> Conv(64) -> MaxPool -> Flatten -> Dense(64, L2) -> Dense(10)."""
    import keras

    init = keras.initializers.GlorotUniform(seed=seed) if seed is not None else "glorot_uniform"
    return keras.Sequential(
        [
            keras.Input(shape=(28, 28, 1)),
            keras.layers.Conv2D(32, 3, activation="relu", kernel_initializer=init),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(64, 3, activation="relu", kernel_initializer=init),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(
                64,
                activation="relu",
                kernel_initializer=init,
                kernel_regularizer=keras.regularizers.L2(l2),
            ),
            keras.layers.Dense(num_classes, kernel_initializer=init),
        ],
        name="custom_training_cnn",
    )


def keras_tutorial_cnn(seed: Optional[int] = None, num_classes: int = 10) -> Any:
    """Conv(32) -> MaxPool -> Flatten -> Dense(64) -> Dense(10)."""
    import keras

    init = keras.initializers.GlorotUniform(seed=seed) if seed is not None else "glorot_uniform"
    return keras.Sequential(
        [
            keras.Input(shape=(28, 28, 1)),
            keras.layers.Conv2D(32, 3, activation="relu", kernel_initializer=init),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu", kernel_initializer=init),
            keras.layers.Dense(num_classes, kernel_initializer=init),
        ],
        name="keras_tutorial_cnn",
    )


def tutorial_train_step(
    model: Any, optimizer: Any, accuracy: Any, global_batch_size: int
) -> Callable[[Any], Any]:
    """The right per-replica step (the tutorial's), in the factory form the exercises use;
    ``accuracy`` (a metric, or None) is updated with each batch's logits."""
    from .runtime import import_tensorflow

    tf = import_tensorflow()
    import keras

    loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

    def train_step(inputs: Any) -> Any:
        images, labels = inputs
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = tf.nn.compute_average_loss(
                loss_object(labels, logits), global_batch_size=global_batch_size
            )
            if model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        if accuracy is not None:
            accuracy.update_state(labels, logits)
        return loss

    return train_step
