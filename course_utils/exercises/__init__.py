"""Every notebook: the check functions of its exercises, one module per notebook (named like the notebook).

A notebook's check cell calls, for example,
``setup_and_hardware.check_global_batch(global_batch)``; every check prints one ``[pass]`` line
or raises :class:`course_utils.ExerciseError` with a hint.
"""

import random
from typing import Any, Callable, Optional, TypeVar

import numpy as np

#: Set by the grader's judge (never in a notebook): a random source for cases drawn at grading
#: time, which the student never saw, that the checks taking them add to their fixed cases.
UNSEEN: Optional[random.Random] = None


def unseen() -> Optional[random.Random]:
    """:data:`UNSEEN` as it is now: ``None`` in a notebook, the judge's random source when grading."""
    return UNSEEN


#: The harnesses a grading kernel runs for the judge, by ``"module.name"`` (:func:`harness`).
HARNESSES: dict[str, Callable[..., Any]] = {}

_Harness = TypeVar("_Harness", bound=Callable[..., Any])


def harness(function: _Harness) -> _Harness:
    """Mark ``function(student_function, *args)`` as a harness: the part of a check that runs the
    student's code (on a strategy, on a model) and returns what it did as plain data (numbers,
    arrays, lists), never a verdict. :func:`in_kernel` calls it."""
    HARNESSES[f"{function.__module__.rsplit('.', 1)[-1]}.{function.__name__}"] = function
    return function


def in_kernel(run: Callable[..., Any], student_function: Any, *args: Any, **kwargs: Any) -> Any:
    """``run(student_function, *args, **kwargs)``, a :func:`harness`: here, in a notebook. When a
    grader judges the check outside the student's kernel, ``student_function`` is the judge's
    stand-in: the whole harness then runs in the student's kernel (strategies and datasets cross as
    recipes), and only what it returns, plain data, comes back to be judged here."""
    via = getattr(type(student_function), "grading_via", None)
    if callable(via):
        name = f"{run.__module__.rsplit('.', 1)[-1]}.{run.__name__}"
        if HARNESSES.get(name) is not run:
            raise TypeError(f"{name} is not a harness")
        return via(student_function, name, args, kwargs)
    return run(student_function, *args, **kwargs)


class Watched:
    """The strategy a check hands a student's function: the real one, its ``run`` calls, the
    datasets it distributed and its ``reduce`` calls counted.

    When a grader judges the check outside the student's kernel, it crosses as its recipe (its
    replica count, :meth:`grading_recipe`): the kernel builds its own (:func:`rebuild`) and reports
    those counts, which the grader adds here (:meth:`grading_take`).
    """

    def __init__(self, strategy: Any) -> None:
        self.strategy, self.runs, self.distributed, self.reduces = strategy, 0, 0, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.strategy, name)

    def run(self, fn: Any, args: Any = (), kwargs: Any = None, options: Any = None) -> Any:
        self.runs += 1
        return self.strategy.run(fn, args=args, kwargs=kwargs, options=options)

    def reduce(self, reduce_op: Any, value: Any, axis: Any = None) -> Any:
        self.reduces += 1
        return self.strategy.reduce(reduce_op, value, axis=axis)

    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:
        self.distributed += 1
        return self.strategy.experimental_distribute_dataset(dataset, options)

    def distribute_datasets_from_function(self, dataset_fn: Any, options: Any = None) -> Any:
        self.distributed += 1
        return self.strategy.distribute_datasets_from_function(dataset_fn, options)

    def grading_recipe(self) -> dict[str, Any]:
        return {"strategy": int(self.strategy.num_replicas_in_sync)}

    def grading_report(self) -> dict[str, Any]:
        return {"runs": self.runs, "distributed": self.distributed, "reduces": self.reduces}

    def grading_take(self, report: Any) -> None:
        for name in ("runs", "distributed", "reduces") if isinstance(report, dict) else ():
            setattr(self, name, getattr(self, name) + int(report.get(name, 0)))


def one_batch(values: Any) -> Any:
    """``values`` as a ``tf.data.Dataset`` of one global batch; it crosses to a grading kernel as
    its numbers (:func:`rebuild`)."""
    import tensorflow as tf

    array = np.asarray(values)
    dataset = tf.data.Dataset.from_tensor_slices(array).batch(len(array))
    dataset.grading_recipe = lambda: {"batch": array}
    return dataset


def rebuild(recipe: dict[str, Any]) -> Any:
    """In a grading kernel: the object a recipe describes (a :class:`Watched` strategy over this
    kernel's replicas, or :func:`one_batch`'s dataset); ``ValueError`` for any other recipe."""
    if set(recipe) == {"strategy"} and recipe["strategy"] in (1, 2, 4):
        from ..compare import checking_strategy

        return Watched(checking_strategy(int(recipe["strategy"])))
    if set(recipe) == {"batch"} and isinstance(recipe["batch"], np.ndarray):
        return one_batch(recipe["batch"])
    raise ValueError("a recipe the grader does not know")
