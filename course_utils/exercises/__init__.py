"""Every notebook: the check functions of its exercises, one module per notebook (named like the notebook).

A notebook's check cell calls, for example,
``setup_and_hardware.check_per_replica_batch(per_replica_batch)``; every check prints one ``[pass]`` line
or raises :class:`course_utils.ExerciseError` with a hint.
"""
