"""Notebooks 02 and 07: the worker programs that :mod:`course_utils.cluster` starts, one process per task.

Each runs with ``python -m course_utils.workers.NAME`` and learns its place in the cluster from
``TF_CONFIG`` (:mod:`.ps_training` is the exception: a function, not a program):

* :mod:`.show_tf_config` - prints what its ``TF_CONFIG`` says (no TensorFlow; notebook 07);
* :mod:`.multi_worker` - a ``MultiWorkerMirroredStrategy`` custom loop with chief-only
  checkpoints and resuming, for the launcher's tests and the doctor (notebook 07 writes its own
  worker program in its cells);
* :mod:`.ps_training` - ``in_process_cluster``, the servers of an in-process parameter-server
  cluster, for notebook 02's probes and the tests of notebook 08's checks (notebook 08 writes
  its cluster and its ``ClusterCoordinator`` program in its cells);
* :mod:`.support_probes` - the two cluster programs of notebook 02's support matrix.

:mod:`.common` holds what they share: a watchdog that ends a worker whose launcher is gone, a
quiet TensorFlow import, :func:`.common.report` for results the notebook reads, and the small
regression problem :mod:`.multi_worker` trains on.
"""
