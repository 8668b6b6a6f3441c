"""``python3 -m determined.launch.wrap_rank RANK [--] COMMAND...``: det-lite's
``determined_lite.launch._wrap_rank`` (each line of COMMAND's output prefixed by its rank)."""

import sys

from determined_lite.launch._wrap_rank import main

if __name__ == "__main__":
    sys.exit(main())
