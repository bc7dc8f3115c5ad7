"""Where this package is installed: the directory a child process (a step kernel, a trial driver, a
model server) needs on its PYTHONPATH to import it as this process does, and the package's own
folder (a traceback's frames under it are the workbench's, not the user's)."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
IMPORT_ROOT = PACKAGE_DIR.parent  # what `import cube_jupyter` finds the package in
