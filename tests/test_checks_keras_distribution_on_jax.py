"""The checks of notebook 11 pass on right answers and fail, with the right hint, on planted mistakes.

This session runs Keras on TensorFlow (tests/conftest.py), and Keras picks its backend once per
process: the answers are judged in one fresh process with ``KERAS_BACKEND=jax`` and 2 JAX CPU
devices, as in the notebook, which prints one line per answer (``pass`` or the hint).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
import pytest

from course_utils.lessons.keras_on_jax import use_jax_backend
from course_utils.processes import last_result, run_python

ROOT = Path(__file__).resolve().parents[1]
MASTER = ROOT / "solutions" / "11_keras_distribution_on_jax.ipynb"

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

from course_utils import compare
from course_utils.errors import ExerciseError
from course_utils.exercises import keras_distribution_on_jax as ex
from course_utils.processes import print_result

per_example = lambda y, logits: keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)


def layout(mesh_shape=(1, 2), keys=(".*up/kernel$", ".*down/kernel$"), up=(None, "model"), down=("model", None),
           axes=("batch", "model"), biases={".*up/bias$": ("model",)}):
    def tensor_parallel(devices):
        mesh = keras.distribution.DeviceMesh(mesh_shape, list(axes), devices=devices)
        layout_map = keras.distribution.LayoutMap(mesh)
        layout_map[keys[0]] = up
        layout_map[keys[1]] = down
        for key, bias in biases.items():
            layout_map[key] = bias
        return layout_map
    return tensor_parallel


def predicted(dp, mp):
    return {"DataParallel": dp, "ModelParallel": mp}


# The step's batch is 28 examples: logits 28 x 4 float32 = 448 bytes, x 28 x 8 = 896, y 28 int32 = 112.
RIGHT_DP, RIGHT_MP = {"all-reduce": 848}, {"all-reduce": 448}
COLLECTIVES = {
    "right": predicted(RIGHT_DP, RIGHT_MP),
    "spelled otherwise": predicted({"AllReduce": 4 * 212}, {"all_reduce": 4 * 28 * 4}),
    "floats": predicted({"all-reduce": 212}, RIGHT_MP),
    "batch": predicted({"all-reduce": 896}, RIGHT_MP),
    "batch and labels": predicted({"all-reduce": 1008}, RIGHT_MP),
    "activations": predicted({"all-reduce": 448}, RIGHT_MP),
    "half the gradients": predicted({"all-reduce": 424}, RIGHT_MP),
    "kernels only": predicted({"all-reduce": 768}, RIGHT_MP),
    "gather": predicted({"all-gather": 848}, RIGHT_MP),
    "nothing": predicted({}, RIGHT_MP),
    "mp gradients": predicted(RIGHT_DP, {"all-reduce": 848}),
    "mp down's gradient": predicted(RIGHT_DP, {"all-reduce": 256}),
    "mp floats": predicted(RIGHT_DP, {"all-reduce": 112}),
    "mp hidden": predicted(RIGHT_DP, {"all-reduce": 1792}),
    "mp half": predicted(RIGHT_DP, {"all-reduce": 224}),
    "mp batch": predicted(RIGHT_DP, {"all-reduce": 1008}),
    "mp forward and backward": predicted(RIGHT_DP, {"all-reduce": 896}),
    "mp input's gradient": predicted(RIGHT_DP, {"all-reduce": 1344}),
    "mp gather and scatter": predicted(RIGHT_DP, {"all-gather": 896, "reduce-scatter": 448}),
    "mp other": predicted(RIGHT_DP, {"all-reduce": 300}),
    "unknown kind": predicted(RIGHT_DP, {"broadcast": 448}),
    "not a dict": predicted(848, RIGHT_MP),
    "wrong keys": {"DataParallel": RIGHT_DP},
    "blank": predicted(None, None),
}


def blank(*args):
    raise NotImplementedError("Exercise: replace this line with your code")


ANSWERS = {
    "shard_batch right": (ex.check_shard_batch, lambda x, mesh: jax.device_put(x, NamedSharding(mesh, P("batch")))),
    "shard_batch numpy": (ex.check_shard_batch, lambda x, mesh: x),
    "shard_batch one device": (ex.check_shard_batch, lambda x, mesh: jax.device_put(x)),
    "shard_batch replicated": (ex.check_shard_batch, lambda x, mesh: jax.device_put(x, NamedSharding(mesh, P()))),
    "shard_batch features": (ex.check_shard_batch, lambda x, mesh: jax.device_put(x, NamedSharding(mesh, P(None, "batch")))),
    "shard_batch two dims": (ex.check_shard_batch, lambda x, mesh: jax.device_put(x, NamedSharding(mesh, P("batch", None)))),
    "shard_batch blank": (ex.check_shard_batch, blank),
    "port_loss right": (ex.check_port_loss, lambda y, logits: jnp.mean(per_example(y, logits))),
    "port_loss sum over len": (ex.check_port_loss, lambda y, logits: jnp.sum(per_example(y, logits)) / len(y)),
    "port_loss per-device batch": (ex.check_port_loss, lambda y, logits: jnp.sum(per_example(y, logits)) / (len(y) // 2)),
    "port_loss sum": (ex.check_port_loss, lambda y, logits: jnp.sum(per_example(y, logits))),
    "port_loss over devices": (ex.check_port_loss, lambda y, logits: jnp.mean(per_example(y, logits)) / 2),
    "port_loss 04's divisor": (ex.check_port_loss, lambda y, logits: jnp.sum(per_example(y, logits)) / (len(y) * 2)),
    "port_loss fixed 16": (ex.check_port_loss, lambda y, logits: jnp.sum(per_example(y, logits)) / 16),
    "port_loss per example": (ex.check_port_loss, lambda y, logits: per_example(y, logits)),
    "port_loss blank": (ex.check_port_loss, blank),
    "tensor_parallel right": (ex.check_tensor_parallel, layout()),
    "tensor_parallel anchored paths": (ex.check_tensor_parallel, layout(keys=("^block/up/kernel$", "^block/down/kernel$"))),
    "tensor_parallel both biases split": (ex.check_tensor_parallel, layout(biases={".*bias$": ("model",)})),
    "tensor_parallel biases whole": (ex.check_tensor_parallel, layout(biases={})),
    "tensor_parallel down bias replicated": (ex.check_tensor_parallel, layout(biases={".*up/bias$": ("model",), ".*down/bias$": (None,)})),
    "tensor_parallel up bias whole, down's split": (ex.check_tensor_parallel, layout(biases={".*down/bias$": ("model",)})),
    "tensor_parallel down's key matches both": (ex.check_tensor_parallel, layout(keys=(".*up/kernel$", ".*down.*$"))),
    "tensor_parallel search-only keys": (ex.check_tensor_parallel, layout(keys=("up/kernel", "down/kernel"))),
    "tensor_parallel unanchored end": (ex.check_tensor_parallel, layout(keys=(".*up/kernel", ".*down/kern"))),
    "tensor_parallel no model axis": (ex.check_tensor_parallel, layout(mesh_shape=(2, 1))),
    "tensor_parallel axes swapped": (ex.check_tensor_parallel, layout(axes=["model", "batch"])),
    "tensor_parallel rows first": (ex.check_tensor_parallel, layout(up=("model", None))),
    "tensor_parallel columns second": (ex.check_tensor_parallel, layout(down=(None, "model"))),
    "tensor_parallel nothing split": (ex.check_tensor_parallel, layout(up=(None, None), down=(None, None))),
    "tensor_parallel blank": (ex.check_tensor_parallel, blank),
    **{f"collectives {name}": (ex.check_collectives, prediction) for name, prediction in COLLECTIVES.items()},
}
outcome = {}
for name, (check, answer) in ANSWERS.items():
    try:
        check(answer)
        outcome[name] = "pass"
    except ExerciseError as error:
        outcome[name] = str(error)
devices = ex.two_devices()
with ex.same_footing(devices):  # jax_port_factor's truth, measured: the ported line's update / one device's
    one, _, _ = ex.train_update(None, steps=1)
    ported = lambda y, logits: jnp.sum(per_example(y, logits)) / (len(y) * len(devices))
    two, _, _ = ex.train_update(keras.distribution.DataParallel(devices=devices), loss_of=ported, steps=1)
print_result({"outcome": outcome, "tensorflow": "tensorflow" in sys.modules, "devices": len(jax.devices()),
              "ported factor": float(compare.factor(two, one))})
"""


