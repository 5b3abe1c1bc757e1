"""The benchmark's threads: how many cores each replica's operations may use.

Virtual CPUs share the machine's cores, and by default the operations of every replica ask for all
of them; :func:`use_op_threads` with :func:`threads_per_replica` lets the replicas' operations run
next to each other, each on its share. Only the benchmark needs it (the notebooks keep TensorFlow's
default), so it lives here, not in ``course_utils``.
"""

from __future__ import annotations

from course_utils.devices import cores, import_tensorflow
from course_utils.errors import ConfigError, TensorFlowStartedError


def threads_per_replica(replicas: int, available: int | None = None) -> int:
    """The cores each of ``replicas`` replicas gets when they divide the machine between them
    (at least 1: four replicas on two cores get one thread each and take turns)."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ConfigError(f"threads_per_replica needs a whole number of replicas >= 1, not {replicas!r}.")
    return max(1, (available or cores()) // replicas)


def use_op_threads(n: int) -> int:
    """Let each TensorFlow operation run on at most ``n`` threads (TensorFlow's *intra-op*
    parallelism; by default an operation may use every core). Returns ``n``.

    Virtual CPUs share the machine's cores, and by default the operations of every replica ask
    for all of them. With ``n = threads_per_replica(replicas)`` the operations of different
    replicas run next to each other, each on its share of the cores (it adds no core). Like the
    device split, it must be set before TensorFlow starts; the same ``n`` again does nothing.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"use_op_threads needs a whole number of threads >= 1, not {n!r}.")
    tf = import_tensorflow()
    try:
        tf.config.threading.set_intra_op_parallelism_threads(n)
    except RuntimeError:
        have = tf.config.threading.get_intra_op_parallelism_threads() or "all the cores"
        raise TensorFlowStartedError(
            f"TensorFlow already started with {have} thread(s) per operation; it cannot be "
            f"changed to {n} now. Restart the kernel, then call use_op_threads({n}) before "
            "anything else uses TensorFlow."
        ) from None
    return n
