"""Every notebook: course_utils, the helper package of the Distributed TensorFlow course kit.

Importing it starts nothing: no TensorFlow import, no device initialisation, no network. Each
name below is loaded from its module the first time it is used, and has this one address.

* :func:`setup`, :func:`report` - notebook 00 (every set-up cell calls ``setup(cpus=N)``: the one
  split of the CPU into virtual devices)
* :func:`use_virtual_cpus`, :func:`get_strategy`, :func:`describe` - notebooks 00 and 02
  (:func:`all_reduce_ops`: the ops a strategy's all-reduce puts in a step, notebooks 01 and 02)
  (:func:`use_virtual_gpus`: the same split for a machine's one GPU)
* :func:`load_fashion_mnist`, :func:`load_mnist`, :func:`make_pipelines` - notebooks 03 and 04
* :func:`custom_training_cnn`, :func:`keras_tutorial_cnn` - notebooks 01, 03, 04 and 09
* :func:`run_python`, :func:`run_for_replicas`, :func:`run_side_by_side` - demonstrations that
  need their own replica count or environment
* :func:`scratch_dir` - every notebook that writes files
* :func:`format_metrics`, :func:`epoch_printer`, :func:`plot_history` - training notebooks
* :func:`check_same_update` - notebook 10 (the same update on 1, 2 and 4 replicas, for your own
  code too; ``docs/capstone.md``)

The core, bottom up (each imports only those before it): ``config``, ``devices``, ``strategies``,
``hardware``, ``runtime``; beside them ``data``, ``models``, ``plots``, ``progress``, ``processes``,
``scratch``, ``errors``, ``versions``, ``checks``, ``compare``. One notebook's helpers are in
:mod:`course_utils.lessons`, the local cluster in ``cluster`` and ``workers``, the checks in
``course_utils.exercises.<notebook>``.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "setup": "runtime",
    "report": "runtime",
    "settings": "config",
    "fast_or": "config",
    "STRATEGY_KINDS": "config",
    "use_virtual_cpus": "devices",
    "use_virtual_gpus": "devices",
    "get_strategy": "hardware",
    "describe": "strategies",
    "all_reduce_ops": "strategies",
    "connect_tpu": "strategies",
    "load_fashion_mnist": "data",
    "load_mnist": "data",
    "make_pipelines": "data",
    "custom_training_cnn": "models",
    "keras_tutorial_cnn": "models",
    "plot_history": "plots",
    "show_images": "plots",
    "format_metrics": "progress",
    "epoch_printer": "progress",
    "scratch_dir": "scratch",
    "run_python": "processes",
    "run_for_replicas": "processes",
    "run_side_by_side": "processes",
    "LocalCluster": "cluster",
    "run_cluster": "cluster",
    "detect_strategy": "hardware",
    "check_same_update": "compare",
    "quiet_native_logs": "devices",
    "CourseError": "errors",
    "ConfigError": "errors",
    "ReplicaCountError": "errors",
    "TensorFlowStartedError": "errors",
    "NoTPUError": "errors",
    "ExerciseError": "errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'course_utils' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