@pytest.fixture(scope="module")
def judged() -> dict:
    result = run_python(ANSWERS, env={"KERAS_BACKEND": "jax", "XLA_FLAGS": ""}, timeout=600)
    assert result.ok, result.stderr[-2000:]
    data = last_result(result.stdout)
    assert data["devices"] == 2
    return data


#: The checks as a grader runs them: ``course_utils.exercises.UNSEEN`` set, each check drawing its data
#: and starting weights. The right answers on 3 draws, each wrong one on a draw of its own; then the
#: gap between 2 devices and one device on 8 draws (the float noise UPDATE_RTOL was measured on).
DRAWN = (
    ANSWERS.split("outcome = {}")[0]
    + r"""
import random

from course_utils import exercises

TRAINED = ("shard_batch", "port_loss", "tensor_parallel")
drawn = {}
for name, (check, answer) in ANSWERS.items():
    if not name.startswith(TRAINED):
        continue
    for seed in (3, 11, 29) if name.endswith(" right") else (5,):
        exercises.UNSEEN = random.Random(f"{seed}:{name}")
        try:
            check(answer)
            drawn[f"{name} {seed}"] = "pass"
        except ExerciseError as error:
            drawn[f"{name} {seed}"] = str(error)
        finally:
            exercises.UNSEEN = None
devices = ex.two_devices()
gaps, moved = [], []
with ex.same_footing(devices):
    notebook, _ = ex.one_device(2)
    megatron = keras.distribution.ModelParallel(layout_map=ex.megatron_layout(devices), batch_dim_name="batch")
    for seed in range(1, 9):
        one, _ = ex.one_device(2, seed)
        moved.append(float(compare.mismatch(one, notebook)))
        for distribution in (keras.distribution.DataParallel(devices=devices), megatron):
            two, _, _ = ex.train_update(distribution, seed=seed)
            gaps.append(float(compare.mismatch(two, one)))
print_result({"drawn": drawn, "gaps": gaps, "moved": moved})
"""
)


