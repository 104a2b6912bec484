"""The sandbox worker's seccomp deny-list: the syscall tables, the classic BPF program built from them, and
`install_seccomp`, which loads it into the calling process.

Part of the worker, not a module of its own there: `isolation.worker_source()` puts this file's text in place of
the worker's `from actors.sandbox.seccomp import ...` line, so the worker still starts as one `-c` text that
sees no file of this repository, at every isolation level. Standard library only, like the worker.
"""

import ctypes
import os

# Syscalls answered with EPERM. Numbers from the kernel's syscall tables (x86_64: arch/x86/entry/syscalls;
# aarch64: include/uapi/asm-generic/unistd.h). Threads are refused too (clone), which is intended.
_DENIED_NAMES = (
    "socket socketpair connect bind listen accept accept4 clone clone3 fork vfork execve execveat kill tkill "
    "tgkill rt_sigqueueinfo rt_tgsigqueueinfo pidfd_open pidfd_send_signal pidfd_getfd ptrace "
    "process_vm_readv process_vm_writev mount umount2 pivot_root chroot unshare setns open_tree move_mount "
    "fsopen fsconfig fsmount fspick mount_setattr reboot init_module finit_module delete_module kexec_load "
    "kexec_file_load add_key request_key keyctl bpf perf_event_open userfaultfd io_uring_setup "
    "io_uring_enter io_uring_register personality swapon swapoff acct quotactl sethostname setdomainname "
    "open_by_handle_at name_to_handle_at iopl ioperm"
).split()
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
    }),
}


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def seccomp_program(machine):
    """The deny-list for `machine` as BPF instructions (code, jt, jf, k); None if there is no table for it.

    Another architecture is killed; on x86_64 the x32 ABI (numbers from 0x40000000) is refused as a whole.
    """
    if machine not in _SYSCALLS:
        return None
    arch, numbers = _SYSCALLS[machine]
    denied = sorted({numbers[name] for name in _DENIED_NAMES if name in numbers})
    ld_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, kill, eperm = 0x7FFF0000, 0x80000000, 0x00050000 | 1
    prog = [(ld_abs, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, kill), (ld_abs, 0, 0, 0)]
    checks = ([(jge, 0, 0, 0x40000000)] if machine == "x86_64" else []) + [(jeq, 0, 0, n) for n in denied]
    first = len(prog)
    deny_at = first + len(checks) + 1
    for i, (code, _, _, k) in enumerate(checks):
        prog.append((code, deny_at - (first + i) - 1, 0, k))
    prog += [(ret, 0, 0, allow), (ret, 0, 0, eperm)]
    return prog


def install_seccomp():
    """Install the deny-list as a classic BPF filter; returns "" on success, else why it was not installed."""
    machine = os.uname().machine
    prog = seccomp_program(machine)
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
