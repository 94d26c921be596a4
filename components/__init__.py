"""The app's views: plotly figures, HTML and words built from recorded traces only (never from a model)."""
from .race import METHOD_LABELS, RACE_METHODS, Race, RaceFileError
from .runfile import load_race

__all__ = ["METHOD_LABELS", "RACE_METHODS", "Race", "RaceFileError", "load_race"]
