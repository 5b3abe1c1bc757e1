"""course_utils: the helper package of the Distributed TensorFlow course kit.

Importing it starts nothing: no TensorFlow import, no device initialisation, no network. Each
name below is loaded from its module the first time it is used.

Where each helper is taught:

* :func:`setup`, :func:`report` - notebook 00 (every notebook's set-up cell calls ``setup``)
* :func:`use_virtual_cpus`, :func:`get_strategy`, :func:`describe` - notebooks 00 and 02
* :func:`use_op_threads` - notebook 09 (one core per replica)
* :func:`load_fashion_mnist`, :func:`load_mnist`, :func:`make_pipelines` - notebooks 03 and 04
* :func:`custom_training_cnn`, :func:`keras_tutorial_cnn` - notebooks 03 and 04
* :func:`run_python`, :func:`run_for_replicas` - demonstrations that need their own replica
  count (00, 02, 04)
* :func:`scratch_dir` - every notebook that writes files
* :func:`format_metrics`, :func:`epoch_printer`, :func:`plot_history` - training notebooks

Modules taught in one notebook each: ``simulation``, ``allreduce`` and ``widgets`` (01),
``support`` (02), ``callbacks`` (03), ``reference`` (04), ``diagnostics`` (05), ``hardware`` (06), ``cluster`` and its ``workers`` (07, 08), ``loops`` and ``bench`` (09), ``capstone`` and its :func:`check_same_update` (10: the same update
on 1, 2 and 4 replicas, for your own code too). Exercise checks are in
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
    "use_op_threads": "devices",
    "get_strategy": "strategies",
    "describe": "strategies",
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
    "three_phase_decay": "lessons.callbacks",
    "LocalCluster": "cluster",
    "run_cluster": "cluster",
    "explore_data_parallelism": "lessons.widgets",
    "update_factor": "lessons.diagnostics",
    "detect_strategy": "hardware",
    "check_same_update": "lessons.capstone",
    "quiet_native_logs": "runtime",
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