@pytest.fixture(scope="module")
def drawn() -> dict:
    result = run_python(DRAWN, env={"KERAS_BACKEND": "jax", "XLA_FLAGS": ""}, timeout=600)
    assert result.ok, result.stderr[-2000:]
    return last_result(result.stdout)


def test_right_answers_pass_on_data_drawn_at_grading_time(drawn: dict) -> None:
    for name in ("shard_batch right", "port_loss right", "tensor_parallel right"):
        for seed in (3, 11, 29):
            assert drawn["drawn"][f"{name} {seed}"] == "pass", (name, seed, drawn["drawn"][f"{name} {seed}"])
    assert drawn["drawn"]["port_loss sum over len 5"] == "pass"
    assert drawn["drawn"]["tensor_parallel anchored paths 5"] == "pass"


def test_wrong_answers_keep_their_hints_on_data_drawn_at_grading_time(drawn: dict) -> None:
    """Each wrong answer fails on a draw with the hint it gets in the notebook (the small batch and
    its classes are drawn too: the fixed divisor's hint names them)."""
    outcome = drawn["drawn"]
    _fails({"outcome": outcome}, "shard_batch numpy 5", "jax_shard_batch", "not a NumPy array")
    _fails({"outcome": outcome}, "shard_batch replicated 5", "jax_shard_batch", "whole batch (replicated)")
    _fails({"outcome": outcome}, "shard_batch features 5", "jax_shard_batch", "split the features")
    _fails({"outcome": outcome}, "shard_batch two dims 5", "jax_shard_batch", "1-D labels")
    _fails({"outcome": outcome}, "port_loss per-device batch 5", "jax_port_loss", "2.00x", "per-device batch")
    _fails({"outcome": outcome}, "port_loss sum 5", "jax_port_loss", "16x", "sum the per-example losses")
    _fails({"outcome": outcome}, "port_loss over devices 5", "jax_port_loss", "0.50x", "len(y) count?")
    _fails({"outcome": outcome}, "port_loss 04's divisor 5", "jax_port_loss", "0.50x", "len(y) count?")
    fixed = outcome["port_loss fixed 16 5"]
    assert (
        re.search(r"On \d+ examples of loss log [245] each", fixed) and "divisor is a fixed number" in fixed
    )
    assert "On 12 examples of loss log 3" not in fixed, fixed
    _fails({"outcome": outcome}, "port_loss per example 5", "jax_port_loss", "shape (16,)")
    _fails({"outcome": outcome}, "tensor_parallel rows first 5", "jax_tensor_parallel", "up/kernel's rows")
    _fails(
        {"outcome": outcome},
        "tensor_parallel columns second 5",
        "jax_tensor_parallel",
        "down/kernel's columns",
    )
    _fails({"outcome": outcome}, "tensor_parallel both biases split 5", "jax_tensor_parallel", "down's bias")
    _fails({"outcome": outcome}, "tensor_parallel search-only keys 5", "jax_tensor_parallel", "re.search")
    _fails({"outcome": outcome}, "tensor_parallel no model axis 5", "jax_tensor_parallel", "nothing is split")
    right = (
        "port_loss sum over len 5",
        "tensor_parallel anchored paths 5",
        "tensor_parallel down bias replicated 5",
    )
    wrong = [name for name in outcome if " right " not in name and name not in right]
    assert len(wrong) == 25 and all(outcome[n] != "pass" for n in wrong), [
        n for n in wrong if outcome[n] == "pass"
    ]


