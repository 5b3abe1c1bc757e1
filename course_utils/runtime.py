"""The runtime: quiet TensorFlow start-up, the notebook set-up call and the runtime report."""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import sys
import warnings
from typing import Any, Iterator, Optional

from .config import Settings, settings
from .devices import cpu_count, in_ci, in_colab, physical_devices, use_virtual_cpus
from .versions import check_versions as check_versions  # noqa: F401 - kept importable from here
from .versions import judge, legacy_keras

_warned_version = False


@contextlib.contextmanager
def _stderr_to_devnull() -> Iterator[None]:
    """Silence file descriptor 2 for a moment (TensorFlow's C++ start-up lines are written there
    before its logging can be configured, and would land in every notebook's first output)."""
    try:
        saved = os.dup(2)
    except OSError:  # no real stderr (some embedded runtimes): nothing to silence
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            sys.stderr.flush()
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def quiet_native_logs() -> contextlib.AbstractContextManager[None]:
    """A context manager that hides what native code writes to stderr while it runs.

    Use it around a call whose C++ side prints a note on some machines only (for example the
    first float16 op on a CPU without AVX-512), so a notebook's output is the same everywhere.
    """
    return _stderr_to_devnull()


def import_tensorflow() -> Any:
    """Import TensorFlow without its start-up chatter and return the module."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    with _stderr_to_devnull():
        import tensorflow as tf

        physical_devices("GPU")  # the first device query prints CUDA probing lines on CPU machines
    tf.get_logger().setLevel(logging.ERROR)
    logging.getLogger("absl").setLevel(logging.ERROR)
    tf.autograph.set_verbosity(0)
    return tf


def devices_line() -> str:
    """``"CPU x1 (split into 2 logical), GPU x0, TPU x0"``: the devices TensorFlow found."""
    tf = import_tensorflow()
    cpus = tf.config.list_physical_devices("CPU")
    logical = tf.config.get_logical_device_configuration(cpus[0]) if cpus else None
    gpus, tpus = physical_devices("GPU"), physical_devices("TPU")
    return (
        f"CPU x{len(cpus)} (split into {len(logical) if logical else 1} logical), "
        f"GPU x{len(gpus)}, TPU x{len(tpus)}"
    )


def training_line(env: Settings) -> str:
    """What the notebooks' own training will run on, in one sentence (without building it)."""
    if env.strategy != "auto":
        return f"the strategy COURSE_STRATEGY={env.strategy} names"
    if physical_devices("GPU") or physical_devices("TPU"):
        return "the accelerators found (COURSE_STRATEGY=auto)"
    if env.cpu_replicas > 1:
        return (
            f"{env.cpu_replicas} replicas on virtual CPUs, by default: a MirroredStrategy "
            "(COURSE_REPLICAS=1 for one device)"
        )
    return "one device (COURSE_REPLICAS=1)"


def report(*, show: bool = True) -> str:
    """A compact table of this runtime: versions, devices, Colab or CI, the COURSE_* settings."""
    global _warned_version
    tf = import_tensorflow()
    import keras

    where = "Google Colab" if in_colab() else "local Jupyter or Python"
    if in_ci():
        where += " (CI)"
    env: Settings = settings()
    rows = [
        ("Python", platform.python_version()),
        ("TensorFlow", tf.__version__),
        ("Keras", keras.__version__),
        ("devices", devices_line()),
        ("runtime", where),
        ("settings", "  ".join(f"{k}={v}" for k, v in env.as_dict().items())),
        ("training", training_line(env)),
    ]
    width = max(len(k) for k, _ in rows)
    rule = "-" * 72
    text = "\n".join(["runtime report " + rule[15:]] + [f"{k:<{width}}  {v}" for k, v in rows] + [rule])
    verdict = judge(tf.__version__, keras.__version__, legacy_keras=legacy_keras())
    warning = None if verdict.tested else verdict.message
    if show:
        print(text)
        if warning and not _warned_version:
            print(warning)
    if warning:
        _warned_version = True
    return text


def _splits_cpu(env: Settings) -> bool:
    """Whether the strategy these settings ask for runs on virtual CPUs when there is no GPU."""
    if env.strategy in {"mirrored", "central_storage"}:
        return True
    if env.strategy == "auto":
        from .hardware import tpu_hint

        return not tpu_hint()
    return bool(env.replicas and env.replicas > 1)


def setup(*, seed: Optional[int] = 42, show_report: bool = True) -> Settings:
    """What every notebook's set-up cell calls.

    It reads and validates the ``COURSE_*`` settings, imports TensorFlow quietly, splits the CPU
    into ``COURSE_REPLICAS`` virtual devices (2 when unset) when there is no accelerator and the
    strategy runs on CPU replicas, connects to the TPU now when ``COURSE_STRATEGY=tpu``, shows the
    course's own errors as their one-line message (see :func:`show_course_errors_briefly`),
    seeds Python, NumPy and TensorFlow, and prints the runtime report. Safe to re-run.
    """
    show_course_errors_briefly()  # first: a bad setting below is then shown as one line
    env = settings()
    tf = import_tensorflow()
    warnings.filterwarnings("ignore", module="tensorflow_datasets")
    # Emitted whenever a distributed dataset is iterated inside tf.function: noise, not a lesson.
    warnings.filterwarnings("ignore", message="To make it possible to preserve tf.data options")
    # Keras 3.15 warns on every fit() of a tf.data.Dataset that shuffle=True is ignored.
    warnings.filterwarnings("ignore", message="`shuffle=True` was passed")
    if env.strategy == "tpu":
        from .strategies import connect_tpu

        connect_tpu()  # no TPU: say so now, in one line, not cells later
    elif _splits_cpu(env) and not physical_devices("GPU") and cpu_count() < env.cpu_replicas:
        # More virtual CPUs than needed (a notebook that split into 4 for its own demos, set-up
        # re-run) is fine: strategies use the first ones.
        use_virtual_cpus(env.cpu_replicas)
    if seed is not None:
        import keras

        keras.utils.set_random_seed(seed)
    del tf
    if show_report:
        report()
    return env


def _brief_error(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: Any = None) -> Any:
    """IPython's handler for the course's errors: the message alone, no traceback."""
    lines = [f"{etype.__name__}: {value}"]
    shell._showtraceback(etype, value, lines)
    return lines


def show_course_errors_briefly() -> bool:
    """In Jupyter or Colab, show the course's own errors (exercise hints, settings, restarts,
    no TPU) as ``ExerciseError: <hint>``, one line instead of a traceback through course_utils.

    The cell still fails: the kernel reports an error, so nbval, the grader and "run all" stop
    there as before. Any other error keeps its full traceback. Returns False outside IPython.
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or not hasattr(shell, "set_custom_exc"):
        return False
    from .errors import CourseError, ExerciseError

    shell.set_custom_exc((CourseError, ExerciseError), _brief_error)
    return True
