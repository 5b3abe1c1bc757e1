"""Notebook 02: the two cluster programs of its support matrix (run by :mod:`course_utils.lessons.support`).

``python -m course_utils.workers.support_probes multi_worker`` runs in each process of a real
multi-worker cluster (its ``TF_CONFIG`` set by the launcher); ``... parameter_server N`` starts
an in-process parameter-server cluster of N workers and one parameter server. Each prints one
result line (:func:`course_utils.processes.print_result`).
"""

from __future__ import annotations

import sys
from typing import Any, Optional, Sequence

from ..processes import print_result


def multi_worker() -> None:
    from course_utils.runtime import import_tensorflow

    tf = import_tensorflow()
    from course_utils.lessons import support

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    out: dict[str, Any] = {"replicas": strategy.num_replicas_in_sync}
    out["custom_loop"] = support.attempt(support.custom_loop_probe, strategy).__dict__
    out["fit"] = support.attempt(support.fit_probe, strategy).__dict__
    print_result(out)


def parameter_server(workers: int) -> None:
    from course_utils.runtime import import_tensorflow

    tf = import_tensorflow()
    import keras

    from course_utils.lessons import support

    from .ps_training import in_process_cluster

    ps = 1
    resolver = in_process_cluster(tf, num_workers=workers, num_ps=ps)
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

    out: dict[str, Any] = {"workers": workers, "ps": ps}
    with strategy.scope():
        probe = tf.Variable(0.0)
    out["variable_type"] = type(probe).__name__
    out["variable_device"] = probe.device.replace("/replica:0", "").replace("/device:", "/")

    def custom_loop() -> list[float]:
        with strategy.scope():
            model = support.probe_model()
            optimizer = keras.optimizers.Adam(0.01)
            optimizer.build(model.trainable_variables)
            per_example = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

        def dataset_fn(_: Any) -> Any:
            return support.probe_dataset()

        @tf.function
        def per_worker_dataset_fn() -> Any:
            return strategy.distribute_datasets_from_function(dataset_fn)

        per_worker = coordinator.create_per_worker_dataset(per_worker_dataset_fn)
        iterator = iter(per_worker)

        @tf.function
        def train_step(iterator: Any) -> Any:
            def step_fn(inputs: Any) -> Any:
                x, y = inputs
                with tf.GradientTape() as tape:
                    loss = tf.nn.compute_average_loss(
                        per_example(y, model(x, training=True)), global_batch_size=support.GLOBAL_BATCH
                    )
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
                return loss

            per_replica = strategy.run(step_fn, args=(next(iterator),))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        results = [coordinator.schedule(train_step, args=(iterator,)) for _ in range(2 * support.STEPS)]
        coordinator.join()
        return [float(r.fetch()) for r in results]

    out["custom_loop"] = support.attempt(custom_loop).__dict__
    out["fit"] = support.attempt(support.fit_probe, strategy).__dict__
    out["dataset_creator"] = hasattr(keras.utils, "experimental") and hasattr(
        keras.utils.experimental, "DatasetCreator"
    )
    print_result(out)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["multi_worker"]:
        multi_worker()
    elif args[:1] == ["parameter_server"]:
        parameter_server(int(args[1]) if len(args) > 1 else 2)
    else:
        print("usage: python -m course_utils.workers.support_probes multi_worker | parameter_server N")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
