"""The box's seccomp filter, compiled by libseccomp (the library Docker, systemd and Flatpak use).

`filter_program()` returns the classic-BPF program bubblewrap loads with `--seccomp FD` just
before it starts the boxed interpreter. It allows every system call but these, which fail with
EPERM (or ENOSYS for `clone3`, so the C library falls back to `clone`, whose flags the filter
can read):

- starting processes and threads: `fork`, `vfork` and every `clone`. Boxed code runs as one
  process with one thread: no fork bomb, no thread bomb, no `setsid` grandchild, and the
  address-space limit of that one process bounds its memory. (`RLIMIT_NPROC` cannot do this
  when the operator runs as root, whose processes the kernel exempts from it: a box that let
  threads through made 3,190 of them in 0.22 s as root.) `threading.Thread.start` raises
  RuntimeError in the box.
- making or entering namespaces and changing mounts: `unshare`, `setns`, `clone` with any
  CLONE_NEW* flag, `mount`, `umount2`, `pivot_root`, `chroot` and the new mount API;
- reading or steering other processes: `ptrace`, `process_vm_readv/writev`, `kcmp`,
  `pidfd_getfd`, `perf_event_open`, `userfaultfd`;
- kernel facilities a function has no use for: `bpf`, `keyctl`, `add_key`, `request_key`,
  `io_uring_*`, modules, `kexec_*`, `reboot`, swap, accounting, the clock, `syslog`,
  `personality`, file handles, `fanotify_init`;
- memory the process's address-space limit does not count: `memfd_create`, `memfd_secret`,
  System V shared memory, message queues and semaphores, POSIX message queues;
- `socket(AF_VSOCK, ...)` (the hypervisor's channel) and the terminal-injection ioctls
  `TIOCSTI` and `TIOCLINUX`.

System calls of any other architecture (32-bit x86 through `int 0x80`, x32) kill the process:
libseccomp's filter checks the architecture first and rejects x32 numbers on x86-64.

Raises SandboxUnavailable when libseccomp cannot be loaded or refuses the filter.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
import threading

from accord.identity.errors import SandboxUnavailable

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_ACT_KILL_PROCESS = 0x80000000
SCMP_FLTATR_ACT_BADARCH = 2
SCMP_CMP_EQ = 4
SCMP_CMP_MASKED_EQ = 7

AF_VSOCK = 40
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
DENIED = (
    # processes
    "fork",
    "vfork",
    # namespaces and mounts
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    # other processes
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_getfd",
    "perf_event_open",
    "userfaultfd",
    # kernel facilities
    "bpf",
    "keyctl",
    "add_key",
    "request_key",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "syslog",
    "quotactl",
    "lookup_dcookie",
    "iopl",
    "ioperm",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "vhangup",
    "personality",
    "uselib",
    "name_to_handle_at",
    "open_by_handle_at",
    "fanotify_init",
    # memory outside RLIMIT_AS
    "memfd_create",
    "memfd_secret",
    "shmget",
    "shmat",
    "msgget",
    "semget",
    "mq_open",
)


class _ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


def _errno_action(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


@functools.cache
def _library() -> ctypes.CDLL:
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as exc:
        raise SandboxUnavailable(
            f"libseccomp is not installed ({exc}); install the libseccomp2 package"
        ) from exc
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_syscall_resolve_name.restype = ctypes.c_int
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_ArgCmp),
    ]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


_lock = threading.Lock()


def _add(
    lib: ctypes.CDLL, ctx: int, action: int, name: str, *conditions: tuple[int, int, int, int]
) -> None:
    number = lib.seccomp_syscall_resolve_name(name.encode())
    if number == -1:  # __NR_SCMP_ERROR: no such call on this architecture, nothing to deny
        return
    args = (_ArgCmp * max(1, len(conditions)))(*(_ArgCmp(*c) for c in conditions))
    code = lib.seccomp_rule_add_array(ctx, action, number, len(conditions), args)
    if code < 0:
        raise SandboxUnavailable(f"libseccomp refused the rule for {name}: {os.strerror(-code)}")


@functools.cache
def filter_program() -> bytes:
    """The compiled filter (classic BPF, native byte order), built once per process.

    Raises SandboxUnavailable when libseccomp is missing or cannot build it.
    """
    lib = _library()
    with _lock:
        ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
        if not ctx:
            raise SandboxUnavailable("libseccomp could not start a filter")
        try:
            lib.seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS)
            deny = _errno_action(errno.EPERM)
            for name in DENIED:
                _add(lib, ctx, deny, name)
            _add(lib, ctx, _errno_action(errno.ENOSYS), "clone3")
            _add(lib, ctx, deny, "clone")
            _add(lib, ctx, deny, "socket", (0, SCMP_CMP_EQ, AF_VSOCK, 0))
            for request in (TIOCSTI, TIOCLINUX):
                _add(lib, ctx, deny, "ioctl", (1, SCMP_CMP_MASKED_EQ, 0xFFFFFFFF, request))
            read_end, write_end = os.pipe()
            try:
                code = lib.seccomp_export_bpf(ctx, write_end)
                os.close(write_end)
                write_end = -1
                if code < 0:
                    raise SandboxUnavailable(
                        f"libseccomp could not export the filter: {os.strerror(-code)}"
                    )
                chunks = []
                while chunk := os.read(read_end, 65536):
                    chunks.append(chunk)
                return b"".join(chunks)
            finally:
                os.close(read_end)
                if write_end >= 0:
                    os.close(write_end)
        finally:
            lib.seccomp_release(ctx)
