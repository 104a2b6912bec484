"""The sandbox worker's seccomp filter: the syscall tables, the classic BPF program built from them, and
`install_seccomp`, which loads it into the calling process.

Three lists, each answered with EPERM: the deny-list (network, processes, signals, mounts, kernel modules...,
at the bubblewrap and unshare levels); the host-state list (chmod, chown, utimes, xattrs, truncate, mknod,
mounts, modules, clocks, ptrace, io_uring..., at the fallback levels, where the host's files are the worker's
own: Landlock does not cover these); and the file-write list (at the fallback levels where the kernel has no
Landlock: every open/openat asking O_WRONLY, O_RDWR, O_CREAT, O_TRUNC or O_APPEND, creat, openat2, unlink,
rename, mkdir, rmdir, symlink, link, ftruncate, and bind, which makes unix socket files). A path cannot be
told apart in seccomp, so that last list refuses writes everywhere, the scratch directory included: the worker
opens everything it writes to (its pipes, /dev/null) before the filter is installed.

Part of the worker, not a module of its own there: `isolation.worker_source()` puts this file's text in place of
the worker's `from actors.sandbox.seccomp import ...` line, so the worker still starts as one `-c` text that
sees no file of this repository, at every isolation level. Standard library only, like the worker.
"""

import ctypes
import os
import sys