def test_drawn_data_move_the_update_and_stay_in_the_measured_noise(drawn: dict) -> None:
    """A draw trains from other data and weights (its update is not the notebook's), and 2 devices
    still match one device far inside UPDATE_RTOL (DataParallel and Megatron's layout, 8 draws)."""
    from course_utils.exercises.keras_distribution_on_jax import UPDATE_RTOL

    assert min(drawn["moved"]) > 0.1, drawn["moved"]
    assert max(drawn["gaps"]) < UPDATE_RTOL / 10, drawn["gaps"]


def _fails(judged: dict, name: str, exercise: str, *hints: str) -> None:
    message = judged["outcome"][name]
    assert message != "pass", f"{name} passed"
    assert message.startswith(f"Exercise {exercise}"), message
    assert "\n" not in message, message
    for hint in hints:
        assert hint in message, message


def test_the_checks_run_without_tensorflow(judged: dict) -> None:
    assert judged["tensorflow"] is False


@pytest.mark.parametrize(
    "name", ["shard_batch right", "port_loss right", "tensor_parallel right", "collectives right"]
)
def test_right_answers_pass(judged: dict, name: str) -> None:
    assert judged["outcome"][name] == "pass"


def test_other_right_answers_pass(judged: dict) -> None:
    assert judged["outcome"]["port_loss sum over len"] == "pass"
    assert judged["outcome"]["tensor_parallel anchored paths"] == "pass"
    assert judged["outcome"]["tensor_parallel down bias replicated"] == "pass"


def test_shard_batch_mistakes(judged: dict) -> None:
    _fails(judged, "shard_batch numpy", "jax_shard_batch", "not a NumPy array")
    _fails(judged, "shard_batch one device", "jax_shard_batch", "lives on 1 device", "NamedSharding")
    _fails(
        judged, "shard_batch replicated", "jax_shard_batch", "whole batch (replicated)", "splits no dimension"
    )
    _fails(judged, "shard_batch features", "jax_shard_batch", "split the features (dimension 1)")
    _fails(
        judged, "shard_batch two dims", "jax_shard_batch", "1-D labels", "name only the dimension you split"
    )
    _fails(judged, "shard_batch blank", "jax_shard_batch", "not done yet")


