"""Real storage settings for the readers: a throttled block device per virtual node.

``throttled`` (a context manager), ``throttle_available``, ``join_node`` and
the profiles come from :mod:`lmdbio.lab.storage.throttle`; the many-faulters
measurement (the papers' problem 1) from :mod:`lmdbio.lab.storage.faulters`.
"""

from .throttle import (STATE_ENV, THROTTLE_PROFILES, TIME_SCALE_ENV, ThrottleProfile, Throttled,
                       ThrottleUnavailable, cleanup, device_counters, evict_file, flush_device,
                       join_node, leave_node, load_throttle_profile, throttle_available, throttled)

__all__ = ["throttled", "throttle_available", "Throttled", "ThrottleUnavailable",
           "ThrottleProfile", "THROTTLE_PROFILES", "load_throttle_profile", "join_node", "leave_node",
           "evict_file", "flush_device", "device_counters", "cleanup", "STATE_ENV",
           "TIME_SCALE_ENV"]
