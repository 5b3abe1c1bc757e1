"""``python -m course_utils.bench``: see :mod:`course_utils.bench`."""

import sys

from .report import main

sys.exit(main())
