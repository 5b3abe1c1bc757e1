"""Notebooks 02 and 07: the worker programs that :mod:`course_utils.cluster` starts, one process per task.

Each runs as ``python -m course_utils.workers.NAME`` and reads its place from ``TF_CONFIG``:
:mod:`.show_tf_config` prints its ``TF_CONFIG`` (notebook 07); :mod:`.multi_worker`, a
``MultiWorkerMirroredStrategy`` loop with chief-only checkpoints and resuming, serves the
launcher's tests and the doctor; :mod:`.support_probes` runs notebook 02's support matrix; and
:mod:`.ps_training` (a function, not a program) holds ``in_process_cluster``, for notebook 02's
probes and the tests of 08's checks. :mod:`.common` holds what they share: a watchdog for a worker
whose launcher is gone, a quiet TensorFlow import, :func:`.common.report`, and the small
regression problem :mod:`.multi_worker` trains on.
"""
