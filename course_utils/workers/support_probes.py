"""Notebook 02: the two cluster programs of its support matrix (started by :mod:`course_utils.lessons.support`).

Each receives the source of the notebook's probe cells, runs it (with ``np``, ``tf`` and ``keras``
imported as in the notebook), and calls the probes it defines: ``multi_worker`` in each process of
a real multi-worker cluster (its ``TF_CONFIG`` set by the launcher); ``parameter_server N`` starts
an in-process parameter-server cluster of N workers and one parameter server. Each prints one
result line (:func:`course_utils.processes.print_result`).
"""

from __future__ import annotations

from typing import Any, Sequence

from ..processes import print_result


def load_probes(probes: str) -> dict[str, Any]:
    """Run the probe cells' source in a fresh namespace (TensorFlow started quietly) and return it."""
    from course_utils.runtime import import_tensorflow

    tf = import_tensorflow()
    import keras
    import numpy as np

    namespace: dict[str, Any] = {"np": np, "tf": tf, "keras": keras, "__name__": "probes"}
    exec(compile(probes, "<notebook 02 probe cells>", "exec"), namespace)  # the student's own cells
    return namespace


def multi_worker(probes: dict[str, Any]) -> None:
    """One worker of the cluster: both probes under ``MultiWorkerMirroredStrategy``."""
    tf = probes["tf"]
    attempt = probes["attempt"]
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    out: dict[str, Any] = {"replicas": strategy.num_replicas_in_sync}
    out["custom_loop"] = attempt(probes["custom_loop_probe"], strategy)
    out["fit"] = attempt(probes["fit_probe"], strategy)
    print_result(out)


def parameter_server(probes: dict[str, Any], workers: int) -> None:
    """The coordinator of an in-process cluster: a variable, a ``ClusterCoordinator`` loop, ``fit``."""
    from .ps_training import in_process_cluster

    tf, keras = probes["tf"], probes["keras"]
    attempt = probes["attempt"]
    ps = 1
    resolver = in_process_cluster(tf, num_workers=workers, num_ps=ps)
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

    out: dict[str, Any] = {"workers": workers, "ps": ps}
    with strategy.scope():
        variable = tf.Variable(0.0)
    out["variable_type"] = type(variable).__name__
    out["variable_device"] = variable.device.replace("/replica:0", "").replace("/device:", "/")

    def coordinator_loop() -> list[float]:
        # Notebook 08's program: steps scheduled on whichever worker is free.
        with strategy.scope():
            model = probes["probe_model"]()
            optimizer = keras.optimizers.Adam(0.01)
            optimizer.build(model.trainable_variables)
            per_example = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
        global_batch = int(probes.get("GLOBAL_BATCH", 16))

        @tf.function
        def per_worker_dataset_fn() -> Any:
            return strategy.distribute_datasets_from_function(lambda _: probes["probe_dataset"]())

        iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))

        @tf.function
        def train_step(iterator: Any) -> Any:
            def step_fn(inputs: Any) -> Any:
                x, y = inputs
                with tf.GradientTape() as tape:
                    loss = tf.nn.compute_average_loss(
                        per_example(y, model(x, training=True)), global_batch_size=global_batch
                    )
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
                return loss

            per_replica = strategy.run(step_fn, args=(next(iterator),))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        results = [coordinator.schedule(train_step, args=(iterator,)) for _ in range(4)]
        coordinator.join()
        return [float(r.fetch()) for r in results]

    out["custom_loop"] = attempt(coordinator_loop)
    out["fit"] = attempt(probes["fit_probe"], strategy)
    out["dataset_creator"] = hasattr(keras.utils, "experimental") and hasattr(
        keras.utils.experimental, "DatasetCreator"
    )
    print_result(out)


def main(argv: Sequence[str], probes: str = "") -> int:
    """``main(["multi_worker"], source)`` or ``main(["parameter_server", "2"], source)``."""
    args = list(argv)
    if args[:1] == ["multi_worker"]:
        multi_worker(load_probes(probes))
    elif args[:1] == ["parameter_server"]:
        parameter_server(load_probes(probes), int(args[1]) if len(args) > 1 else 2)
    else:
        print("usage: main(['multi_worker'] or ['parameter_server', N], source of the probe cells)")
        return 2
    return 0
