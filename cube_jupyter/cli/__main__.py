import sys

from cube_jupyter.cli import main

sys.exit(main())
