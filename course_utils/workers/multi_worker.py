"""Notebook 07 (its launcher's tests and the doctor): a small ``MultiWorkerMirroredStrategy`` program.

The notebook's own worker program is written in its cells (``train.py``); this module is the
course's fixed copy of a custom loop, for the tests of :mod:`course_utils.cluster` and for
``python -m course_tools.doctor``. Every task of the cluster runs it; ``TF_CONFIG`` tells each who
it is::

    python -m course_utils.workers.multi_worker --checkpoint-dir DIR
    python -m course_utils.workers.multi_worker --epochs 0       # start the strategy only

It trains a small regression model for ``--epochs`` x ``--steps`` steps, saving a checkpoint every
``--save-every`` steps and at the end of each epoch: the chief into ``DIR/checkpoints``, every other
worker into a temporary ``DIR/workertemp_N/checkpoints`` that it deletes at once. On start it
restores the latest checkpoint and resumes from the epoch and step saved there.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from ..cluster.spec import chief_of
from .common import FEATURES, make_examples, report, say, start

MODEL_SEED = 1


# ----------------------------------------------------------------------------- helpers


def is_chief(task_type: str, task_id: int, cluster: dict) -> bool:
    """The chief is the ``chief`` task when the cluster has one, else ``worker 0``."""
    return chief_of(cluster) == f"{task_type} {task_id}"


def write_dir(base: str, task_type: str, task_id: int, cluster: dict) -> str:
    """Where this task writes its checkpoints: the real folder for the chief, a temporary one
    (``workertemp_N``) for everyone else (as in the TensorFlow multi-worker tutorial)."""
    if is_chief(task_type, task_id, cluster):
        return os.path.join(base, "checkpoints")
    return os.path.join(base, f"workertemp_{task_id}", "checkpoints")


def fingerprint(variables: list) -> str:
    """A short hash of the exact bytes of some variables (equal hashes: identical weights)."""
    digest = hashlib.sha256()
    for v in variables:
        digest.update(np.ascontiguousarray(v.numpy()).tobytes())
    return digest.hexdigest()[:16]


def relative_files(folder: str, base: str) -> list[str]:
    """The files below ``folder``, as paths relative to ``base``, sorted."""
    return sorted(str(p.relative_to(base)) for p in Path(folder).rglob("*") if p.is_file())


# ----------------------------------------------------------------------------- training


def build_model(keras: Any) -> Any:
    keras.utils.set_random_seed(MODEL_SEED)
    return keras.Sequential(
        [keras.Input((FEATURES,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )


def make_dataset(tf: Any, epoch: int, steps: int, global_batch: int, skip: int = 0) -> Any:
    """The batches of one epoch, shuffled with the epoch as seed (so a restart sees the same)."""
    x, y = make_examples(steps * global_batch)
    dataset = tf.data.Dataset.from_tensor_slices((x, y))
    dataset = dataset.shuffle(len(x), seed=epoch, reshuffle_each_iteration=False)
    dataset = dataset.batch(global_batch, drop_remainder=True).skip(skip)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)


def make_optimizer(keras: Any) -> Any:
    return keras.optimizers.SGD(learning_rate=0.05, momentum=0.5)


def make_train_step(tf: Any, strategy: Any, model: Any, optimizer: Any, global_batch: int) -> Any:
    """One synchronous training step: every replica computes gradients on its part of the
    global batch, the strategy sums them across all workers, every worker applies the same update."""

    @tf.function
    def train_step(iterator: Any) -> Any:
        def step_fn(inputs: Any) -> Any:
            x, y = inputs
            with tf.GradientTape() as tape:
                prediction = model(x, training=True)
                per_example = tf.reduce_mean(tf.square(prediction - y), axis=-1)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        per_replica = strategy.run(step_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    return train_step


def reference_losses(epochs: int = 3, steps: int = 4, global_batch: int = 16) -> list[list[float]]:
    """The same training in this process on one device (the default strategy): the losses a
    cluster must reproduce."""
    from ..runtime import import_tensorflow

    tf = import_tensorflow()
    import keras

    strategy = tf.distribute.get_strategy()
    model = build_model(keras)
    optimizer = make_optimizer(keras)
    train_step = make_train_step(tf, strategy, model, optimizer, global_batch)
    losses = []
    for epoch in range(epochs):
        iterator = iter(make_dataset(tf, epoch, steps, global_batch))
        for _ in range(steps):
            loss = float(train_step(iterator))
            losses.append([int(optimizer.iterations.numpy()), loss])
    return losses


def custom_loop(tf: Any, strategy: Any, me: tuple, cluster: dict, args: argparse.Namespace) -> None:
    import keras

    task_type, task_id = me
    chief = is_chief(task_type, task_id, cluster)
    global_batch = args.per_worker_batch * strategy.num_replicas_in_sync
    base = args.checkpoint_dir
    mine = write_dir(base, task_type, task_id, cluster)
    real = os.path.join(base, "checkpoints")  # where the chief writes (see write_dir)

    with strategy.scope():
        model = build_model(keras)
        optimizer = make_optimizer(keras)
        optimizer.build(model.trainable_variables)
        epoch_var = tf.Variable(0, dtype=tf.int64, name="epoch")
        step_var = tf.Variable(0, dtype=tf.int64, name="step_in_epoch")
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=epoch_var, step=step_var)
    manager = tf.train.CheckpointManager(checkpoint, directory=mine, max_to_keep=1)

    restored_from = None
    latest = tf.train.latest_checkpoint(real)
    if latest:
        checkpoint.restore(latest).expect_partial()
        restored_from = os.path.relpath(latest, base)
        say(
            f"restored {restored_from}: resuming at epoch {int(epoch_var.numpy()) + 1} step {int(step_var.numpy()) + 1} "
            f"(global step {int(optimizer.iterations.numpy()) + 1})"
        )
    else:
        say("no checkpoint yet: starting from scratch")

    train_step = make_train_step(tf, strategy, model, optimizer, global_batch)

    losses: list[list[float]] = []
    saved: list[int] = []
    shown_temp = False
    first_step = int(optimizer.iterations.numpy()) + 1
    while int(epoch_var.numpy()) < args.epochs:
        epoch, start = int(epoch_var.numpy()), int(step_var.numpy())
        iterator = iter(
            strategy.experimental_distribute_dataset(
                make_dataset(tf, epoch, args.steps, global_batch, skip=start)
            )
        )
        for step in range(start + 1, args.steps + 1):
            loss = float(train_step(iterator))
            global_step = int(optimizer.iterations.numpy())
            losses.append([global_step, loss])
            say(f"epoch {epoch + 1} step {step}  loss={loss:.4f}")
            end_of_epoch = step == args.steps
            if end_of_epoch or global_step % args.save_every == 0:
                epoch_var.assign(epoch + 1 if end_of_epoch else epoch)
                step_var.assign(0 if end_of_epoch else step)
                path = manager.save(checkpoint_number=global_step)
                saved.append(global_step)
                if chief:
                    say(f"saved {os.path.relpath(path, base)} (after epoch {epoch + 1} step {step})")
                else:
                    if not shown_temp:
                        files = ", ".join(relative_files(mine, base))
                        say(f"wrote a temporary copy: {files}; deleting it")
                        shown_temp = True
                    shutil.rmtree(os.path.dirname(mine), ignore_errors=True)
    if not chief:
        shutil.rmtree(os.path.dirname(mine), ignore_errors=True)
    say(f"done: global step {int(optimizer.iterations.numpy())}")
    report(
        losses=losses,
        saved=saved,
        first_step=first_step,
        restored_from=restored_from,
        weights=fingerprint(model.trainable_variables),
        global_step=int(optimizer.iterations.numpy()),
    )


# ----------------------------------------------------------------------------- main


def parse(argv: Any = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m course_utils.workers.multi_worker")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4, help="steps per epoch")
    parser.add_argument("--per-worker-batch", type=int, default=8)
    parser.add_argument("--checkpoint-dir", default="multi_worker_run")
    parser.add_argument("--save-every", type=int, default=2, help="save every N global steps")
    return parser.parse_args(argv)


def main(argv: Any = None) -> None:
    args = parse(argv)
    tf = start()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    resolver = strategy.cluster_resolver
    cluster = resolver.cluster_spec().as_dict()
    me = (resolver.task_type, int(resolver.task_id))
    workers = len(cluster.get("worker", [])) + len(cluster.get("chief", []))
    chief = is_chief(me[0], me[1], cluster)
    say(
        f"MultiWorkerMirroredStrategy: {strategy.num_replicas_in_sync} replicas in sync "
        f"({workers} workers x 1 CPU); I am {me[0]} {me[1]}{' (the chief)' if chief else ''}"
    )
    if args.epochs > 0:
        custom_loop(tf, strategy, me, cluster, args)


if __name__ == "__main__":
    main()