def test_port_loss_mistakes(judged: dict) -> None:
    _fails(judged, "port_loss per-device batch", "jax_port_loss", "2.00x", "per-device batch", "notebook 05")
    _fails(judged, "port_loss sum", "jax_port_loss", "16x", "sum the per-example losses")
    len_y = (
        "Your update is 0.50x one device's: inside a jitted step on global arrays, what does len(y) count?"
    )
    _fails(judged, "port_loss over devices", "jax_port_loss", len_y)
    _fails(judged, "port_loss 04's divisor", "jax_port_loss", len_y)
    _fails(
        judged,
        "port_loss fixed 16",
        "jax_port_loss",
        "On 12 examples of loss log 3 each, yours gives 0.8240",
        "your divisor is a fixed number",
    )
    _fails(judged, "port_loss per example", "jax_port_loss", "shape (16,)", "one number")
    _fails(judged, "port_loss blank", "jax_port_loss", "not done yet")


def test_tensor_parallel_mistakes(judged: dict) -> None:
    _fails(
        judged, "tensor_parallel search-only keys", "jax_tensor_parallel", "re.search", "re.fullmatch", ".*"
    )
    _fails(
        judged,
        "tensor_parallel down's key matches both",
        "jax_tensor_parallel",
        "The key '.*down.*$' gives block/down/bias (rank 1) a 2-D layout: end it with kernel$ or bias$.",
    )
    _fails(judged, "tensor_parallel unanchored end", "jax_tensor_parallel", "re.search", "end it with $")
    _fails(judged, "tensor_parallel no model axis", "jax_tensor_parallel", "nothing is split")
    _fails(judged, "tensor_parallel axes swapped", "jax_tensor_parallel", "nothing is split", "in that order")
    _fails(
        judged,
        "tensor_parallel rows first",
        "jax_tensor_parallel",
        "up/kernel's rows (dimension 0)",
        "columns",
    )
    _fails(
        judged,
        "tensor_parallel columns second",
        "jax_tensor_parallel",
        "down/kernel's columns",
        "rows (dimension 0)",
    )
    _fails(judged, "tensor_parallel nothing split", "jax_tensor_parallel", "block/up/kernel is not split")
    _fails(judged, "tensor_parallel blank", "jax_tensor_parallel", "not done yet")
    _fails(
        judged,
        "tensor_parallel biases whole",
        "jax_tensor_parallel",
        "block/up/bias is whole",
        "one dimension",
    )
    _fails(
        judged, "tensor_parallel up bias whole, down's split", "jax_tensor_parallel", "block/up/bias is whole"
    )
    _fails(
        judged,
        "tensor_parallel both biases split",
        "jax_tensor_parallel",
        "down's bias is added after the all-reduce",
        "keep it whole",
    )


def test_collectives_mistakes(judged: dict) -> None:
    assert judged["outcome"]["collectives spelled otherwise"] == "pass"
    ex = "jax_collectives"
    _fails(judged, "collectives floats", ex, "212 float32 values, not bytes")
    _fails(
        judged, "collectives batch", ex, "DataParallel", "the batch x, or the logits twice", "neither moves"
    )
    _fails(judged, "collectives batch and labels", ex, "size of the batch")
    _fails(judged, "collectives activations", ex, "activations, which stay on their device", "gradients")
    _fails(judged, "collectives half the gradients", ex, "gradient of EVERY weight")
    _fails(judged, "collectives kernels only", ex, "biases have gradients too")
    _fails(
        judged,
        "collectives gather",
        ex,
        "['all-gather'] under DataParallel, not the kinds",
        "leaves their sum",
    )
    _fails(judged, "collectives nothing", ex, "no collective under DataParallel")
    _fails(
        judged, "collectives mp gradients", ex, "DataParallel's all-reduce of the gradients", "partial sum"
    )
    _fails(judged, "collectives mp down's gradient", ex, "down's kernel", "no gradient crosses")
    _fails(judged, "collectives mp floats", ex, "112 float32 values")
    _fails(judged, "collectives mp hidden", ex, "hidden layer's activations")
    _fails(judged, "collectives mp half", ex, "partial sum of ALL 4 outputs of all 28")
    _fails(judged, "collectives mp batch", ex, "ModelParallel", "batch axis has 1 device")
    _fails(
        judged,
        "collectives mp forward and backward",
        ex,
        "x, or down's output twice",
        "only the forward pass",
    )
    _fails(
        judged, "collectives mp input's gradient", ex, "input is the data", "nothing asks for its gradient"
    )
    _fails(judged, "collectives mp gather and scatter", ex, "not the kinds XLA compiles", "partial sum")
    _fails(judged, "collectives mp other", ex, "300 bytes", "not the compiled step's count.")
    _fails(judged, "collectives unknown kind", ex, "'broadcast' is not a collective")
    _fails(judged, "collectives not a dict", ex, "should be a dict")
    _fails(judged, "collectives wrong keys", ex, "Set PREDICTION to a dict")
    _fails(judged, "collectives blank", ex, "not done yet")


