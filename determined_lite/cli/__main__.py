"""``python -m determined_lite.cli``: the ``det-lite`` command."""

from determined_lite.cli import main

if __name__ == "__main__":
    main()
