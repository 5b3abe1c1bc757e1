"""get_strategy for every kind, describe, virtual CPUs and their errors; every kind of
COURSE_STRATEGY has a builder, words and a README row."""

from __future__ import annotations

import re

import pytest

import course_utils
from course_utils import config
from course_utils.errors import ConfigError, NoTPUError, ReplicaCountError, last_error_line
from course_utils.processes import run_python


@pytest.fixture
def course_env(monkeypatch):
    """Set COURSE_* variables for one test; the settings are read again, as a re-run set-up cell
    reads them (the kept settings come back after the test)."""

    def apply(**values: str | None) -> None:
        for name, value in values.items():
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        monkeypatch.setattr(config, "_kept", None)

    return apply


@pytest.mark.parametrize(
    "kind, name, replicas",
    [
        ("default", "default strategy", 1),
        ("one_device", "OneDeviceStrategy", 1),
        ("mirrored", "MirroredStrategy", 2),
        ("central_storage", "CentralStorageStrategy", 2),
        ("multi_worker", "MultiWorkerMirroredStrategy", 1),
    ],
)
def test_every_kind_that_runs_on_a_cpu(kind: str, name: str, replicas: int, capsys) -> None:
    strategy = course_utils.get_strategy(
        kind, replicas=2 if kind in {"mirrored", "central_storage"} else None
    )
    assert strategy.num_replicas_in_sync == replicas
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"Strategy: {name} with {replicas} replica")
    info = course_utils.describe(strategy, show=False)
    assert info.name == name and info.replicas == replicas


def test_mirrored_on_cpus_uses_tensorflows_own_all_reduce() -> None:
    """The course's CPU strategy is what tf.distribute.MirroredStrategy() gives: a collective
    all-reduce, which is the one that meets keras-team/keras#23085 as a student's code does."""
    import tensorflow as tf

    strategy = course_utils.get_strategy("mirrored", replicas=2, verbose=False)
    info = course_utils.describe(strategy, show=False)
    plain = course_utils.describe(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]), show=False)
    assert info.cross_device_ops == plain.cross_device_ops == "CollectiveAllReduce"
    assert info.variable_type == "MirroredVariable"
    assert info.variable_devices == ("CPU:0", "CPU:1")


def test_all_reduce_ops_reads_what_each_cross_device_ops_puts_in_a_step() -> None:
    import tensorflow as tf

    cpus = ["/cpu:0", "/cpu:1"]
    ring = ["CollectiveReduceV2 (ring) on CPU:0", "CollectiveReduceV2 (ring) on CPU:1"]
    assert (
        course_utils.all_reduce_ops(course_utils.get_strategy("mirrored", replicas=2, verbose=False)) == ring
    )
    to_one = tf.distribute.MirroredStrategy(cpus, cross_device_ops=tf.distribute.ReductionToOneDevice())
    assert course_utils.all_reduce_ops(to_one) == ["AddN on CPU:0"]
    nccl = tf.distribute.MirroredStrategy(cpus, cross_device_ops=tf.distribute.NcclAllReduce())
    assert course_utils.all_reduce_ops(nccl) == ["NcclAllReduce on CPU:0", "NcclAllReduce on CPU:1"]
    assert course_utils.all_reduce_ops(tf.distribute.OneDeviceStrategy("/cpu:0")) == []


def test_central_storage_keeps_variables_on_one_device() -> None:
    info = course_utils.describe(course_utils.get_strategy("central_storage", verbose=False), show=False)
    assert info.variable_devices == ("CPU:0",)
    assert info.devices == ("CPU:0", "CPU:1")


def test_auto_without_accelerator_or_settings_is_two_replicas(course_env, capsys) -> None:
    course_env(COURSE_REPLICAS=None)
    strategy = course_utils.get_strategy("auto")
    assert type(strategy).__name__ == "MirroredStrategy" and strategy.num_replicas_in_sync == 2
    line = capsys.readouterr().out.strip()
    assert line == (
        "Strategy: MirroredStrategy with 2 replicas on CPU:0, CPU:1 "
        "(auto: no TPU or GPU, so 2 virtual CPUs; COURSE_REPLICAS=1 for one device)"
    )