# Numbers from the kernel's syscall tables (x86_64: arch/x86/entry/syscalls; aarch64:
# include/uapi/asm-generic/unistd.h); a name a table lacks (open on aarch64) is skipped.
# Threads are refused too (clone), which is intended.
_DENIED_NAMES = (
    "socket socketpair connect bind listen accept accept4 clone clone3 fork vfork execve execveat kill tkill "
    "tgkill rt_sigqueueinfo rt_tgsigqueueinfo pidfd_open pidfd_send_signal pidfd_getfd ptrace "
    "process_vm_readv process_vm_writev mount umount2 pivot_root chroot unshare setns open_tree move_mount "
    "fsopen fsconfig fsmount fspick mount_setattr reboot init_module finit_module delete_module kexec_load "
    "kexec_file_load add_key request_key keyctl bpf perf_event_open userfaultfd io_uring_setup "
    "io_uring_enter io_uring_register personality swapon swapoff acct quotactl sethostname setdomainname "
    "open_by_handle_at name_to_handle_at iopl ioperm"
).split()
_HOST_STATE_NAMES = (
    "chmod fchmod fchmodat fchmodat2 chown fchown lchown fchownat utime utimes futimesat utimensat setxattr "
    "lsetxattr fsetxattr setxattrat removexattr lremovexattr fremovexattr removexattrat truncate mknod mknodat "
    "mount umount2 pivot_root chroot open_tree open_tree_attr move_mount fsopen fsconfig fsmount fspick "
    "mount_setattr init_module finit_module delete_module kexec_load kexec_file_load reboot swapon swapoff acct "
    "quotactl sethostname setdomainname settimeofday clock_settime iopl ioperm bpf ptrace process_vm_readv "
    "process_vm_writev open_by_handle_at name_to_handle_at io_uring_setup io_uring_enter io_uring_register"
).split()
_FILE_WRITE_NAMES = (
    "creat openat2 unlink unlinkat rename renameat renameat2 mkdir mkdirat rmdir symlink symlinkat link linkat "
    "ftruncate bind"
).split()
# Opens refused only when they ask to write: the syscall and the index of its flags argument.
_OPEN_FLAGS_ARG = {"open": 1, "openat": 2}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_SYSCALLS = {
    "x86_64": (0xC000003E, {
        "socket": 41, "connect": 42, "accept": 43, "bind": 49, "listen": 50, "socketpair": 53, "clone": 56,
        "fork": 57, "vfork": 58, "execve": 59, "kill": 62, "ptrace": 101, "rt_sigqueueinfo": 129,
        "personality": 135, "pivot_root": 155, "chroot": 161, "acct": 163, "mount": 165, "umount2": 166,
        "swapon": 167, "swapoff": 168, "reboot": 169, "sethostname": 170, "setdomainname": 171, "iopl": 172,
        "ioperm": 173, "init_module": 175, "delete_module": 176, "quotactl": 179, "tkill": 200,
        "tgkill": 234, "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272,
        "accept4": 288, "rt_tgsigqueueinfo": 297, "perf_event_open": 298, "name_to_handle_at": 303,
        "open_by_handle_at": 304, "setns": 308, "process_vm_readv": 310, "process_vm_writev": 311,
        "finit_module": 313, "kexec_file_load": 320, "bpf": 321, "execveat": 322, "userfaultfd": 323,
        "pidfd_send_signal": 424, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "pidfd_open": 434, "clone3": 435, "pidfd_getfd": 438, "mount_setattr": 442,
        "open": 2, "truncate": 76, "ftruncate": 77, "rename": 82, "mkdir": 83, "rmdir": 84, "creat": 85,
        "link": 86, "unlink": 87, "symlink": 88, "chmod": 90, "fchmod": 91, "chown": 92, "fchown": 93,
        "lchown": 94, "utime": 132, "mknod": 133, "settimeofday": 164, "setxattr": 188, "lsetxattr": 189,
        "fsetxattr": 190, "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199, "clock_settime": 227,
        "utimes": 235, "openat": 257, "mkdirat": 258, "mknodat": 259, "fchownat": 260, "futimesat": 261,
        "unlinkat": 263, "renameat": 264, "linkat": 265, "symlinkat": 266, "fchmodat": 268, "utimensat": 280,
        "renameat2": 316, "openat2": 437, "fchmodat2": 452, "setxattrat": 463, "removexattrat": 466,
        "open_tree_attr": 467,
    }),
    "aarch64": (0xC00000B7, {
        "umount2": 39, "mount": 40, "pivot_root": 41, "chroot": 51, "quotactl": 60, "acct": 89,
        "personality": 92, "unshare": 97, "kexec_load": 104, "init_module": 105, "delete_module": 106,
        "ptrace": 117, "kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138, "reboot": 142,
        "sethostname": 161, "setdomainname": 162, "socket": 198, "socketpair": 199, "bind": 200,
        "listen": 201, "accept": 202, "connect": 203, "add_key": 217, "request_key": 218, "keyctl": 219,
        "clone": 220, "execve": 221, "swapon": 224, "swapoff": 225, "rt_tgsigqueueinfo": 240,
        "perf_event_open": 241, "accept4": 242, "name_to_handle_at": 264, "open_by_handle_at": 265,
        "setns": 268, "process_vm_readv": 270, "process_vm_writev": 271, "finit_module": 273, "bpf": 280,
        "execveat": 281, "userfaultfd": 282, "kexec_file_load": 294, "pidfd_send_signal": 424,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
        "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "pidfd_open": 434,
        "clone3": 435, "pidfd_getfd": 438, "mount_setattr": 442,
        "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "removexattr": 14, "lremovexattr": 15,
        "fremovexattr": 16, "mknodat": 33, "mkdirat": 34, "unlinkat": 35, "symlinkat": 36, "linkat": 37,
        "renameat": 38, "truncate": 45, "ftruncate": 46, "fchmod": 52, "fchmodat": 53, "fchownat": 54,
        "fchown": 55, "openat": 56, "utimensat": 88, "clock_settime": 112, "settimeofday": 170,
        "renameat2": 276, "openat2": 437, "fchmodat2": 452, "setxattrat": 463, "removexattrat": 466,
        "open_tree_attr": 467,
    }),
}


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def seccomp_program(machine, general=True, host_state=False, file_writes=False):
    """The filter for `machine` as BPF instructions (code, jt, jf, k); None if there is no table for it.

    general: the deny-list; host_state, file_writes: the lists of the module's docstring. Another architecture
    is killed; on x86_64 the x32 ABI (numbers from 0x40000000) is refused as a whole.
    """
    if machine not in _SYSCALLS:
        return None
    arch, numbers = _SYSCALLS[machine]
    names = (_DENIED_NAMES if general else []) + (_HOST_STATE_NAMES if host_state else [])
    names += _FILE_WRITE_NAMES if file_writes else []
    denied = sorted({numbers[name] for name in names if name in numbers})
    flagged = sorted((numbers[name], arg) for name, arg in _OPEN_FLAGS_ARG.items()
                     if file_writes and name in numbers)
    ld_abs, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, kill, eperm = 0x7FFF0000, 0x80000000, 0x00050000 | 1
    low_word = 0 if sys.byteorder == "little" else 4
    # (code, jump-if-true label, jump-if-false label, k); labels are resolved to offsets below.
    prog = [(ld_abs, None, None, 4), (jeq, "nr", None, arch), (ret, None, None, kill), (ld_abs, None, None, 0)]
    labels = {"nr": 3}
    if machine == "x86_64":
        prog.append((jge, "deny", None, 0x40000000))
    prog += [(jeq, "deny", None, n) for n in denied]
    prog += [(jeq, f"flags{n}", None, n) for n, _ in flagged]
    prog.append((ret, None, None, allow))
    for n, arg in flagged:
        labels[f"flags{n}"] = len(prog)
        prog += [(ld_abs, None, None, 16 + 8 * arg + low_word), (jset, "deny", None, _WRITE_FLAGS),
                 (ret, None, None, allow)]
    labels["deny"] = len(prog)
    prog.append((ret, None, None, eperm))
    resolved = []
    for at, (code, jt, jf, k) in enumerate(prog):
        jt, jf = (0 if label is None else labels[label] - at - 1 for label in (jt, jf))
        if not (0 <= jt <= 255 and 0 <= jf <= 255):
            raise ValueError("seccomp program too long for a jump")
        resolved.append((code, jt, jf, k))
    return resolved


def install_seccomp(general=True, host_state=False, file_writes=False):
    """Install the filter as a classic BPF program; returns "" on success, else why it was not installed."""
    machine = os.uname().machine
    prog = seccomp_program(machine, general, host_state, file_writes)
    if prog is None:
        return f"no syscall table for {machine}"
    array = (_SockFilter * len(prog))(*[_SockFilter(*ins) for ins in prog])
    fprog = _SockFprog(len(prog), array)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return f"PR_SET_NO_NEW_PRIVS failed: errno {ctypes.get_errno()}"
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        return f"PR_SET_SECCOMP failed: errno {ctypes.get_errno()}"
    return ""
