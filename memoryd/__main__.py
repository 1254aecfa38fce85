import sys

from memoryd.cli import main

if __name__ == "__main__":  # guarded: worker processes are spawned and re-import the main module
    sys.exit(main())
