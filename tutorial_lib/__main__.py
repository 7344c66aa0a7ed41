"""``python -m tutorial_lib``: see :mod:`tutorial_lib.cli`."""
import sys

from .cli import main

sys.exit(main())
