"""Check functions for the exercises, one module per notebook (named like the notebook).

A notebook's check cell calls, for example,
``setup_and_hardware.check_replica_ids(replica_ids)``; every check prints one ``[pass]`` line
or raises :class:`course_utils.ExerciseError` with a hint.
"""