def test_auto_with_one_replica_is_the_default_strategy(course_env, capsys) -> None:
    course_env(COURSE_REPLICAS="1")
    strategy = course_utils.get_strategy("auto")
    assert strategy is __import__("tensorflow").distribute.get_strategy()
    assert "COURSE_REPLICAS=1: one device" in capsys.readouterr().out


def test_auto_follows_the_chain_of_notebook_06(monkeypatch) -> None:
    """auto asks hardware.plan_hardware, the chain notebook 06 prints, and builds its plan."""
    from course_utils import hardware

    seen = []
    real = hardware.plan_hardware
    monkeypatch.setattr(hardware, "plan_hardware", lambda **kw: seen.append(kw) or real(**kw))
    hardware.get_strategy("auto", verbose=False)
    assert seen and seen[0]["find_tpu"] is hardware.find_tpu_if_hinted


def test_multi_worker_without_tf_config_says_single_worker(monkeypatch, capsys) -> None:
    monkeypatch.delenv("TF_CONFIG", raising=False)
    course_utils.get_strategy("multi_worker")
    assert "no TF_CONFIG: a single worker" in capsys.readouterr().out


def test_auto_with_replicas_is_mirrored(course_env) -> None:
    course_env(COURSE_REPLICAS="2")
    strategy = course_utils.get_strategy(verbose=False)
    assert type(strategy).__name__ == "MirroredStrategy"
    assert strategy.num_replicas_in_sync == 2


def test_environment_kind_is_used(course_env) -> None:
    course_env(COURSE_STRATEGY="one_device")
    assert type(course_utils.get_strategy(verbose=False)).__name__ == "OneDeviceStrategy"


def test_unknown_kind_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="Choose one of"):
        course_utils.get_strategy("gpu")


def test_bad_replica_argument() -> None:
    with pytest.raises(ConfigError):
        course_utils.get_strategy("mirrored", replicas=0)


def test_tpu_without_tpu_says_what_was_tried() -> None:
    with pytest.raises(NoTPUError) as info:
        course_utils.get_strategy("tpu", verbose=False)
    assert "TPUClusterResolver(tpu='local')" in str(info.value)
    assert "A Colab TPU runtime has no TensorFlow: notebook 06 installs" in str(info.value)


def test_use_virtual_cpus_same_count_is_a_no_op() -> None:
    assert course_utils.use_virtual_cpus(2) == ["/device:CPU:0", "/device:CPU:1"]
    assert course_utils.use_virtual_cpus(2) == ["/device:CPU:0", "/device:CPU:1"]


def test_use_virtual_cpus_other_count_after_start_says_restart() -> None:
    with pytest.raises(ReplicaCountError) as info:
        course_utils.use_virtual_cpus(4)
    message = str(info.value)
    assert "already started with 2 CPU devices" in message
    assert "Restart the kernel" in message


def test_mirrored_more_replicas_than_cpus_after_start_says_restart() -> None:
    with pytest.raises(ReplicaCountError):
        course_utils.get_strategy("mirrored", replicas=3)


@pytest.mark.parametrize("bad", [0, -1, 2.0, "2", True])
def test_use_virtual_cpus_rejects_bad_counts(bad) -> None:
    with pytest.raises(ConfigError):
        course_utils.use_virtual_cpus(bad)


def test_virtual_cpus_before_start_can_change_and_env_replicas_apply() -> None:
    """In a fresh TensorFlow the count can change until devices start; setup() honours COURSE_REPLICAS."""
    result = run_python(
        """
        import course_utils
        course_utils.setup(show_report=False)
        import tensorflow as tf
        course_utils.use_virtual_cpus(3)
        course_utils.use_virtual_cpus(4)
        s = course_utils.get_strategy("auto", verbose=False)
        print(s.num_replicas_in_sync, len(tf.config.list_logical_devices("CPU")))
        """,
        replicas=4,
    )
    assert result.ok, result.stderr[-2000:]
    assert result.stdout.split() == ["4", "4"]


