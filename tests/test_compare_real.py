"""course_utils.compare on steps taken from public guides and projects, adapted minimally: for each
trap a right twin (passes, no false alarm) and a wrong twin (fails with the hint that names it).

Sources (each test names its own): the TensorFlow tutorial "Custom training with
tf.distribute.Strategy" (the per-replica step every twin starts from), keras.io "Simple MNIST convnet"
(Dropout), the Keras BatchNormalization docs (``synchronized``), keras.io "Natural language image
search with a Dual Encoder" (a loss over the batch's similarity matrix), Hugging Face transformers'
TensorFlow ``GradientAccumulator`` pattern (micro-batches), keras.io "End-to-end Masked Language
Modeling with BERT" (a loss over masked tokens, with label smoothing), TensorFlow's "Mixed precision"
guide (a custom loop with ``LossScaleOptimizer``), keras.io "Customizing what happens in fit() with
TensorFlow" and "Knowledge Distillation" (``train_step`` overrides that ``fit`` runs).
Runs on the test process's 2 virtual CPUs (replicas 1 and 2).
"""

from __future__ import annotations

import numpy as np
import pytest

from course_utils import compare

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

FEATURES, CLASSES, GLOBAL_BATCH, STEPS = 8, 3, 16, 2


def _tf():
    from course_utils.runtime import import_tensorflow

    return import_tensorflow()


def data(seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(GLOBAL_BATCH * STEPS, FEATURES)).astype("float32")
    y = rng.integers(0, CLASSES, size=GLOBAL_BATCH * STEPS).astype("int32")
    return x, y


def model_with(*middle: str, sync: bool = False, policy=None):
    """Dense(16, relu) -> the named layers ("dropout", "batchnorm") -> Dense(CLASSES)."""

    def make_model():
        import keras

        init = keras.initializers.GlorotUniform(seed=0)
        layers = [
            keras.Input((FEATURES,)),
            keras.layers.Dense(16, "relu", kernel_initializer=init, dtype=policy),
        ]
        for name in middle:
            if name == "dropout":  # keras.io "Simple MNIST convnet": Dropout(0.5) before the classifier
                layers.append(keras.layers.Dropout(0.5))
            if name == "batchnorm":
                layers.append(keras.layers.BatchNormalization(synchronized=sync))
        layers.append(keras.layers.Dense(CLASSES, kernel_initializer=init, dtype=policy))
        if policy:  # the mixed-precision guide: the model's outputs in float32
            layers.append(keras.layers.Activation("linear", dtype="float32"))
        return keras.Sequential(layers)

    return make_model


