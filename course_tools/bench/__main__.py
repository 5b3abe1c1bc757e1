"""``python -m course_tools.bench``: see :mod:`course_tools.bench.cli`."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