def test_setup_splits_two_cpus_by_default_and_stops_at_once_without_a_tpu() -> None:
    """No settings: setup() splits the CPU in two. COURSE_STRATEGY=tpu: setup says "No TPU"."""
    result = run_python(
        """
        import os
        os.environ.pop("COURSE_REPLICAS", None); os.environ.pop("COURSE_STRATEGY", None)
        import course_utils
        course_utils.setup(show_report=False)
        import tensorflow as tf
        print(len(tf.config.list_logical_devices("CPU")))
        """
    )
    assert result.ok, result.stderr[-2000:]
    assert result.stdout.split() == ["2"]
    result = run_python("import course_utils; course_utils.setup()", env={"COURSE_STRATEGY": "tpu"})
    assert not result.ok
    assert "NoTPUError: No TPU found" in last_error_line(result.stderr)


def test_bad_environment_in_setup_is_one_clear_line() -> None:
    result = run_python("import course_utils; course_utils.setup()", env={"COURSE_REPLICAS": "zero"})
    assert not result.ok
    assert last_error_line(result.stderr).startswith(
        "course_utils.errors.ConfigError: COURSE_REPLICAS='zero'"
    )


@pytest.mark.parametrize(
    ("replicas", "available", "expected"), [(1, 2, 2), (2, 2, 1), (4, 2, 1), (2, 8, 4), (3, 8, 2)]
)
def test_threads_per_replica_divides_the_cores(replicas, available, expected) -> None:
    from course_tools.bench.threads import threads_per_replica

    assert threads_per_replica(replicas, available) == expected


def test_threads_per_replica_rejects_bad_counts() -> None:
    from course_tools.bench.threads import threads_per_replica
    from course_utils.devices import cores

    with pytest.raises(ConfigError):
        threads_per_replica(0)
    assert threads_per_replica(1) == cores() >= 1


def test_use_op_threads_after_start_says_restart() -> None:
    from course_tools.bench.threads import use_op_threads
    from course_utils.errors import TensorFlowStartedError

    with pytest.raises(ConfigError):
        use_op_threads(0)
    with pytest.raises(TensorFlowStartedError) as info:
        use_op_threads(7)
    assert "Restart the kernel" in str(info.value)
    assert "use_op_threads(7)" in str(info.value)


def test_use_op_threads_before_start_sets_the_intra_op_pool() -> None:
    result = course_utils.run_python(
        """
        from course_tools.bench.threads import use_op_threads
        use_op_threads(1)
        use_op_threads(1)  # the same value again does nothing
        import tensorflow as tf
        print("threads", tf.config.threading.get_intra_op_parallelism_threads(), float(tf.constant(2.0) * 2))
        """,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-500:]
    assert "threads 1 4.0" in result.stdout


def test_mirrored_cpus_uses_the_first_virtual_cpus() -> None:
    from course_utils.strategies import mirrored_cpus

    assert mirrored_cpus(2).num_replicas_in_sync == 2
    one = mirrored_cpus(1)
    assert one.num_replicas_in_sync == 1
    assert [d.upper() for d in one.extended.worker_devices] == [
        "/JOB:LOCALHOST/REPLICA:0/TASK:0/DEVICE:CPU:0"
    ]
    with pytest.raises(ReplicaCountError) as info:
        mirrored_cpus(3, needed_by="The demo")
    assert "The demo needs 3 replicas, but TensorFlow has 2 CPU devices" in str(info.value)
    assert "course_utils.setup(cpus=3)" in str(info.value) and "use_virtual_cpus(3)" in str(info.value)


