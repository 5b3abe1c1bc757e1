"""Every notebook: the set-up call of the first code cell, and the runtime report.

:func:`setup` reads the ``COURSE_*`` settings (the one read, kept by :mod:`course_utils.config`),
starts TensorFlow quietly, splits the CPU (and a machine's one GPU) into the devices the notebook
needs (the one split; ``setup(cpus=4)`` for 1, 2 and 4 replicas), seeds, and prints the report.
"""

from __future__ import annotations

import importlib.util
import platform
import warnings
from typing import Any, Optional

from .config import Settings, load, settings
from .devices import (
    cpu_count,
    gpu_count,
    in_ci,
    in_colab,
    physical_devices,
    use_virtual_cpus,
    use_virtual_gpus,
)
from .devices import import_tensorflow as import_tensorflow  # noqa: F401 - kept importable from here
from .devices import quiet_native_logs as quiet_native_logs  # noqa: F401 - kept importable from here
from .errors import ConfigError, CourseError, ExerciseError
from .hardware import choose
from .strategies import Choice, connect_tpu, in_words
from .versions import check_versions as check_versions  # noqa: F401 - kept importable from here
from .versions import judge, legacy_keras

_warned_version = False


def devices_line() -> str:
    """``"CPU x1 (split into 2 logical), GPU x0, TPU x0"``: the devices TensorFlow found."""
    tf = import_tensorflow()
    cpus = tf.config.list_physical_devices("CPU")
    logical = tf.config.get_logical_device_configuration(cpus[0]) if cpus else None
    gpus, tpus = physical_devices("GPU"), physical_devices("TPU")
    split = f" (split into {gpu_count()} logical)" if gpu_count() > len(gpus) else ""
    return (
        f"CPU x{len(cpus)} (split into {len(logical) if logical else 1} logical), "
        f"GPU x{len(gpus)}{split}, TPU x{len(tpus)}"
    )


def training_line(env: Settings) -> str:
    """What the notebooks' own training will run on, in one sentence (without building it)."""
    return in_words(choose(env.strategy, env.cpu_replicas, connect=False), reason=True)


def report(*, show: bool = True) -> str:
    """A compact table of this runtime: versions, devices, Colab or CI, the COURSE_* settings."""
    global _warned_version
    tf = import_tensorflow()
    import keras

    where = ("Google Colab" if in_colab() else "local Jupyter or Python") + (" (CI)" if in_ci() else "")
    env = settings()
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


def cpus_needed(env: Settings, choice: Choice, cpus: Optional[int] = None) -> int:
    """The virtual CPUs to split the CPU into: what the notebook asks for (``cpus``), and without an
    accelerator what the settings' strategy runs on (``COURSE_REPLICAS`` when set, since programs
    started with ``run_python(replicas=N)`` build ``N`` replicas themselves)."""
    need = cpus or 1
    if choice.kind != "tpu" and not physical_devices("GPU"):
        need = max(need, choice.cpus, env.replicas or 1)
    return need


def gpus_needed(env: Settings, choice: Choice, cpus: Optional[int] = None) -> int:
    """Logical GPUs to split a machine's one GPU into, as a CPU is split: the notebook's count, the
    strategy's, ``COURSE_REPLICAS`` (no GPU, or several: their count, used as they are)."""
    gpus = len(physical_devices("GPU"))
    if choice.kind == "tpu" or gpus != 1:
        return gpus
    return max(cpus or 1, choice.gpus, env.replicas or 1)


def setup(
    *, cpus: Optional[int] = None, seed: Optional[int] = 42, show_report: bool = True, backend: str = ""
) -> Settings:
    """What every notebook's set-up cell calls; returns the settings it read (and keeps them).

    It reads the ``COURSE_*`` settings, imports TensorFlow quietly, splits the CPU into ``cpus`` virtual
    devices (more if ``COURSE_REPLICAS``, 2 when unset, needs them: the one split; a machine's one GPU
    likewise, :func:`gpus_needed`, with full float32 on GPUs), connects to the TPU when
    ``COURSE_STRATEGY=tpu``, shows the course's errors in one line, seeds Python, NumPy and TensorFlow,
    reports; safe to re-run. ``backend="jax"``: notebook 11, Keras on JAX without TensorFlow (lessons).
    """
    show_course_errors_briefly()  # first: a bad setting below is then shown as one line
    if cpus is not None and (isinstance(cpus, bool) or not isinstance(cpus, int) or cpus < 1):
        raise ConfigError(f"setup(cpus=...) needs a whole number of virtual CPUs >= 1, not {cpus!r}.")
    if backend == "jax":
        from .lessons.keras_on_jax import setup_jax

        return setup_jax(load(), cpus=cpus or 2, seed=seed, show_report=show_report)
    env = load()
    if importlib.util.find_spec("tensorflow") is None:  # as on Colab's TPU runtimes, since 2025
        raise CourseError(
            "TensorFlow is not installed here. On a TPU, notebook 11 runs Keras on JAX, and notebook 06's "
            "cell after its set-up cell installs tensorflow-tpu; elsewhere pip install tensorflow."
        )
    import_tensorflow()
    warnings.filterwarnings("ignore", module="tensorflow_datasets")
    # Noise, not lessons: a distributed dataset read in a tf.function; "shuffle ignored" on every fit().
    warnings.filterwarnings("ignore", message="To make it possible to preserve tf.data options")
    warnings.filterwarnings("ignore", message="`shuffle=True` was passed")
    choice = choose(env.strategy, env.replicas, connect=False)
    need = cpus_needed(env, choice, cpus)
    # More virtual CPUs or logical GPUs than needed (a set-up re-run) is fine: strategies use the first.
    if cpu_count() < need:
        use_virtual_cpus(need)
    if gpu_count() < gpus_needed(env, choice, cpus):  # never without a GPU: 0 < 0
        use_virtual_gpus(gpus_needed(env, choice, cpus))
    if physical_devices("GPU"):
        # TensorFloat-32 (default from Ampere GPUs on) rounds matmul inputs; lessons compare float32 noise.
        import_tensorflow().config.experimental.enable_tensor_float_32_execution(False)
    if env.strategy == "tpu":
        connect_tpu()  # no TPU: say so now, in one line, not cells later
    if seed is not None:
        import keras

        keras.utils.set_random_seed(seed)
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
    shell.set_custom_exc((CourseError, ExerciseError), _brief_error)
    return True
