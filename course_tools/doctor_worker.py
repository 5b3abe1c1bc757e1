"""The worker program of ``python -m course_tools.doctor``'s cluster check.

Every task of a 2-worker cluster runs it (``TF_CONFIG`` from :class:`course_utils.cluster.LocalCluster`):

1. it creates a ``MultiWorkerMirroredStrategy`` (this starts the task's gRPC server and waits
   for the other worker);
2. it trains one synchronous step of notebook 07's custom loop (:mod:`.multi_worker`: SGD built
   in the scope, ``compute_average_loss``) and prints
   ``custom step: replicas=2 loss=... weights=<hash>``: the same hash on every worker means the
   gradients were all-reduced and every worker applied the same update;
3. with ``--fit`` it then tries ``Model.fit`` under the same strategy (keras-team/keras#20585) and
   prints ``fit: works`` or ``fit: fails: <one line>``.
"""

from __future__ import annotations

import argparse
from typing import Any

from course_utils.workers.common import say, start
from course_utils.workers.multi_worker import (
    build_model,
    fingerprint,
    make_dataset,
    make_optimizer,
    make_train_step,
)

#: Examples per worker in the one step.
PER_WORKER_BATCH = 8


def main(argv: Any = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m course_tools.doctor_worker")
    parser.add_argument("--fit", action="store_true", help="then try Model.fit (keras-team/keras#20585)")
    args = parser.parse_args(argv)
    tf = start()
    import keras

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    replicas = int(strategy.num_replicas_in_sync)
    global_batch = PER_WORKER_BATCH * replicas
    with strategy.scope():
        model = build_model(keras)
        optimizer = make_optimizer(keras)
        optimizer.build(model.trainable_variables)
    train_step = make_train_step(tf, strategy, model, optimizer, global_batch)
    iterator = iter(strategy.experimental_distribute_dataset(make_dataset(tf, 0, 1, global_batch)))
    loss = float(train_step(iterator))
    say(f"custom step: replicas={replicas} loss={loss:.6f} weights={fingerprint(model.trainable_variables)}")
    if args.fit:
        from course_tools.probes import attempt, fit_probe

        outcome = attempt(fit_probe, strategy, steps=1)
        say(f"fit: {outcome.status}" + (f": {outcome.note}" if outcome.status != "works" else ""))


if __name__ == "__main__":
    main()
