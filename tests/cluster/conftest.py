import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # simhelpers.py (rootdir-relative test layout)

# The prediction cache's temporary directory is tests/conftest.py's (the whole suite's).
