"""Reproducibility: `audit` (bitwise determinism of a workload's ops), `compare` (two MLflow runs
side by side) and `repro` (a study's winner run again, checked against its recorded series)."""
