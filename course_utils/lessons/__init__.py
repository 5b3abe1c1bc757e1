"""Notebooks 01 to 11: the helpers that serve one notebook each, the scaffolding around a lesson, never the lesson.

* :mod:`.widgets` - notebook 01 (its data, pictures and explorer; its NumPy lesson is in its cells)
* :mod:`.support` - notebook 02
* :mod:`.callbacks` - notebook 03
* :mod:`.reference` - notebook 04
* :mod:`.diagnostics` - notebook 05
* :mod:`.machines` - notebook 06
* :mod:`.coordinator` - notebook 08 (its kernel's native stderr, sent to a file)
* :mod:`.parallelism` - notebook 09 (its loops are in its cells; the benchmark is ``course_tools.bench``)
* :mod:`.capstone` - notebook 10
* :mod:`.keras_on_jax` - notebook 11 (its set-up: Keras on JAX, no TensorFlow)

Importing this package imports none of them.
"""