def tutorial_step(*, reduce="global", scale_on_replicas=1.0, metric="labels", loss_scale_optimizer=False):
    """The custom-training tutorial's per-replica step (``compute_average_loss``)."""
    tf = _tf()

    def make_train_step(model, optimizer, metric_object, global_batch_size):
        import keras

        loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

        def train_step(inputs):
            x, y = inputs
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                per_example = loss_object(y, logits)
                if reduce == "global":
                    loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
                else:
                    loss = tf.reduce_mean(per_example)
                if tf.distribute.get_replica_context().num_replicas_in_sync > 1:
                    loss = loss * scale_on_replicas
                scaled = optimizer.scale_loss(loss) if loss_scale_optimizer else loss
            grads = tape.gradient(scaled, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            if metric == "labels":
                metric_object.update_state(y, logits)
            elif metric == "share and labels":  # a Mean of the scaled share beside a right accuracy
                metric_object[0].update_state(y, logits)
                metric_object[1].update_state(loss)
            return loss

        return train_step

    return make_train_step


def accuracy():
    import keras

    return keras.metrics.SparseCategoricalAccuracy()


def same(make_train_step, make_model=None, **kwargs):
    options = dict(make_model=make_model or model_with(), make_metric=accuracy, replicas=(1, 2))
    options.update(kwargs)
    return compare.same_update(make_train_step, *data(), **options)


def passes(result) -> None:
    assert result.ok, f"{result}\n{result.hint}"


def caught(result, *needles: str) -> None:
    assert not result.ok, str(result)
    for needle in needles:
        assert needle in result.hint, result.hint


# --------------------------------------------------------------------------- randomness


def test_dropout_right_step_passes_with_a_note() -> None:
    """keras.io "Simple MNIST convnet" puts Dropout(0.5) before the classifier: each replica draws
    masks for its own examples, so the update can never equal one device's; before, a right step got
    "each replica normalizes its loss by something of its own"."""
    result = same(tutorial_step(), model_with("dropout"))
    passes(result)
    assert any("rate 0" in note for note in result.notes), result.notes


def test_dropout_does_not_hide_a_real_bug() -> None:
    caught(
        same(tutorial_step(reduce="mean"), model_with("dropout")), "2.00x", "averages over its own examples"
    )


def test_a_step_that_draws_its_own_random_numbers_is_said_to_be_random() -> None:
    tf = _tf()
    inner = tutorial_step()

    def make_train_step(model, optimizer, metric, global_batch_size):
        step = inner(model, optimizer, metric, global_batch_size)

        def noisy(inputs):  # input noise as data augmentation, drawn in the step
            x, y = inputs
            return step((x + tf.random.normal(tf.shape(x), stddev=0.1), y))

        return noisy

    caught(same(make_train_step), "the step is random")


# --------------------------------------------------------------------------- batch-wide terms


def test_batchnorm_per_replica_statistics_are_named() -> None:
    """Keras's BatchNormalization docs: ``synchronized=True`` "synchronizes the global batch
    statistics (mean and variance) for the layer across all devices at each training step in a
    distributed training strategy"; without it each replica normalizes by its own examples."""
    caught(same(tutorial_step(), model_with("batchnorm")), "BatchNormalization", "synchronized=True")
    passes(same(tutorial_step(), model_with("batchnorm", sync=True)))


def in_batch_negatives(gather: bool):
    """keras.io "Natural language image search with a Dual Encoder": the loss compares every
    example with every other one in the batch (here the logits serve as the embeddings)."""
    tf = _tf()

    def make_train_step(model, optimizer, metric, global_batch_size):
        import keras

        def train_step(inputs):
            x, _ = inputs
            context = tf.distribute.get_replica_context()
            with tf.GradientTape() as tape:
                embeddings = model(x, training=True)
                others = context.all_gather(embeddings, axis=0) if gather else embeddings
                similarity = tf.matmul(embeddings, others, transpose_b=True)
                local = tf.shape(embeddings)[0]
                offset = context.replica_id_in_sync_group * local if gather else 0
                targets = tf.range(local) + offset  # each example's match is itself
                per_example = keras.losses.sparse_categorical_crossentropy(
                    targets, similarity, from_logits=True
                )
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        return train_step

    return make_train_step


def test_in_batch_negatives_need_every_replicas_examples() -> None:
    caught(
        same(in_batch_negatives(gather=False), make_metric=None), "sees only its own examples", "all_gather"
    )
    passes(same(in_batch_negatives(gather=True), make_metric=None))


# --------------------------------------------------------------------------- normalizers


def accumulated(micro_batches: int, normalize: str):
    """Hugging Face transformers' TensorFlow ``GradientAccumulator`` pattern: the replica's batch
    in micro-batches, their gradients added up, one ``apply_gradients``."""
    tf = _tf()

    def make_train_step(model, optimizer, metric, global_batch_size):
        import keras

        loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

        def train_step(inputs):
            x, y = inputs
            total, summed = None, tf.constant(0.0)
            for xs, ys in zip(tf.split(x, micro_batches), tf.split(y, micro_batches)):
                with tf.GradientTape() as tape:
                    per_example = loss_object(ys, model(xs, training=True))
                    if normalize == "global":
                        loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
                    else:  # each micro-batch's mean, averaged over the micro-batches
                        loss = tf.reduce_mean(per_example) / micro_batches
                grads = tape.gradient(loss, model.trainable_variables)
                total = grads if total is None else [a + b for a, b in zip(total, grads)]
                summed += loss
            optimizer.apply_gradients(zip(total, model.trainable_variables))
            return summed

        return train_step

    return make_train_step


def test_gradient_accumulation_over_micro_batches() -> None:
    caught(same(accumulated(2, "mean"), make_metric=None), "2.00x", "averages over its own examples")
    passes(same(accumulated(2, "global"), make_metric=None))


def masked_tokens(normalizer: str):
    """keras.io "End-to-end Masked Language Modeling with BERT": the loss counts masked positions
    only (sample weights 0 elsewhere); here with label smoothing, which needs one-hot labels."""
    tf = _tf()

    def make_train_step(model, optimizer, metric, global_batch_size):
        import keras

        loss_object = keras.losses.CategoricalCrossentropy(
            from_logits=True, label_smoothing=0.1, reduction=None
        )

        def train_step(inputs):
            x, y, mask = inputs  # the masked positions, as sample weights (1 masked, 0 not)
            context = tf.distribute.get_replica_context()
            with tf.GradientTape() as tape:
                per_token = loss_object(tf.one_hot(y, CLASSES), model(x, training=True)) * mask
                count = tf.reduce_sum(mask)
                if normalizer == "global":  # every replica's masked tokens
                    count = context.all_reduce(tf.distribute.ReduceOp.SUM, count)
                loss = tf.reduce_sum(per_token) / count
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        return train_step

    return make_train_step


def test_a_loss_over_masked_tokens_normalized_per_replica() -> None:
    x, y = data()
    # 6 masked tokens on the first replica's half of each batch, 2 on the second's
    mask = np.tile([1.0] * 6 + [0.0] * 4 + [1.0] * 2 + [0.0] * 4, STEPS).astype("float32")
    options = dict(make_model=model_with(), replicas=(1, 2))
    own = compare.same_update(masked_tokens("own"), x, y, mask, **options)
    caught(own, "normalizes its loss by something of its own")
    passes(compare.same_update(masked_tokens("global"), x, y, mask, **options))


# --------------------------------------------------------------------------- metrics, errors


def test_each_metric_is_judged_and_named_on_its_own() -> None:
    """A ``Mean`` fed the scaled share reads 1/N while the accuracy beside it is right: the hint names
    the mean and its factor, not "update it inside the replica step" (which it already is)."""
    import keras

    def metrics():
        return [keras.metrics.SparseCategoricalAccuracy(), keras.metrics.Mean(name="train_loss")]

    caught(
        same(tutorial_step(metric="share and labels"), make_metric=metrics), "train_loss", "0.50x", "share"
    )


def test_variables_made_inside_the_replicated_step_are_named() -> None:
    """A head made on the step's first call: one device runs it; on 2 replicas TensorFlow's error
    was "Graph execution error:" and nothing else."""
    tf = _tf()

    def make_train_step(model, optimizer, metric, global_batch_size):
        import keras

        made = {}

        def train_step(inputs):
            x, y = inputs
            if "head" not in made:
                made["head"] = keras.layers.Dense(CLASSES)
            with tf.GradientTape() as tape:
                logits = made["head"](model(x, training=True))
                per_example = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        return train_step

    result = same(make_train_step, make_metric=None)
    caught(result, "on 2 replicas the step raised", "made variables while it ran", "strategy.scope()")
    assert "Graph execution error" not in result.hint and "(node " in result.hint, result.hint


# --------------------------------------------------------------------------- mixed precision


def test_mixed_precision_right_passes_and_one_percent_off_fails() -> None:
    """TensorFlow's "Mixed precision" guide: float16 layers, float32 outputs, a LossScaleOptimizer.
    Each replica rounds its own float16 share before the all-reduce (about 3e-4 on 2 and 4
    replicas here), which re-running one device never shows: the tolerance counts float16's rounding."""
    import keras

    def optimizer():
        return keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1))

    options = dict(make_model=model_with(policy="mixed_float16"), make_optimizer=optimizer)
    right = same(tutorial_step(loss_scale_optimizer=True), **options)
    passes(right)
    assert right.tolerance < 1e-2 / 4, right.tolerance
    caught(same(tutorial_step(loss_scale_optimizer=True, scale_on_replicas=1.01), **options), "1.01x")


