"""gpucast's version: the one definition, in the lowest module, so that anything that stamps
artifacts, rows or responses with it imports it without importing the package's front door
(``gpucast/__init__.py`` imports the API, which would make a circle)."""

__version__ = "0.1.0"
