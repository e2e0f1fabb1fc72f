"""Hardware and software fingerprint of one process on one node, and the hash that names it.

Every probe process fingerprints itself, where the trial ran: in a
cluster of MI210 and MI250 nodes the driver's hardware says nothing about a trial's. The
fingerprint is a plain JSON-serialisable dict; :func:`identity` picks the part of it that names a
platform and :func:`identity_hash` hashes that part, so trials and recipes found on the same
platform group together whatever the hostname, the time or the knobs under search.

This module imports neither ray nor mlflow, and imports torch only inside functions: importing it
costs nothing. Package versions of ray, optuna, mlflow and numpy are read from their installed
metadata, never by importing them. Vendor management libraries (``amdsmi`` on ROCm, ``pynvml``
from ``nvidia-ml-py`` on NVIDIA) are optional: when absent the driver section is ``None``; when a
call fails the field records ``{"error": "..."}`` and collection goes on.
"""

from __future__ import annotations

from autotune.fingerprint.collect import (
    CONF_FILES,
    DIST_NAME,
    ENV_NAMES,
    ENV_PREFIXES,
    SCHEMA,
    collect,
    decode_dnn_version,
    describe_device,
    dist_version,
)
from autotune.fingerprint.drivers import amdsmi_info, driver_info, nvml_info
from autotune.fingerprint.format import format_text, tags
from autotune.fingerprint.identity import diff, identity, identity_hash

__all__ = [
    "CONF_FILES",
    "DIST_NAME",
    "ENV_NAMES",
    "ENV_PREFIXES",
    "SCHEMA",
    "amdsmi_info",
    "collect",
    "decode_dnn_version",
    "describe_device",
    "diff",
    "dist_version",
    "driver_info",
    "format_text",
    "identity",
    "identity_hash",
    "nvml_info",
    "tags",
]
