"""Syscall numbers of the native 64-bit ABIs the process sandbox's seccomp filter knows.

Only the syscalls the filter names are listed (the deny list of ``seccomp.json``
plus the ones it inspects: socket, socketpair, clone, clone3, prctl). A name missing
from an architecture's table does not exist there (``ioperm`` on aarch64), so
nothing needs denying. The numbers are the kernel's stable ABI; the test suite
cross-checks them against libseccomp where it is installed.
"""

from __future__ import annotations

# AUDIT_ARCH_* values: what seccomp_data.arch holds for a native syscall.
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}

# x86_64 syscalls with this bit set are the x32 ABI: same arch value, other numbers.
X32_SYSCALL_BIT = 0x40000000

SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        "_sysctl": 156, "acct": 163, "add_key": 248, "adjtimex": 159, "bpf": 321,
        "chroot": 161, "clock_adjtime": 305, "clock_settime": 227, "clone": 56,
        "clone3": 435, "create_module": 174, "delete_module": 176, "fanotify_init": 300,
        "finit_module": 313, "fsconfig": 431, "fsmount": 432, "fsopen": 430, "fspick": 433,
        "get_kernel_syms": 177, "init_module": 175, "io_uring_enter": 426,
        "io_uring_register": 427, "io_uring_setup": 425, "ioperm": 173, "iopl": 172,
        "kcmp": 312, "kexec_file_load": 320, "kexec_load": 246, "keyctl": 250,
        "lookup_dcookie": 212, "mbind": 237, "migrate_pages": 256, "modify_ldt": 154,
        "mount": 165, "mount_setattr": 442, "move_mount": 429, "move_pages": 279,
        "name_to_handle_at": 303, "nfsservctl": 180, "open_by_handle_at": 304,
        "open_tree": 428, "perf_event_open": 298, "pidfd_getfd": 438, "pivot_root": 155,
        "prctl": 157,
        "process_madvise": 440, "process_vm_readv": 310, "process_vm_writev": 311,
        "ptrace": 101, "query_module": 178, "quotactl": 179, "quotactl_fd": 443,
        "reboot": 169, "request_key": 249, "set_mempolicy": 238, "setdomainname": 171,
        "sethostname": 170, "setns": 308, "settimeofday": 164, "socket": 41,
        "socketpair": 53, "swapoff": 168, "swapon": 167, "sysfs": 139, "syslog": 103,
        "umount2": 166, "unshare": 272, "uselib": 134, "userfaultfd": 323, "ustat": 136,
        "vhangup": 153,
    },
    "aarch64": {
        "acct": 89, "add_key": 217, "adjtimex": 171, "bpf": 280, "chroot": 51,
        "clock_adjtime": 266, "clock_settime": 112, "clone": 220, "clone3": 435,
        "delete_module": 106, "fanotify_init": 262, "finit_module": 273, "fsconfig": 431,
        "fsmount": 432, "fsopen": 430, "fspick": 433, "init_module": 105,
        "io_uring_enter": 426, "io_uring_register": 427, "io_uring_setup": 425,
        "kcmp": 272, "kexec_file_load": 294, "kexec_load": 104, "keyctl": 219,
        "lookup_dcookie": 18, "mbind": 235, "migrate_pages": 238, "mount": 40,
        "mount_setattr": 442, "move_mount": 429, "move_pages": 239,
        "name_to_handle_at": 264, "nfsservctl": 42, "open_by_handle_at": 265,
        "open_tree": 428, "perf_event_open": 241, "pidfd_getfd": 438, "pivot_root": 41,
        "prctl": 167,
        "process_madvise": 440, "process_vm_readv": 270, "process_vm_writev": 271,
        "ptrace": 117, "quotactl": 60, "quotactl_fd": 443, "reboot": 142,
        "request_key": 218, "set_mempolicy": 237, "setdomainname": 162, "sethostname": 161,
        "setns": 268, "settimeofday": 170, "socket": 198, "socketpair": 199,
        "swapoff": 225, "swapon": 224, "syslog": 116, "umount2": 39, "unshare": 97,
        "userfaultfd": 282, "vhangup": 58,
    },
}