def test_collectives_hints_never_give_the_count(judged: dict) -> None:
    """A failed prediction is told its mistake, not the compiled step's bytes: a second try could copy them."""
    told = [m for n, m in judged["outcome"].items() if n.startswith("collectives") and "You predicted" in m]
    assert len(told) >= 15
    for message in told:  # the student's own guess aside
        told_back = re.sub(r"You predicted (\S+ bytes|\[.*?\] under)", "", message)
        assert not re.search(r"\b(848|448)\b", told_back), message


def test_hints_never_give_the_answer(judged: dict) -> None:
    """A wrong answer is told its mistake, never the solution: no PartitionSpec or layout tuple, no
    divisor to write, no collective the student did not name."""
    for name, message in judged["outcome"].items():
        if message == "pass":
            continue
        if name.startswith(("shard_batch", "tensor_parallel")):
            assert not re.search(r'PartitionSpec\(|device_put\(|\("model"|\(None,|, None\)', message), message
        if name.startswith("port_loss"):
            assert not re.search(r"divide by len|take the mean|plain mean is right|/ len\(y\)", message), (
                message
            )
        if name.startswith("collectives") and "not the kinds" in message:
            said = message.split(" under ")[0]
            assert "all-reduce" in said or "all-reduce" not in message, message


def test_the_port_factor_is_what_the_ported_step_measures(judged: dict) -> None:
    """jax_port_factor's truth is the factor of the ported line in a jitted step on 2 devices."""
    from course_utils.exercises.keras_distribution_on_jax import PORTED_FACTOR

    assert abs(judged["ported factor"] - PORTED_FACTOR) < 1e-3


@pytest.mark.parametrize("right", [0.5, 1 / 2, 0.505])
def test_port_factor_right_answers_pass(right: float, capsys: pytest.CaptureFixture[str]) -> None:
    from course_utils.exercises import keras_distribution_on_jax as ex

    ex.check_port_factor(right)
    assert "[pass] jax_port_factor: 0.5x" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (2, "2x is notebook 05's per-replica mean"),
        (2.0, "where len(y) is one replica's examples"),
        (1, "1x is the plain mean's update"),
        (0.25, "You predicted 0.25x: inside a jitted step on global arrays, what does len(y) count?"),
        (0.52, "You predicted 0.52x"),
        (4, "You predicted 4x"),
        ("half", "Set PORT_FACTOR to one number"),
        (True, "Set PORT_FACTOR to one number"),
        (None, "not done yet"),
    ],
)
def test_port_factor_wrong_answers_fail_without_the_answer(wrong: object, hint: str) -> None:
    from course_utils.errors import ExerciseError
    from course_utils.exercises import keras_distribution_on_jax as ex

    with pytest.raises(ExerciseError, match="Exercise jax_port_factor") as error:
        ex.check_port_factor(wrong)
    message = str(error.value)
    assert hint in message and "\n" not in message, message
    assert not re.search(r"\b0\.50?\b|\bhalf\b(?! ')", message.replace("'half'", "")), message