def test_mirrored_cpus_never_splits_the_cpu() -> None:
    """Only the set-up cell splits: before it, mirrored_cpus(2) says what to do and TensorFlow
    still has one CPU; after setup(cpus=4), under a strategy of one device, there are 4."""
    result = run_python(
        """
        import course_utils
        from course_utils.strategies import mirrored_cpus
        from course_utils.devices import cpu_count
        try:
            mirrored_cpus(2, needed_by="The check")
        except course_utils.ReplicaCountError as error:
            print("refused:", cpu_count(), "setup(cpus=2)" in str(error))
        course_utils.setup(cpus=4, show_report=False)
        import tensorflow as tf
        print("split:", len(tf.config.list_logical_devices("CPU")), mirrored_cpus(4).num_replicas_in_sync,
              course_utils.get_strategy(verbose=False).num_replicas_in_sync)
        """,
        env={"COURSE_STRATEGY": "default", "COURSE_REPLICAS": ""},
    )
    assert result.ok, last_error_line(result.stderr)
    assert result.stdout.splitlines() == ["refused: 1 True", "split: 4 4 1"]


@pytest.mark.parametrize("bad", [0, -2, 2.5, "4", True])
def test_setup_refuses_a_bad_cpu_count(bad) -> None:
    with pytest.raises(ConfigError, match=r"setup\(cpus=\.\.\.\) needs a whole number"):
        course_utils.setup(cpus=bad, show_report=False)


def test_mirrored_cpus_is_one_strategy_per_count_and_all_reduce() -> None:
    """Two MirroredStrategy objects over the same devices number their collectives from the same
    keys; the course hands back the one it made, so re-running a cell cannot make a second."""
    from course_utils.strategies import mirrored_cpus

    assert mirrored_cpus(2) is mirrored_cpus(2)
    rotd = mirrored_cpus(2, all_reduce="one_device")
    assert rotd is not mirrored_cpus(2)
    assert course_utils.describe(rotd, show=False).cross_device_ops == "ReductionToOneDevice"
    with pytest.raises(ConfigError, match="all_reduce must be one of"):
        mirrored_cpus(2, all_reduce="nccl")


@pytest.mark.xfail(
    strict=True,
    reason="Model.fit with steps_per_execution > 1 fails on a collective "
    "MirroredStrategy over virtual CPUs (TF 2.21, Keras 3.15): an upgrade that fixes it "
    "makes this test pass, and then the benchmark can drop ReductionToOneDevice",
)
def test_fit_with_steps_per_execution_on_the_collective_strategy() -> None:
    # In a fresh process: a failed collective aborts every later collective of its process.
    result = run_python(
        """
        import course_utils, keras, numpy as np, tensorflow as tf
        from course_utils.strategies import mirrored_cpus
        course_utils.setup(show_report=False)
        strategy = mirrored_cpus(2)
        with strategy.scope():
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
            model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                          steps_per_execution=4)
        x, y = np.random.rand(256, 4).astype("float32"), np.random.randint(0, 2, 256)
        model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(32), epochs=1, verbose=0)
        """
    )
    assert result.ok, last_error_line(result.stderr)


def test_the_courses_strategy_and_a_students_own_do_not_share_collective_keys() -> None:
    """Two MirroredStrategy objects over the same CPUs: with TensorFlow's default keys the second
    all-reduce of another shape aborts; the course's strategy has keys of its own."""
    code = """
        import sys, course_utils, tensorflow as tf
        from course_utils.strategies import mirrored_cpus
        course_utils.setup(show_report=False)
        own = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        other = mirrored_cpus(2) if sys.argv[-1] == "course" else tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        def three(): return tf.distribute.get_replica_context().all_reduce("sum", tf.ones([3]))
        def ten(): return tf.distribute.get_replica_context().all_reduce("sum", tf.ones([5, 2]))
        tf.function(lambda: own.run(three))()
        tf.function(lambda: other.run(ten))()
        print("no clash")
        """
    course = run_python(code.replace('sys.argv[-1] == "course"', "True"))
    assert course.ok and course.stdout.strip() == "no clash", last_error_line(course.stderr)
    plain = run_python(code.replace('sys.argv[-1] == "course"', "False"))
    assert not plain.ok and "collective instance" in plain.stderr.lower()


