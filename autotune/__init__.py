"""autotune: search training-stability and speed knobs with short probes.

Optuna decides, Ray runs, the probe measures, MLflow remembers, the recipe carries the result out.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