def test_collectives_judged_where_keras_runs_on_tensorflow() -> None:
    """A grader's Keras runs on TensorFlow (as in this test process): the check compiles its reference
    steps in a fresh process with Keras on JAX, and judges alike."""
    import keras

    from course_utils.errors import ExerciseError
    from course_utils.exercises import keras_distribution_on_jax as ex

    assert keras.backend.backend() == "tensorflow"
    assert ex.reference_collectives() == {
        "DataParallel": {"all-reduce": 848},
        "ModelParallel": {"all-reduce": 448},
    }
    ex.check_collectives({"DataParallel": {"all-reduce": 848}, "ModelParallel": {"all-reduce": 448}})
    with pytest.raises(ExerciseError, match="212 float32 values, not bytes"):
        ex.check_collectives({"DataParallel": {"all-reduce": 212}, "ModelParallel": {"all-reduce": 448}})


def test_collectives_read_from_hlo_text() -> None:
    """Tuples count every array, an async start once (a gather's start: its result), a done never."""
    from course_utils.exercises.keras_distribution_on_jax import collectives_in, summed

    text = """
  %all-reduce.5 = (f32[], f32[16,8]{1,0}, /*index=5*/f32[4]{0}) all-reduce(%a, %b, %c), channel_id=1
  %ars = bf16[8]{0} all-reduce-start(%d), channel_id=2
  %ard = bf16[8]{0} all-reduce-done(%ars)
  %ags = (f32[16,2]{1,0}, f32[16,4]{1,0}) all-gather-start(%e), dimensions={1}
  %agd = f32[16,4]{1,0} all-gather-done(%ags)
  ROOT %rs = f32[4]{0} reduce-scatter(%f), dimensions={0}
  %fusion = f32[16]{0} fusion(%all-reduce.5), kind=kLoop
"""
    found = collectives_in(text)
    assert found[0] == ("all-reduce", 4 + 512 + 16, ["f32[]", "f32[16,8]", "f32[4]"])
    assert summed(found) == {"all-reduce": 4 + 512 + 16 + 16, "all-gather": 256, "reduce-scatter": 16}


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


# --------------------------------------------------------------------------- device counts
# The checks and the notebook's device cell choose their 2 devices and their one device by one rule;
# each branch is run here on JAX's CPU devices: 1 device (nothing to split), 2 (the CI's), 8 (a v5e-8:
# 2 of its 8), and a one-chip v5e-1 played by 3 CPU devices whose last one is "the chip", the
# platform's only device and JAX's default device: the lessons fall back to the first 2 CPU devices,
# and the one device of every comparison is the first of them, not the chip.

BRANCHES = r"""
from course_utils import config
from course_utils.lessons.keras_on_jax import setup_jax

setup_jax(config.load(), cpus=2, show_report=False)
import jax
import jax.numpy as jnp
import keras
import numpy as np

from course_utils.errors import ExerciseError
from course_utils.exercises import keras_distribution_on_jax as ex
from course_utils.processes import print_result

if ONE_CHIP:
    chip, all_devices = jax.devices("cpu")[-1], jax.devices
    jax.devices = lambda backend=None: [chip] if backend is None else all_devices(backend)
    jax.config.update("jax_default_device", chip)

per_example = lambda y, logits: keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
answers = {
    "right": lambda y, logits: jnp.mean(per_example(y, logits)),
    "per-device batch": lambda y, logits: jnp.sum(per_example(y, logits)) / (len(y) // 2),
}
outcome = {}
for name, answer in answers.items():
    try:
        ex.check_port_loss(answer)
        outcome[name] = "pass"
    except ExerciseError as error:
        outcome[name] = str(error)
result = {"outcome": outcome, "cpus": len(jax.devices("cpu"))}
try:
    devices = ex.two_devices()
    result["two"] = [d.id for d in devices]
    with ex.same_footing(devices):
        _, _, model = ex.train_update(None, steps=1)
        result["precision"] = jax.config.jax_default_matmul_precision
    result["one"] = sorted(d.id for d in model.trainable_variables[0].value.devices())
    result["precision after"] = jax.config.jax_default_matmul_precision
except ExerciseError as error:
    result["two"] = str(error)
namespace = {"jax": jax}
try:
    exec(CELL, namespace)
    result["notebook"] = {"two": [d.id for d in namespace["DEVICES"]], "one": jax.config.jax_default_device.id,
                          "precision": jax.config.jax_default_matmul_precision}
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3)])  # fit with no distribution
    model.compile(optimizer="sgd", loss="mse")
    model.fit(np.zeros((4, 8), "float32"), np.zeros((4, 3), "float32"), verbose=0)
    result["notebook"]["fit"] = sorted(d.id for d in model.trainable_variables[0].value.devices())
except AssertionError as error:
    result["notebook"] = str(error)
print_result(result)
"""


