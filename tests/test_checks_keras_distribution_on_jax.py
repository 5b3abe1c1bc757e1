"""The checks of notebook 11 pass on right answers and fail, with the right hint, on planted mistakes.

This session runs Keras on TensorFlow (tests/conftest.py), and Keras picks its backend once per
process: the answers are judged in one fresh process with ``KERAS_BACKEND=jax`` and 2 JAX CPU
devices, as in the notebook, which prints one line per answer (``pass`` or the hint).
"""

from __future__ import annotations

import sys

import pytest

from course_utils.lessons.keras_on_jax import use_jax_backend
from course_utils.processes import last_result, run_python

ANSWERS = r"""
import os

from course_utils import config
from course_utils.lessons.keras_on_jax import setup_jax

setup_jax(config.load(), cpus=2, show_report=False)
import sys

import jax
import jax.numpy as jnp
import keras
from jax.sharding import NamedSharding, PartitionSpec as P

from course_utils.errors import ExerciseError
from course_utils.exercises import keras_distribution_on_jax as ex
from course_utils.processes import print_result

per_example = lambda y, logits: keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)


def layout(mesh_shape=(1, 2), keys=(".*up/kernel$", ".*down/kernel$"), up=(None, "model"), down=("model", None),
           axes=("batch", "model")):
    def tensor_parallel(devices):
        mesh = keras.distribution.DeviceMesh(mesh_shape, list(axes), devices=devices)
        layout_map = keras.distribution.LayoutMap(mesh)
        layout_map[keys[0]] = up
        layout_map[keys[1]] = down
        return layout_map
    return tensor_parallel


def blank(*args):
    raise NotImplementedError("Exercise: replace this line with your code")


ANSWERS = {
    "shard_batch right": (ex.check_shard_batch, lambda x, mesh: jax.device_put(x, NamedSharding(mesh, P("batch")))),
    "shard_batch numpy": (ex.check_shard_batch, lambda x, mesh: x),
    "shard_batch one device": (ex.check_shard_batch, lambda x, mesh: jax.device_put(x)),
    "shard_batch replicated": (ex.check_shard_batch, lambda x, mesh: jax.device_put(x, NamedSharding(mesh, P()))),
    "shard_batch features": (ex.check_shard_batch, lambda x, mesh: jax.device_put(x, NamedSharding(mesh, P(None, "batch")))),
    "shard_batch blank": (ex.check_shard_batch, blank),
    "port_loss right": (ex.check_port_loss, lambda y, logits: jnp.mean(per_example(y, logits))),
    "port_loss sum over len": (ex.check_port_loss, lambda y, logits: jnp.sum(per_example(y, logits)) / len(y)),
    "port_loss per-device batch": (ex.check_port_loss, lambda y, logits: jnp.sum(per_example(y, logits)) / (len(y) // 2)),
    "port_loss sum": (ex.check_port_loss, lambda y, logits: jnp.sum(per_example(y, logits))),
    "port_loss over devices": (ex.check_port_loss, lambda y, logits: jnp.mean(per_example(y, logits)) / 2),
    "port_loss per example": (ex.check_port_loss, lambda y, logits: per_example(y, logits)),
    "port_loss blank": (ex.check_port_loss, blank),
    "tensor_parallel right": (ex.check_tensor_parallel, layout()),
    "tensor_parallel anchored paths": (ex.check_tensor_parallel, layout(keys=("^block/up/kernel$", "^block/down/kernel$"))),
    "tensor_parallel search-only keys": (ex.check_tensor_parallel, layout(keys=("up/kernel", "down/kernel"))),
    "tensor_parallel unanchored end": (ex.check_tensor_parallel, layout(keys=(".*up/kernel", ".*down/kern"))),
    "tensor_parallel no model axis": (ex.check_tensor_parallel, layout(mesh_shape=(2, 1))),
    "tensor_parallel axes swapped": (ex.check_tensor_parallel, layout(axes=["model", "batch"])),
    "tensor_parallel rows first": (ex.check_tensor_parallel, layout(up=("model", None))),
    "tensor_parallel columns second": (ex.check_tensor_parallel, layout(down=(None, "model"))),
    "tensor_parallel nothing split": (ex.check_tensor_parallel, layout(up=(None, None), down=(None, None))),
    "tensor_parallel blank": (ex.check_tensor_parallel, blank),
}
outcome = {}
for name, (check, answer) in ANSWERS.items():
    try:
        check(answer)
        outcome[name] = "pass"
    except ExerciseError as error:
        outcome[name] = str(error)
print_result({"outcome": outcome, "tensorflow": "tensorflow" in sys.modules, "devices": len(jax.devices())})
"""


