import sys

from memoryd.cli import main

sys.exit(main())
