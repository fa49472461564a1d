"""Loop devices, mounts and cgroup read rules, and their removal: what the device settings share.

Both real-kernel settings (:mod:`~lmdbio.lab.storage.throttle`, a throttled
device per virtual node, and :mod:`~lmdbio.lab.storage.shared`, one throttled
target under direct-I/O node devices) build ext4 images of the dataset,
attach them read-only as loop devices, mount them ``ro,noload`` at
``MNT/node{k}`` and put a read budget on a device: cgroup v1
``blkio.throttle.read_{bps,iops}_device`` or cgroup v2 ``io.max``
(:class:`CgroupV1`, :class:`CgroupV2`).

Each setting records what it makes in a JSON state file as it makes it, and
its ``cleanup(state)`` removes only what the state lists, with the steps
here (:func:`umount`, :func:`detach`, :func:`remove_cgroups`,
:func:`disable_io`, :func:`remove_workdir`). :func:`building` removes a
half-made setting on any error; :class:`Holder` removes a made one in
``close()``, at exit and (inside :func:`held`) on SIGTERM; and a janitor
process (:func:`start_janitor`) waits for the holder's end on a pipe and
removes it when the holder is killed outright.

The pieces live in one module each and are all importable from here:
:mod:`~lmdbio.lab.storage.profile` (profile tables),
:mod:`~lmdbio.lab.storage.cgroups` (read rules),
:mod:`~lmdbio.lab.storage.blockdev` (images, loop devices, mounts, counters),
:mod:`~lmdbio.lab.storage.statefile` (the state file) and
:mod:`~lmdbio.lab.storage.holder` (janitor, Holder).
"""

from __future__ import annotations

from lmdbio.errors import LmdbioError
from .blockdev import (add_node, backing_file, datasets, detach, device_counters, evict_file,
                       file_device_counters, flush_device, majmin, mkfs, mount_points, mount_ro,
                       mounts, run, stage_datasets, sysblock, sysfs, umount, write)
from .cgroups import (V1_ROOT, CgroupV1, CgroupV2, controller, controller_for, disable_io,
                      enable_io, remove_cgroups, v1_rules, v2_root)
from .holder import Holder, building, held, on_sigterm, remove_workdir, start_janitor
from .profile import Profile, env_time_scale, load_toml
from .statefile import need_state, read_state, save_state

__all__ = ["ThrottleUnavailable", "V1_ROOT", "TOOLS", "Profile", "CgroupV1", "CgroupV2",
           "controller", "controller_for", "v2_root", "v1_rules", "load_toml", "env_time_scale",
           "write", "mounts", "mount_points", "run", "majmin", "sysblock", "sysfs", "backing_file",
           "device_counters", "file_device_counters", "evict_file", "flush_device", "save_state",
           "read_state", "need_state", "datasets", "stage_datasets", "mkfs", "add_node", "mount_ro",
           "enable_io", "umount", "detach", "remove_cgroups", "disable_io", "remove_workdir",
           "start_janitor", "building", "Holder", "held", "on_sigterm"]

#: The programs a device setting runs, and the package that has each.
TOOLS = {"losetup": "util-linux", "mount": "util-linux", "umount": "util-linux",
         "mkfs.ext4": "e2fsprogs"}


class ThrottleUnavailable(LmdbioError):
    """A throttled device cannot be made here (not root, no loop devices, no controller, no mkfs)."""
