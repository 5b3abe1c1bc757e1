"""Every notebook: the check functions of its exercises, one module per notebook (named like the notebook).

A notebook's check cell calls, for example,
``setup_and_hardware.check_per_replica_batch(per_replica_batch)``; every check prints one ``[pass]`` line
or raises :class:`course_utils.ExerciseError` with a hint.
"""

import random
from typing import Optional

#: Set by the grader's judge (never in a notebook): a random source for cases drawn at grading
#: time, which the student never saw, that the checks taking them add to their fixed cases.
UNSEEN: Optional[random.Random] = None


def unseen() -> Optional[random.Random]:
    """:data:`UNSEEN` as it is now: ``None`` in a notebook, the judge's random source when grading."""
    return UNSEEN
