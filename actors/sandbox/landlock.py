"""Landlock for the sandbox worker at the fallback levels (unshare, rlimits), where no private filesystem hides
the host: `install_landlock` limits the calling process, and everything it starts, to reading the system's and
the interpreter's files and writing only beneath its scratch directory.

Landlock (Linux >= 5.13, `landlock_abi()` > 0) is an unprivileged LSM driven by three syscalls, called here
through ctypes. What the ruleset grants, beneath which folders:
  the system's and the interpreter's folders (/usr, /lib..., sys.prefix, sys.path)   read files, list folders
  /proc/self (this process only), /dev/null, /dev/zero, /dev/urandom               read (and write /dev/null)
  the scratch directory                                                           everything but execute
Everything else Landlock knows of is refused (EACCES): reading or writing any other file, listing any other
folder, creating, removing, renaming or linking outside the scratch directory, truncating (ABI >= 3), executing
any file, device ioctls (ABI >= 5), TCP bind and connect (ABI >= 4), and signalling or connecting an abstract
unix socket of any process outside the sandbox (ABI >= 6). Landlock does not cover chmod, chown, utimes or
xattrs, nor a file's existence (stat): the worker's seccomp filter refuses the first four.

Part of the worker, like `seccomp.py`: `isolation.worker_source()` puts this file's text in place of the
worker's `from actors.sandbox.landlock import ...` line. The pool imports it too, for `landlock_abi()`.
Standard library only.
"""

import ctypes
import os
import stat
import sys

# The same numbers in every architecture's table since Linux 5.13 (the unified numbering from 424 on).
_LL_CREATE_RULESET, _LL_ADD_RULE, _LL_RESTRICT_SELF = 444, 445, 446
_LL_RULESET_VERSION = 1  # flag of landlock_create_ruleset: return the ABI version
_LL_RULE_PATH_BENEATH = 1
LL_EXECUTE, LL_WRITE_FILE, LL_READ_FILE, LL_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
LL_REFER, LL_TRUNCATE, LL_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_LL_FILE_RIGHTS = LL_EXECUTE | LL_WRITE_FILE | LL_READ_FILE | LL_TRUNCATE | LL_IOCTL_DEV  # a rule on a file
_LL_NET_TCP = (1 << 0) | (1 << 1)  # bind, connect
_LL_SCOPES = (1 << 0) | (1 << 1)  # abstract unix sockets, signals
_LL_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_LL_DEVICES = (("/dev/null", LL_READ_FILE | LL_WRITE_FILE), ("/dev/zero", LL_READ_FILE),
               ("/dev/urandom", LL_READ_FILE), ("/dev/random", LL_READ_FILE))


class _LandlockRulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _LandlockPathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _landlock_libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def landlock_abi():
    """The kernel's Landlock ABI version; 0 where it has none, or it is disabled."""
    if not sys.platform.startswith("linux"):
        return 0
    version = _landlock_libc().syscall(ctypes.c_long(_LL_CREATE_RULESET), ctypes.c_void_p(None),
                                       ctypes.c_long(0), ctypes.c_long(_LL_RULESET_VERSION))
    return max(int(version), 0)


def landlock_read_paths():
    """Where the worker may read: the system's folders and its own interpreter's installation."""
    paths = list(_LL_SYSTEM_DIRS) + [sys.base_prefix, sys.prefix, sys.base_exec_prefix, sys.exec_prefix]
    paths += [p for p in sys.path if p]
    return sorted({os.path.realpath(p) for p in paths if os.path.isdir(p)})


def _landlock_fs_rights(abi):
    rights = (1 << 13) - 1  # ABI 1: execute ... make_sym
    if abi >= 2:
        rights |= LL_REFER
    if abi >= 3:
        rights |= LL_TRUNCATE
    if abi >= 5:
        rights |= LL_IOCTL_DEV
    return rights


def install_landlock(scratch, read_paths):
    """Restrict this process (and its children) as the module says; "" on success, else why not."""
    abi = landlock_abi()
    if abi < 1:
        return "the kernel has no Landlock (Linux >= 5.13 with landlock among its LSMs)"
    libc = _landlock_libc()
    handled = _landlock_fs_rights(abi)
    attr = _LandlockRulesetAttr(handled, _LL_NET_TCP if abi >= 4 else 0, _LL_SCOPES if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = libc.syscall(ctypes.c_long(_LL_CREATE_RULESET), ctypes.byref(attr), ctypes.c_long(size),
                           ctypes.c_long(0))
    if ruleset < 0:
        return f"landlock_create_ruleset failed: {os.strerror(ctypes.get_errno())}"
    try:
        rules = [(p, LL_READ_FILE | LL_READ_DIR) for p in read_paths]
        rules += [("/proc/self", LL_READ_FILE | LL_READ_DIR)] + list(_LL_DEVICES)
        rules.append((scratch, handled & ~LL_EXECUTE & ~LL_IOCTL_DEV))
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                if path == scratch:
                    return f"the scratch directory {scratch} cannot be opened"
                continue  # a folder this machine does not have
            try:
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    rights &= _LL_FILE_RIGHTS
                rule = _LandlockPathBeneathAttr(rights & handled, fd)
                if libc.syscall(ctypes.c_long(_LL_ADD_RULE), ctypes.c_long(ruleset),
                                ctypes.c_long(_LL_RULE_PATH_BENEATH), ctypes.byref(rule), ctypes.c_long(0)) != 0:
                    return f"landlock_add_rule({path}) failed: {os.strerror(ctypes.get_errno())}"
            finally:
                os.close(fd)
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            return f"PR_SET_NO_NEW_PRIVS failed: {os.strerror(ctypes.get_errno())}"
        if libc.syscall(ctypes.c_long(_LL_RESTRICT_SELF), ctypes.c_long(ruleset), ctypes.c_long(0)) != 0:
            return f"landlock_restrict_self failed: {os.strerror(ctypes.get_errno())}"
    finally:
        os.close(ruleset)
    return ""