def test_setup_re_run_after_a_notebook_split_into_more_cpus() -> None:
    """Notebook 10's set-up splits into 4 virtual CPUs and trains on 2 by default; re-running the
    set-up cell (with or without its count) must work, and so must a later split into more."""
    result = run_python(
        """
        import course_utils
        course_utils.setup(cpus=4, show_report=False)
        import tensorflow as tf
        tf.constant(1.0)
        course_utils.setup(cpus=4, show_report=False)
        course_utils.setup(show_report=False)
        print(course_utils.get_strategy(verbose=False).num_replicas_in_sync, len(tf.config.list_logical_devices("CPU")))
        """,
        env={"COURSE_STRATEGY": "auto", "COURSE_REPLICAS": ""},
    )
    assert result.ok, last_error_line(result.stderr)
    assert result.stdout.split() == ["2", "4"]


# --------------------------------------------------------------------------- one row per kind


def test_every_kind_has_a_builder_words_and_a_readme_row(root) -> None:
    """Adding a kind to config.STRATEGY_KINDS is one row of strategies.STRATEGIES (its builder and
    name) and one row of the README's strategy table: this test names whichever is missing."""
    from course_utils.config import STRATEGY_KINDS
    from course_utils.hardware import choose
    from course_utils.strategies import STRATEGIES, in_words

    readme = (root / "README.md").read_text()
    missing = [
        f"README.md: a row | `{k}` | in the strategy table"
        for k in STRATEGY_KINDS
        if not re.search(rf"^\| `{k}` \|", readme, re.M)
    ]
    missing += [
        f"strategies.STRATEGIES: a row for {k!r}"
        for k in STRATEGY_KINDS
        if k != "auto" and k not in STRATEGIES
    ]
    missing += [f"config.STRATEGY_KINDS: {k!r}" for k in STRATEGIES if k not in STRATEGY_KINDS]
    assert missing == []
    for kind, row in STRATEGIES.items():
        assert row.spread in {"one", "many", "own"} and callable(row.build), kind
        words = in_words(choose(kind, 2, connect=False))
        assert row.name in words, (kind, words)


@pytest.mark.parametrize(
    "kind, words",
    [
        (
            "auto",
            "MirroredStrategy over 2 virtual CPUs (auto: no TPU or GPU, so 2 virtual CPUs; COURSE_REPLICAS=1 for one device)",
        ),
        ("default", "the default strategy on the CPU"),
        ("one_device", "OneDeviceStrategy on /cpu:0"),
        ("mirrored", "MirroredStrategy over 2 virtual CPUs"),
        ("central_storage", "CentralStorageStrategy over 2 virtual CPUs"),
        (
            "multi_worker",
            "MultiWorkerMirroredStrategy on a single worker (no TF_CONFIG: a single worker; notebook 07 starts a real cluster)",
        ),
        ("tpu", "TPUStrategy over the TPU's cores"),
    ],
)
def test_the_choice_in_words_before_and_after_building(kind, words, monkeypatch) -> None:
    """One function says what was chosen: the runtime report's line, the plan's, get_strategy's."""
    from course_utils.hardware import choose
    from course_utils.strategies import in_words

    monkeypatch.delenv("TF_CONFIG", raising=False)
    choice = choose(kind, 2, connect=False)
    assert in_words(choice, reason=True) == words
    if kind not in {"tpu", "auto"}:
        built = course_utils.get_strategy(kind, replicas=2, verbose=False)
        n = built.num_replicas_in_sync
        assert in_words(choice, built).startswith(f"{words.split(' ')[0 if kind != 'default' else 1]}")
        assert f"with {n} replica" in in_words(choice, built)