def _device_cell() -> str:
    cells = [c.source for c in nbformat.read(MASTER, as_version=4).cells if "DEVICES = (" in c.source]
    assert len(cells) == 1, "notebook 11 should choose its DEVICES in one cell"
    return cells[0]


def _branch(cpus: int, one_chip: bool = False) -> dict:
    code = f"ONE_CHIP = {one_chip}\nCELL = {_device_cell()!r}\n" + BRANCHES
    flags = f"--xla_force_host_platform_device_count={cpus}"
    result = run_python(code, env={"KERAS_BACKEND": "jax", "XLA_FLAGS": flags}, timeout=600)
    assert result.ok, result.stderr[-2000:]
    data = last_result(result.stdout)
    assert data["cpus"] == cpus
    return data


def _judged_on_two(data: dict) -> None:
    """Right passes; the per-device divisor is 2.00x: the checks compare 2 devices, whatever there are."""
    assert data["outcome"]["right"] == "pass"
    assert "2.00x" in data["outcome"]["per-device batch"], data["outcome"]


@pytest.mark.parametrize("cpus", [2, 8])
def test_two_or_more_devices_use_the_first_two(cpus: int) -> None:
    data = _branch(cpus)
    _judged_on_two(data)
    assert data["two"] == [0, 1] and data["one"] == [0]
    assert data["precision"] == "float32" and data["precision after"] is None  # set for the check only
    assert data["notebook"] == {"two": [0, 1], "one": 0, "precision": "float32", "fit": [0]}


def test_one_chip_falls_back_to_cpu_devices_on_both_sides() -> None:
    """A v5e-1: 2 CPU devices, and one device is the first of them, not the chip (JAX's default)."""
    data = _branch(3, one_chip=True)
    _judged_on_two(data)
    assert data["two"] == [0, 1]
    assert data["one"] == [0], "the checks' one device should be the first of the two, not the default"
    assert data["notebook"] == {"two": [0, 1], "one": 0, "precision": "float32", "fit": [0]}


def test_one_device_says_restart() -> None:
    data = _branch(1)
    for message in [*data["outcome"].values(), data["two"]]:
        assert "needs 2 JAX devices" in message and "\n" not in message, message
    assert re.search(r"needs 2 devices: restart the kernel", data["notebook"]), data["notebook"]


def test_the_tensorflow_figure_shown_without_tensorflow_is_notebook_05s() -> None:
    """Where TensorFlow is absent, notebook 11 shows notebook 05's stored factor: the same number."""
    from course_utils.lessons.keras_on_jax import NOTEBOOK_05_FACTOR

    nb05 = nbformat.read(ROOT / "solutions" / "05_loss_scaling_pitfalls.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in nb05.cells if c.cell_type == "code" for o in c.outputs)
    stored_05 = re.search(r"SGD : update on 2 replicas = (\S+)x the single-device update", text)
    assert stored_05
    assert NOTEBOOK_05_FACTOR == float(stored_05.group(1))


def test_the_report_knows_colab_without_a_google_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stack without TensorFlow may have no ``google`` package at all (make test-colab-tpu's has
    none), and there ``find_spec("google.colab")`` raises instead of answering None."""
    import importlib.util

    from course_utils.devices import in_colab

    def find_spec(name: str) -> None:  # as importlib's, where there is no `google` package
        if name.startswith("google."):
            raise ModuleNotFoundError("No module named 'google'")

    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert in_colab() is False
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab-20260801")
    assert in_colab() is True