# --------------------------------------------------------------------------- the fit path


def fit_args():
    import keras

    return dict(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])


def guide_model(feeds: str):
    """keras.io "Customizing what happens in fit() with TensorFlow", its first ``train_step``: it
    feeds the loss metric what ``compute_loss`` returns, which Keras has divided by the replica count."""
    import keras

    tf = _tf()

    class CustomModel(keras.Model):
        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compute_loss(y=y, y_pred=y_pred)
            gradients = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply(gradients, self.trainable_variables)
            replicas = self.distribute_strategy.num_replicas_in_sync
            for metric in self.metrics:
                if metric.name == "loss":
                    metric.update_state(loss if feeds == "share" else loss * replicas)
                else:
                    metric.update_state(y, y_pred)
            return {m.name: m.result() for m in self.metrics}

    def make_model():
        init = keras.initializers.GlorotUniform(seed=0)
        inputs = keras.Input((FEATURES,))
        hidden = keras.layers.Dense(16, "relu", kernel_initializer=init)(inputs)
        return CustomModel(inputs, keras.layers.Dense(CLASSES, kernel_initializer=init)(hidden))

    return make_model


def test_fit_with_the_guides_train_step() -> None:
    caught(
        compare.same_update(None, *data(), make_model=guide_model("share"), fit=fit_args(), replicas=(1, 2)),
        "the loss fit reports is 0.50x",
        "num_replicas_in_sync",
    )
    passes(
        compare.same_update(None, *data(), make_model=guide_model("whole"), fit=fit_args(), replicas=(1, 2))
    )