@pytest.fixture(scope="module")
def judged() -> dict:
    result = run_python(ANSWERS, env={"KERAS_BACKEND": "jax", "XLA_FLAGS": ""}, timeout=600)
    assert result.ok, result.stderr[-2000:]
    data = last_result(result.stdout)
    assert data["devices"] == 2
    return data


def _fails(judged: dict, name: str, exercise: str, *hints: str) -> None:
    message = judged["outcome"][name]
    assert message != "pass", f"{name} passed"
    assert message.startswith(f"Exercise {exercise}"), message
    assert "\n" not in message, message
    for hint in hints:
        assert hint in message, message


def test_the_checks_run_without_tensorflow(judged: dict) -> None:
    assert judged["tensorflow"] is False


@pytest.mark.parametrize("name", ["shard_batch right", "port_loss right", "tensor_parallel right"])
def test_right_answers_pass(judged: dict, name: str) -> None:
    assert judged["outcome"][name] == "pass"


def test_other_right_answers_pass(judged: dict) -> None:
    assert judged["outcome"]["port_loss sum over len"] == "pass"
    assert judged["outcome"]["tensor_parallel anchored paths"] == "pass"


def test_shard_batch_mistakes(judged: dict) -> None:
    _fails(judged, "shard_batch numpy", "jax_shard_batch", "not a NumPy array")
    _fails(judged, "shard_batch one device", "jax_shard_batch", "lives on 1 device", "NamedSharding")
    _fails(
        judged,
        "shard_batch replicated",
        "jax_shard_batch",
        "whole batch (replicated)",
        'PartitionSpec("batch")',
    )
    _fails(judged, "shard_batch features", "jax_shard_batch", "split the features")
    _fails(judged, "shard_batch blank", "jax_shard_batch", "not done yet")


def test_port_loss_mistakes(judged: dict) -> None:
    _fails(judged, "port_loss per-device batch", "jax_port_loss", "2.00x", "per-device batch")
    _fails(judged, "port_loss sum", "jax_port_loss", "16x", "sum the per-example losses")
    _fails(judged, "port_loss over devices", "jax_port_loss", "0.50x", "number of devices")
    _fails(judged, "port_loss per example", "jax_port_loss", "shape (16,)", "one number")
    _fails(judged, "port_loss blank", "jax_port_loss", "not done yet")


def test_tensor_parallel_mistakes(judged: dict) -> None:
    _fails(
        judged, "tensor_parallel search-only keys", "jax_tensor_parallel", "re.search", "re.fullmatch", ".*"
    )
    _fails(judged, "tensor_parallel unanchored end", "jax_tensor_parallel", "re.search", "end it with $")
    _fails(judged, "tensor_parallel no model axis", "jax_tensor_parallel", "nothing is split")
    _fails(judged, "tensor_parallel axes swapped", "jax_tensor_parallel", "nothing is split", "in that order")
    _fails(judged, "tensor_parallel rows first", "jax_tensor_parallel", "by columns")
    _fails(judged, "tensor_parallel columns second", "jax_tensor_parallel", "by rows")
    _fails(judged, "tensor_parallel nothing split", "jax_tensor_parallel", "block/up/kernel is not split")
    _fails(judged, "tensor_parallel blank", "jax_tensor_parallel", "not done yet")


def test_the_backend_is_set_before_keras_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The set-up of notebook 11 sets KERAS_BACKEND and keeps an XLA flag that is already there."""
    monkeypatch.delitem(sys.modules, "keras", raising=False)  # as before Keras is imported
    env: dict[str, str] = {"XLA_FLAGS": "--xla_cpu_enable_fast_math=false"}
    use_jax_backend(2, env)
    assert env["KERAS_BACKEND"] == "jax"
    assert env["XLA_FLAGS"] == "--xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=2"
    use_jax_backend(4, env)  # a count already asked for is kept: JAX reads it once
    assert env["XLA_FLAGS"].count("device_count") == 1


def test_keras_started_on_another_backend_says_restart() -> None:
    """This session's Keras runs on TensorFlow: asking for JAX now is one line that says restart."""
    import keras  # noqa: F401 - started by the session on TensorFlow

    from course_utils.errors import ConfigError

    with pytest.raises(ConfigError, match="restart the kernel"):
        use_jax_backend(2, {})