def distiller(reduce: str):
    """keras.io "Knowledge Distillation" (its TensorFlow ``train_step``): the step calls
    ``self.teacher`` and ``self.student`` directly, never ``self(x)``, and adds two weighted losses."""
    import keras

    tf = _tf()

    class Distiller(keras.Model):
        def __init__(self, student, teacher):
            super().__init__()
            self.student, self.teacher = student, teacher

        def compile(self, optimizer, metrics, alpha=0.1, temperature=3.0):
            super().compile(optimizer=optimizer, metrics=metrics)
            self.alpha, self.temperature = alpha, temperature
            self.student_loss_fn = keras.losses.SparseCategoricalCrossentropy(
                from_logits=True, reduction=None
            )
            self.distillation_loss_fn = keras.losses.KLDivergence(reduction=None)

        def call(self, x):
            return self.student(x)

        def train_step(self, data):
            x, y = data
            teacher_predictions = self.teacher(x, training=False)
            with tf.GradientTape() as tape:
                student_predictions = self.student(x, training=True)
                t = self.temperature
                per_example = (
                    self.alpha * self.student_loss_fn(y, student_predictions)
                    + (1 - self.alpha)
                    * self.distillation_loss_fn(
                        tf.nn.softmax(teacher_predictions / t), tf.nn.softmax(student_predictions / t)
                    )
                    * t**2
                )
                if reduce == "global":
                    loss = tf.nn.compute_average_loss(per_example)
                else:  # the example's own reduction, a mean over the replica's batch
                    loss = tf.reduce_mean(per_example)
            gradients = tape.gradient(loss, self.student.trainable_variables)
            self.optimizer.apply_gradients(zip(gradients, self.student.trainable_variables))
            for metric in self.metrics:
                if metric.name != "loss":
                    metric.update_state(y, student_predictions)
            return {
                "loss": loss * self.distribute_strategy.num_replicas_in_sync if reduce == "global" else loss
            }

    def make_model():
        student, teacher = model_with()(), model_with()()
        teacher.trainable = False
        return Distiller(student, teacher)

    return make_model


def test_fit_with_a_distiller_whose_step_calls_its_sub_models() -> None:
    args = dict(metrics=["accuracy"])
    wrong = compare.same_update(None, *data(), make_model=distiller("mean"), fit=args, replicas=(1, 2))
    caught(wrong, "2.00x", "averages over its own examples")
    passes(compare.same_update(None, *data(), make_model=distiller("global"), fit=args, replicas=(1, 2)))


def test_fit_with_mixed_precision_through_compile() -> None:
    """``compile`` wraps the optimizer in a LossScaleOptimizer under a mixed_float16 policy."""
    import keras

    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        result = compare.same_update(None, *data(), make_model=model_with(), fit=fit_args(), replicas=(1, 2))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    passes(result)
    assert any("float16" in note for note in result.notes), result.notes


def test_the_docs_fit_example_runs(root) -> None:
    """docs/capstone.md's fit-path example, as written, in a fresh process with 4 virtual CPUs."""
    import re

    from course_utils import run_python

    text = (root / "docs" / "capstone.md").read_text()
    block = re.search(r"## The fit path.*?```python\n(.*?)```", text, re.S)
    assert block, "docs/capstone.md has no fit-path example"
    code = "import course_utils\ncourse_utils.use_virtual_cpus(4)\n" + block.group(1)
    result = run_python(code, timeout=600)
    assert "[same update] weights, loss and metric match on 1, 2, 4 replicas" in result.stdout, (
        result.stdout + result.stderr[-2000:]
    )


def test_fit_with_a_weighted_metric_object_and_sample_weights() -> None:
    """The metric the TensorFlow Keras guides pass to ``compile`` as an object, weighted by the
    sample weights ``fit`` gets. A right model passes: each run compiles its own copy of the object
    (one object would carry its count from run to run), and the metrics are read from the epoch's
    logs: on 2 replicas a batch's logs give the mean of each replica's own weighted accuracy (measured
    on notebook 10's check data: (0.1875 + 0.0682) / 2 = 0.128, where one device and the epoch's logs
    give 0.118), which this test's unequal weights also tell apart."""
    import keras

    x, y = data()
    weights = np.where(np.arange(len(y)) % 4 == 0, 3.0, 1.0).astype("float32")
    args = dict(
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="weighted_accuracy")],
    )
    passes(compare.same_update(None, x, y, weights, make_model=model_with(), fit=args, replicas=(1, 2)))
