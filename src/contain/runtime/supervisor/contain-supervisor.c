/*
 * contain-supervisor: pid 1 of a contain sandbox.
 *
 * One bubblewrap instance per sandbox runs this program as pid 1 of the sandbox's pid namespace
 * (`bwrap --as-pid-1 ... -- /.contain/supervisor --control-fd N ...`); the container backend runs
 * it as the container's process under runc or runsc. The host talks to it over a
 * Unix SOCK_STREAM socket (fd N, inherited through bwrap); docs/supervisor-protocol.md is the
 * protocol. For each RUN the supervisor forks and execs one workload with the three stdio fds the
 * host sent (SCM_RIGHTS). When the workload's main process exits, the supervisor sends SIGKILL to
 * every other process of the namespace (kill(-1) from pid 1), reaps them all and reports
 * EXITED, so nothing a run started survives into the next run.
 *
 * What it enforces:
 *   - it refuses to start unless it is pid 1 (kill(-1, SIGKILL) anywhere else would kill every
 *     process of this user on the host);
 *   - PR_SET_DUMPABLE 0, so the workload cannot open /proc/1/mem or /proc/1/fd/N, and the
 *     launcher's environment is wiped from /proc/1/environ;
 *   - per workload: fresh session, oom_score_adj 1000, rlimits, no_new_privs, no capabilities
 *     (even when bwrap, run by root, left the supervisor all of them), the Landlock
 *     ruleset built once at start (plus Landlock signal / abstract-socket scoping on ABI >= 6,
 *     so a workload cannot signal the supervisor), no fd but 0/1/2 survives exec;
 *   - teardown: SIGKILL to the whole namespace after every run, on KILL, on EXIT and on EOF;
 *   - on a kernel that is not Linux (gVisor's sentry under runsc) a missing call is fatal unless
 *     the host accepted that row of KERNEL_DIFFERENCES; READY reports what was missing.
 *
 * What it does not enforce: namespaces, mounts and the seccomp filter are bubblewrap's job
 * (set up before this program runs); memory / pid budgets across processes are cgroups' job.
 * The supervisor trusts the host but still bounds every length it reads.
 *
 * Build: cc -O2 -static -Wall -Wextra -Werror -std=gnu11, contain-exec.h beside it (see
 * contain.runtime.supervisor_build; the header is shared with the microVM guest agent).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "contain-exec.h" /* struct run_request, parse_run_item, split_nul_items, child_fail, exec_search */

#define EXIT_REFUSED 125
#define MAX_FRAME_BYTES (1u << 20) /* protocol bound, docs/supervisor-protocol.md */
#define MAX_ITEM_TEXT 4096         /* one formatted reply item */
#define CMSG_FD_CAPACITY 16        /* room to receive (and then reject) surplus fds */

/* ---- Landlock UAPI ----------------------------------------------------------------------
 * Defined here, not taken from <linux/landlock.h>: build hosts' headers lag the kernel (Debian 12
 * ships 6.1 headers, without TRUNCATE, IOCTL_DEV or scoped). Values from the kernel's
 * include/uapi/linux/landlock.h; syscall numbers are the same on every architecture. */
#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444
#endif
#ifndef __NR_landlock_add_rule
#define __NR_landlock_add_rule 445
#endif
#ifndef __NR_landlock_restrict_self
#define __NR_landlock_restrict_self 446
#endif

struct cl_ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net; /* ABI 4; the network namespace already cuts the network */
    uint64_t scoped;             /* ABI 6 */
};

struct cl_path_beneath_attr {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

#define CL_CREATE_RULESET_VERSION (1U << 0)
#define CL_RULE_PATH_BENEATH 1

#define CL_FS_EXECUTE (1ULL << 0)
#define CL_FS_WRITE_FILE (1ULL << 1)
#define CL_FS_READ_FILE (1ULL << 2)
#define CL_FS_READ_DIR (1ULL << 3)
#define CL_FS_REMOVE_DIR (1ULL << 4)
#define CL_FS_REMOVE_FILE (1ULL << 5)
#define CL_FS_MAKE_CHAR (1ULL << 6)
#define CL_FS_MAKE_DIR (1ULL << 7)
#define CL_FS_MAKE_REG (1ULL << 8)
#define CL_FS_MAKE_SOCK (1ULL << 9)
#define CL_FS_MAKE_FIFO (1ULL << 10)
#define CL_FS_MAKE_BLOCK (1ULL << 11)
#define CL_FS_MAKE_SYM (1ULL << 12)
#define CL_FS_REFER (1ULL << 13)     /* ABI 2 */
#define CL_FS_TRUNCATE (1ULL << 14)  /* ABI 3 */
#define CL_FS_IOCTL_DEV (1ULL << 15) /* ABI 5 */
#define CL_ABI1_FS ((1ULL << 13) - 1)
/* Rights that make sense on a non-directory; landlock_add_rule() rejects others (EINVAL). */
#define CL_FS_FILE_RIGHTS \
    (CL_FS_EXECUTE | CL_FS_WRITE_FILE | CL_FS_READ_FILE | CL_FS_TRUNCATE | CL_FS_IOCTL_DEV)
#define CL_FS_READ_RIGHTS (CL_FS_READ_FILE | CL_FS_READ_DIR | CL_FS_EXECUTE)
#define CL_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0) /* ABI 6 */
#define CL_SCOPE_SIGNAL (1ULL << 1)               /* ABI 6 */
#define CL_MAX_KNOWN_ABI 7

/* NOROOT, NO_SETUID_FIXUP and NO_CAP_AMBIENT_RAISE on, KEEP_CAPS off, all locked: uid 0 gets no
 * implicit capabilities from exec, and nothing can turn that back. */
#define CL_SECBITS_LOCKED_NOROOT                                                           \
    (SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |                       \
     SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE | \
     SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED)

/* ---- kernel differences ----------------------------------------------------------------
 * A call that a non-Linux kernel (gVisor's sentry) does not implement is fatal unless the host
 * names its row with --accept-difference NAME (contain.runtime.kernel_differences decides per
 * backend; the container backend does so for runsc only). Each row says what the missing call
 * protected and what still guarantees it; an accepted difference is checked at start-up and
 * reported in READY, never assumed. Measured under runsc 0.0~20221219.0 (docs/gvisor-notes.md).
 *
 * | name          | missing call                      | errno  | what still holds                    |
 * |---------------|-----------------------------------|--------|-------------------------------------|
 * | no-securebits | prctl(PR_GET/PR_SET_SECUREBITS)   | EINVAL | see the row's why below             |
 *
 * Not a row, because no guarantee is given up: close_range() past INT_MAX (EINVAL in gVisor) or
 * missing (ENOSYS before Linux 5.9) falls back to closing what /proc/self/fd lists
 * (close_other_fds below); any other error stays fatal. */
struct kernel_difference {
    const char *name;
    const char *why;
};

enum { DIFF_NO_SECUREBITS, N_DIFFERENCES };

static const struct kernel_difference KERNEL_DIFFERENCES[N_DIFFERENCES] = {
    [DIFF_NO_SECUREBITS] = {
        "no-securebits",
        "securebits only keep uid 0 from regaining capabilities at exec; without them the workload "
        "still ends with capset(0) verified by capget, a bounding set verified empty (required, not "
        "best-effort, when this row is taken) and no_new_privs, which keeps exec from adding any",
    },
};

/* ---- state ------------------------------------------------------------------------------ */

enum landlock_mode { LANDLOCK_OFF, LANDLOCK_AUTO, LANDLOCK_REQUIRED };

struct config {
    int control_fd;
    int landlock_abi;
    enum landlock_mode landlock_mode;
    const char **read_paths;
    size_t n_read;
    const char **write_paths;
    size_t n_write;
    int accepted[N_DIFFERENCES]; /* --accept-difference NAME, by row */
};

/* Decided once at start-up (probe_securebits): 1 when the kernel has securebits. */
static int g_securebits_available = 1;

struct run_state {
    int active;
    pid_t main_pid;
    int main_reaped;
    int main_status;
    uint64_t utime_us;
    uint64_t stime_us;
    long maxrss_kb;
};

static struct run_state g_run;
static int g_ctl = -1;

/* Spawn failure stages, sent as SPAWN_FAILED stage=... */
enum stage { ST_FORK = 1, ST_SETUP, ST_RLIMIT, ST_CAPS, ST_LANDLOCK, ST_CHDIR, ST_EXEC };
static const char *stage_name(int32_t st) {
    switch (st) {
    case ST_FORK: return "fork";
    case ST_SETUP: return "setup";
    case ST_RLIMIT: return "rlimit";
    case ST_CAPS: return "caps";
    case ST_LANDLOCK: return "landlock";
    case ST_CHDIR: return "chdir";
    case ST_EXEC: return "exec";
    default: return "setup";
    }
}

static void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logmsg(const char *fmt, ...) {
    char buf[MAX_ITEM_TEXT];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    dprintf(STDERR_FILENO, "contain-supervisor: %s\n", buf);
}

/* ---- outgoing frames -------------------------------------------------------------------- */

struct outframe {
    char data[4 + 4 * MAX_ITEM_TEXT];
    size_t len; /* includes the 4-byte header */
};

static void out_begin(struct outframe *f, const char *type) {
    f->len = 4;
    size_t n = strlen(type) + 1;
    memcpy(f->data + f->len, type, n);
    f->len += n;
}

/* Append one item; truncated to fit (replies are short and formatted by us). */
static void out_add(struct outframe *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out_add(struct outframe *f, const char *fmt, ...) {
    char buf[MAX_ITEM_TEXT];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t len = strlen(buf) + 1; /* vsnprintf truncates at sizeof buf - 1 */
    if (len > sizeof f->data - f->len)
        return; /* no room: drop the item rather than overflow */
    memcpy(f->data + f->len, buf, len);
    f->len += len;
}

/* Returns 0, or -1 when the host is gone (the caller tears down). */
static int out_send(struct outframe *f) {
    uint32_t payload = (uint32_t)(f->len - 4);
    f->data[0] = (char)(payload & 0xff);
    f->data[1] = (char)((payload >> 8) & 0xff);
    f->data[2] = (char)((payload >> 16) & 0xff);
    f->data[3] = (char)((payload >> 24) & 0xff);
    size_t off = 0;
    while (off < f->len) {
        ssize_t n = send(g_ctl, f->data + off, f->len - off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            logmsg("control socket send failed: %s", strerror(errno));
            return -1;
        }
        off += (size_t)n;
    }
    return 0;
}

static int reply_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int reply_error(const char *fmt, ...) {
    char buf[MAX_ITEM_TEXT - 16];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0)
        buf[0] = '\0';
    struct outframe f;
    out_begin(&f, "ERROR");
    out_add(&f, "message=%s", buf);
    return out_send(&f);
}

/* ---- teardown --------------------------------------------------------------------------- */

static void account(pid_t pid, int status, const struct rusage *ru) {
    if (!g_run.active)
        return;
    g_run.utime_us += (uint64_t)ru->ru_utime.tv_sec * 1000000u + (uint64_t)ru->ru_utime.tv_usec;
    g_run.stime_us += (uint64_t)ru->ru_stime.tv_sec * 1000000u + (uint64_t)ru->ru_stime.tv_usec;
    if (ru->ru_maxrss > g_run.maxrss_kb)
        g_run.maxrss_kb = ru->ru_maxrss;
    if (pid == g_run.main_pid) {
        g_run.main_reaped = 1;
        g_run.main_status = status;
    }
}

/* Reap whatever has exited, without blocking. */
static void reap_available(void) {
    for (;;) {
        int status;
        struct rusage ru;
        pid_t pid = wait4(-1, &status, WNOHANG | __WALL, &ru);
        if (pid > 0) {
            account(pid, status, &ru);
            continue;
        }
        if (pid < 0 && errno == EINTR)
            continue;
        return; /* 0: children left but none exited; ECHILD: no children */
    }
}

/* SIGKILL every process of the namespace but us, and reap until none is left. A fork racing
 * with kill(-1) either lands in the kernel's task list before the walk or fails because the
 * forking parent already has SIGKILL pending; the kill is repeated per reap anyway. */
static void kill_and_reap_all(void) {
    for (;;) {
        if (kill(-1, SIGKILL) < 0 && errno != ESRCH)
            logmsg("kill(-1, SIGKILL) failed: %s", strerror(errno));
        int status;
        struct rusage ru;
        pid_t pid = wait4(-1, &status, __WALL, &ru);
        if (pid > 0) {
            account(pid, status, &ru);
            continue;
        }
        if (errno == EINTR)
            continue;
        if (errno != ECHILD)
            logmsg("wait4 failed: %s", strerror(errno));
        return;
    }
}

static void shutdown_and_exit(int code) {
    kill_and_reap_all();
    _exit(code);
}

/* The main child is reaped: end the run and report. */
static void finish_run(void) {
    kill_and_reap_all();
    struct outframe f;
    out_begin(&f, "EXITED");
    out_add(&f, "status=%d", g_run.main_status);
    out_add(&f, "utime_us=%llu", (unsigned long long)g_run.utime_us);
    out_add(&f, "stime_us=%llu", (unsigned long long)g_run.stime_us);
    out_add(&f, "maxrss_kb=%ld", g_run.maxrss_kb);
    memset(&g_run, 0, sizeof g_run);
    if (out_send(&f) < 0)
        shutdown_and_exit(1);
}

/* ---- argument parsing ------------------------------------------------------------------- */

static int parse_int(const char *s, long lo, long hi, long *out) {
    if (s == NULL || *s == '\0')
        return -1;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == NULL || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_args(int argc, char **argv, struct config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->control_fd = -1;
    cfg->read_paths = calloc((size_t)argc, sizeof(char *));
    cfg->write_paths = calloc((size_t)argc, sizeof(char *));
    if (cfg->read_paths == NULL || cfg->write_paths == NULL) {
        logmsg("out of memory");
        return -1;
    }
    int saw_mode = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        long v;
        if (strcmp(a, "--control-fd") == 0) {
            if (parse_int(next, 0, INT_MAX, &v) < 0) {
                logmsg("--control-fd needs a descriptor number");
                return -1;
            }
            cfg->control_fd = (int)v;
            i++;
        } else if (strcmp(a, "--landlock-abi") == 0) {
            if (parse_int(next, 1, 1000, &v) < 0) {
                logmsg("--landlock-abi needs a positive ABI version");
                return -1;
            }
            cfg->landlock_abi = (int)v;
            i++;
        } else if (strcmp(a, "--landlock-required") == 0 || strcmp(a, "--landlock-auto") == 0) {
            if (saw_mode) {
                logmsg("give one of --landlock-required / --landlock-auto, once");
                return -1;
            }
            saw_mode = 1;
            cfg->landlock_mode = a[11] == 'r' ? LANDLOCK_REQUIRED : LANDLOCK_AUTO;
        } else if (strcmp(a, "--accept-difference") == 0) {
            int row = -1;
            for (int k = 0; k < N_DIFFERENCES && next != NULL; k++)
                if (strcmp(next, KERNEL_DIFFERENCES[k].name) == 0)
                    row = k;
            if (row < 0) {
                logmsg("--accept-difference needs a known difference name, got %.200s", next ? next : "nothing");
                return -1;
            }
            cfg->accepted[row] = 1;
            i++;
        } else if (strcmp(a, "--landlock-read") == 0 || strcmp(a, "--landlock-write") == 0) {
            if (next == NULL || next[0] != '/') {
                logmsg("%s needs an absolute path", a);
                return -1;
            }
            if (a[11] == 'r')
                cfg->read_paths[cfg->n_read++] = next;
            else
                cfg->write_paths[cfg->n_write++] = next;
            i++;
        } else {
            logmsg("unknown argument %.200s", a);
            return -1;
        }
    }
    if (cfg->control_fd < 0) {
        logmsg("--control-fd is required");
        return -1;
    }
    if ((cfg->landlock_abi != 0) != (cfg->landlock_mode != LANDLOCK_OFF)) {
        logmsg("--landlock-abi and --landlock-required/--landlock-auto go together");
        return -1;
    }
    if (cfg->landlock_mode == LANDLOCK_OFF && (cfg->n_read || cfg->n_write)) {
        logmsg("--landlock-read/--landlock-write need --landlock-abi");
        return -1;
    }
    return 0;
}

/* ---- Landlock --------------------------------------------------------------------------- */

static uint64_t handled_fs_for_abi(int abi) {
    uint64_t h = CL_ABI1_FS;
    if (abi >= 2)
        h |= CL_FS_REFER;
    if (abi >= 3)
        h |= CL_FS_TRUNCATE;
    if (abi >= 5)
        h |= CL_FS_IOCTL_DEV;
    return h;
}

static uint64_t scoped_for_abi(int abi) {
    return abi >= 6 ? (CL_SCOPE_ABSTRACT_UNIX_SOCKET | CL_SCOPE_SIGNAL) : 0;
}

struct landlock_result {
    int ruleset_fd; /* -1 when not applied */
    int abi;        /* ABI used, when applied */
    const char *state; /* "applied" | "off" | "unavailable" */
    const char *skipped[64];
    size_t n_skipped;
};

static int add_path_rule(int ruleset_fd, const char *path, uint64_t allowed, uint64_t handled,
                         char *err, size_t errlen) {
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open Landlock path %.1024s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        snprintf(err, errlen, "cannot stat Landlock path %.1024s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    struct cl_path_beneath_attr rule;
    rule.allowed_access = allowed & handled;
    if (!S_ISDIR(st.st_mode))
        rule.allowed_access &= CL_FS_FILE_RIGHTS;
    rule.parent_fd = fd;
    long rc = syscall(__NR_landlock_add_rule, ruleset_fd, CL_RULE_PATH_BENEATH, &rule, 0);
    int saved = errno;
    close(fd);
    if (rc < 0) {
        snprintf(err, errlen, "landlock_add_rule(%.1024s) failed: %s", path, strerror(saved));
        return -1;
    }
    return 0;
}

/* Returns 0 (result filled in), or -1 with err set when a required layer cannot be built. */
static int setup_landlock(const struct config *cfg, struct landlock_result *res, char *err,
                          size_t errlen) {
    memset(res, 0, sizeof *res);
    res->ruleset_fd = -1;
    res->state = "off";
    if (cfg->landlock_mode == LANDLOCK_OFF)
        return 0;
    int required = cfg->landlock_mode == LANDLOCK_REQUIRED;
    long kabi = syscall(__NR_landlock_create_ruleset, NULL, 0, CL_CREATE_RULESET_VERSION);
    if (kabi <= 0) {
        if (required) {
            snprintf(err, errlen, "Landlock is required but the kernel offers none: %s",
                     strerror(errno));
            return -1;
        }
        res->state = "unavailable";
        return 0;
    }
    int abi = cfg->landlock_abi;
    if (kabi < abi) {
        if (required) {
            snprintf(err, errlen, "Landlock ABI %d is required but the kernel offers ABI %ld",
                     abi, kabi);
            return -1;
        }
        abi = (int)kabi;
    }
    if (abi > CL_MAX_KNOWN_ABI)
        abi = CL_MAX_KNOWN_ABI; /* rights of later ABIs are unknown to this build */
    struct cl_ruleset_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.handled_access_fs = handled_fs_for_abi(abi);
    attr.scoped = scoped_for_abi(abi);
    long fd = syscall(__NR_landlock_create_ruleset, &attr, sizeof attr, 0);
    if (fd < 0) {
        if (required) {
            snprintf(err, errlen, "landlock_create_ruleset failed: %s", strerror(errno));
            return -1;
        }
        res->state = "unavailable";
        return 0;
    }
    for (int pass = 0; pass < 2; pass++) {
        const char **paths = pass == 0 ? cfg->read_paths : cfg->write_paths;
        size_t n = pass == 0 ? cfg->n_read : cfg->n_write;
        uint64_t allowed = pass == 0 ? CL_FS_READ_RIGHTS : attr.handled_access_fs;
        for (size_t i = 0; i < n; i++) {
            char why[MAX_ITEM_TEXT / 2];
            if (add_path_rule((int)fd, paths[i], allowed, attr.handled_access_fs, why,
                              sizeof why) == 0)
                continue;
            if (required) {
                snprintf(err, errlen, "%s", why);
                close((int)fd);
                return -1;
            }
            /* auto: a path we cannot grant is left out: less access, never more. */
            logmsg("%s (skipped: landlock is auto)", why);
            if (res->n_skipped < sizeof res->skipped / sizeof res->skipped[0])
                res->skipped[res->n_skipped++] = paths[i];
        }
    }
    res->ruleset_fd = (int)fd;
    res->abi = abi;
    res->state = "applied";
    return 0;
}

/* Decide g_securebits_available once, before READY. PR_GET_SECUREBITS changes nothing; EINVAL
 * from it means the kernel has no securebits (gVisor), which is refused unless the host accepted
 * the no-securebits row. Returns 0, or -1 with err set. */
static int probe_securebits(const struct config *cfg, char *err, size_t errlen) {
    if (prctl(PR_GET_SECUREBITS, 0, 0, 0, 0) >= 0)
        return 0;
    if (errno == EINVAL && cfg->accepted[DIFF_NO_SECUREBITS]) {
        g_securebits_available = 0;
        logmsg("no securebits on this kernel; accepted by the host: %s",
               KERNEL_DIFFERENCES[DIFF_NO_SECUREBITS].why);
        return 0;
    }
    snprintf(err, errlen,
             "prctl(PR_GET_SECUREBITS) failed: %s; this kernel cannot lock securebits for the workload "
             "(only a host that accepts the %s difference may run here)",
             strerror(errno), KERNEL_DIFFERENCES[DIFF_NO_SECUREBITS].name);
    return -1;
}

/* ---- incoming frames -------------------------------------------------------------------- */

struct inframe {
    char *payload; /* len + 1 bytes, NUL-terminated for safety */
    uint32_t len;
    int fds[3];
    int nfds;
    int fd_error; /* more than 3 fds, or truncated control data */
};

static void inframe_close_fds(struct inframe *fr) {
    for (int i = 0; i < fr->nfds; i++)
        close(fr->fds[i]);
    fr->nfds = 0;
}

/* Read exactly len bytes, collecting any SCM_RIGHTS fds. Returns 1, 0 on EOF before the first
 * byte, -1 on error or EOF mid-way. */
static int recv_exact(char *buf, size_t len, struct inframe *fr) {
    size_t off = 0;
    while (off < len) {
        union {
            char buf[CMSG_SPACE(sizeof(int) * CMSG_FD_CAPACITY)];
            struct cmsghdr align;
        } ctl;
        struct iovec iov = {.iov_base = buf + off, .iov_len = len - off};
        struct msghdr msg;
        memset(&msg, 0, sizeof msg);
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctl.buf;
        msg.msg_controllen = sizeof ctl.buf;
        ssize_t n = recvmsg(g_ctl, &msg, MSG_CMSG_CLOEXEC);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            logmsg("control socket recv failed: %s", strerror(errno));
            return -1;
        }
        if (msg.msg_flags & MSG_CTRUNC)
            fr->fd_error = 1;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                continue;
            size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            const unsigned char *data = CMSG_DATA(c);
            for (size_t k = 0; k < count; k++) {
                int fd;
                memcpy(&fd, data + k * sizeof(int), sizeof fd);
                if (fr->nfds < 3) {
                    fr->fds[fr->nfds++] = fd;
                } else {
                    close(fd);
                    fr->fd_error = 1;
                }
            }
        }
        if (n == 0)
            return off == 0 ? 0 : -1;
        off += (size_t)n;
    }
    return 1;
}

/* Returns 1 with a frame, 0 on clean EOF, -1 on a protocol error that breaks framing. */
static int read_frame(struct inframe *fr) {
    memset(fr, 0, sizeof *fr);
    unsigned char hdr[4];
    int rc = recv_exact((char *)hdr, sizeof hdr, fr);
    if (rc <= 0) {
        inframe_close_fds(fr);
        return rc;
    }
    uint32_t len = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 |
                   (uint32_t)hdr[3] << 24;
    if (len > MAX_FRAME_BYTES) {
        inframe_close_fds(fr);
        reply_error("frame of %u bytes exceeds the %u byte limit", len, MAX_FRAME_BYTES);
        return -1;
    }
    fr->payload = malloc((size_t)len + 1);
    if (fr->payload == NULL) {
        inframe_close_fds(fr);
        reply_error("out of memory reading a %u byte frame", len);
        return -1;
    }
    fr->len = len;
    if (len > 0 && recv_exact(fr->payload, len, fr) <= 0) {
        inframe_close_fds(fr);
        free(fr->payload);
        fr->payload = NULL;
        return -1;
    }
    fr->payload[len] = '\0';
    return 1;
}

/* Split the payload into items. Returns the count, or -1 when the payload is not a sequence of
 * NUL-terminated items (an empty payload is not). *items is malloc'd and points into the payload. */
static long split_items(struct inframe *fr, char ***items) {
    *items = NULL;
    if (fr->len == 0)
        return -1;
    return split_nul_items(fr->payload, fr->len, items);
}

/* ---- RUN -------------------------------------------------------------------------------- */

static int parse_run(char **items, long n, struct run_request *rq, char *err, size_t errlen) {
    memset(rq, 0, sizeof *rq);
    rq->argv = calloc((size_t)n + 1, sizeof(char *));
    rq->envp = calloc((size_t)n + 1, sizeof(char *));
    if (rq->argv == NULL || rq->envp == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t nargs = 0, nenv = 0;
    for (long i = 1; i < n; i++) {
        int parsed = parse_run_item(items[i], rq, &nargs, &nenv, err, errlen);
        if (parsed < 0)
            return -1;
        if (parsed == 0) {
            snprintf(err, errlen, "unknown RUN item %.200s", items[i]);
            return -1;
        }
    }
    if (nargs == 0 || rq->cwd == NULL) {
        snprintf(err, errlen, "RUN needs cwd= and at least one arg=");
        return -1;
    }
    return 0;
}

struct cl_dirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

#define MAX_FD_LIST_PASSES 64

/* The fallback of close_other_fds: close every fd >= 3 but `keep` that /proc/self/fd lists.
 * Closing while reading the directory can make getdents skip entries, so it rereads from the
 * start until a whole pass finds nothing to close: the last pass is the proof. Bounded: nothing
 * else runs in this (single-threaded, forked) process, so every pass but the last closes at least
 * one fd of a finite set. No /proc means failure (fail closed), never a guess: closing up to
 * RLIMIT_NOFILE was rejected because an fd opened before the limit was lowered lies above it. */
static int close_listed_fds(int keep) {
    int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return -1;
    for (int pass = 0; pass < MAX_FD_LIST_PASSES; pass++) {
        int closed = 0;
        if (lseek(dir, 0, SEEK_SET) < 0)
            goto fail;
        for (;;) {
            union {
                char bytes[4096];
                struct cl_dirent64 align;
            } buf;
            long n = syscall(SYS_getdents64, dir, buf.bytes, sizeof buf.bytes);
            if (n < 0)
                goto fail;
            if (n == 0)
                break;
            for (long off = 0; off < n;) {
                const struct cl_dirent64 *d = (const struct cl_dirent64 *)(buf.bytes + off);
                off += d->d_reclen;
                long fd;
                if (parse_int(d->d_name, 0, INT_MAX, &fd) < 0)
                    continue; /* "." and ".." */
                if (fd < 3 || fd == keep || fd == dir)
                    continue;
                if (close((int)fd) < 0 && errno != EBADF)
                    goto fail;
                closed = 1;
            }
        }
        if (!closed) {
            close(dir);
            return 0;
        }
    }
    errno = EMFILE; /* the set of fds did not shrink to nothing: refuse */
fail:;
    int saved = errno;
    close(dir);
    errno = saved;
    return -1;
}

/* Close every fd >= 3 except `keep` (> 2). fd numbers are ints, so a last bound of INT_MAX covers
 * every fd that can exist; gVisor (runsc 20221219) refuses a bound above INT_MAX such as ~0U with
 * EINVAL, Linux accepts either. EINVAL (another kernel's limit) or ENOSYS (Linux before 5.9)
 * fall back to the /proc/self/fd listing; any other error is fatal. */
static int close_other_fds(int keep) {
    long rc = 0;
    if (keep > 3)
        rc = syscall(SYS_close_range, 3U, (unsigned)keep - 1, 0U);
    if (rc == 0)
        rc = syscall(SYS_close_range, (unsigned)keep + 1, (unsigned)INT_MAX, 0U);
    if (rc == 0)
        return 0;
    if (errno != EINVAL && errno != ENOSYS)
        return -1;
    return close_listed_fds(keep);
}

/* Leave the workload with no capability at all, whatever bwrap left the supervisor (bwrap run by
 * root keeps every capability inside the sandbox's user namespace unless told --cap-drop ALL).
 * With no_new_privs set, exec can never give back what is dropped here: the kernel intersects
 * the new permitted set with the old one (security/commoncap.c, cap_bprm_creds_from_file), which
 * also covers uid 0's implicit file capabilities. The securebits and bounding-set steps need
 * CAP_SETPCAP and are best-effort on top of that; the capset and the final check are not. */
static int drop_all_capabilities(void) {
    /* g_securebits_available is 0 only when the host accepted the no-securebits row and the
     * start-up probe found none (a kernel that has them still gets them set here). */
    if (g_securebits_available && prctl(PR_SET_SECUREBITS, CL_SECBITS_LOCKED_NOROOT, 0, 0, 0) < 0 &&
        errno != EPERM)
        return -1;
    for (int cap = 0; cap < 64; cap++) {
        int has = prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
        if (has < 0 && cap == 0 && !g_securebits_available)
            return -1; /* the bounding set cannot even be read: the replacement check cannot hold */
        if (has < 0)
            break; /* EINVAL: past the last capability this kernel knows */
        if (has == 1 && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EPERM)
            return -1;
        /* Without securebits the empty bounding set is part of the guarantee: required. */
        if (has == 1 && !g_securebits_available && prctl(PR_CAPBSET_READ, cap, 0, 0, 0) != 0) {
            errno = EPERM;
            return -1;
        }
    }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        return -1;
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof data);
    if (syscall(SYS_capset, &hdr, data) < 0)
        return -1;
    if (syscall(SYS_capget, &hdr, data) < 0)
        return -1;
    for (int i = 0; i < 2; i++) {
        if (data[i].effective || data[i].permitted || data[i].inheritable) {
            errno = EPERM;
            return -1;
        }
    }
    return 0;
}

/* In the forked child: set up and exec, or report the stage and errno on errfd and exit. */
static void __attribute__((noreturn)) child_exec(struct run_request *rq, const int fds[3],
                                                 int errfd, int ruleset_fd) {
    sigset_t empty;
    sigemptyset(&empty);
    if (sigprocmask(SIG_SETMASK, &empty, NULL) < 0)
        child_fail(errfd, ST_SETUP, errno);
    for (int sig = 1; sig < NSIG; sig++)
        signal(sig, SIG_DFL); /* EINVAL for SIGKILL/SIGSTOP/libc-reserved: nothing to reset */
    if (setsid() < 0)
        child_fail(errfd, ST_SETUP, errno);
    /* The supervisor is non-dumpable, which makes the files of /proc/self root-owned; the workload is
     * dumpable again after execve anyway, so restore it now to be able to write oom_score_adj.
     * Nothing else runs in the namespace at this point (the previous run was killed), so no
     * process can use the window to open this child's /proc files. */
    if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0)
        child_fail(errfd, ST_SETUP, errno);
    /* The workload goes first when the sandbox runs out of memory, never the supervisor. */
    int oom = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (oom < 0)
        child_fail(errfd, ST_SETUP, errno);
    if (write(oom, "1000", 4) != 4)
        child_fail(errfd, ST_SETUP, errno ? errno : EIO);
    close(oom);
    /* bwrap already set no_new_privs; set it again so this does not depend on bwrap. */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        child_fail(errfd, ST_SETUP, errno);
    if (ruleset_fd >= 0 && syscall(__NR_landlock_restrict_self, ruleset_fd, 0) < 0)
        child_fail(errfd, ST_LANDLOCK, errno);
    /* Move the stdio fds above 2 first so that dup2 cannot clobber one with another. */
    int high[3];
    for (int i = 0; i < 3; i++) {
        high[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
        if (high[i] < 0)
            child_fail(errfd, ST_SETUP, errno);
    }
    for (int i = 0; i < 3; i++) {
        if (dup2(high[i], i) < 0) /* dup2 clears FD_CLOEXEC on the new fd */
            child_fail(errfd, ST_SETUP, errno);
    }
    /* Only 0, 1, 2 and errfd (CLOEXEC) survive: the control socket, the ruleset, other
     * requests' fds and anything the launcher leaked must not reach the workload. */
    if (close_other_fds(errfd) < 0)
        child_fail(errfd, ST_SETUP, errno);
    for (size_t i = 0; i < rq->n_rlimits; i++) {
        if (setrlimit(rq->rlimits[i].resource, &rq->rlimits[i].value) < 0)
            child_fail(errfd, ST_RLIMIT, errno);
    }
    /* After the rlimits, so a hard limit may still be raised when the supervisor holds
     * CAP_SYS_RESOURCE; before exec, so the workload never holds a capability. */
    if (drop_all_capabilities() < 0)
        child_fail(errfd, ST_CAPS, errno);
    if (chdir(rq->cwd) < 0)
        child_fail(errfd, ST_CHDIR, errno);
    exec_search(rq->argv, rq->envp, errfd, ST_EXEC);
}

static int reply_spawn_failed(int stage, int err) {
    struct outframe f;
    out_begin(&f, "SPAWN_FAILED");
    out_add(&f, "stage=%s", stage_name(stage));
    out_add(&f, "errno=%d", err);
    return out_send(&f);
}

/* Returns -1 when the host is gone. */
static int handle_run(struct inframe *fr, char **items, long n, int ruleset_fd) {
    char err[MAX_ITEM_TEXT / 2];
    struct run_request rq;
    memset(&rq, 0, sizeof rq);
    int rc = 0;
    if (g_run.active) {
        rc = reply_error("a run is already active (pid %d)", (int)g_run.main_pid);
        goto out;
    }
    if (fr->nfds != 3 || fr->fd_error) {
        rc = reply_error("RUN needs exactly 3 fds (stdin, stdout, stderr), got %d%s", fr->nfds,
                         fr->fd_error ? " and more" : "");
        goto out;
    }
    if (parse_run(items, n, &rq, err, sizeof err) < 0) {
        rc = reply_error("%s", err);
        goto out;
    }
    int errpipe[2];
    if (pipe2(errpipe, O_CLOEXEC) < 0) {
        rc = reply_spawn_failed(ST_FORK, errno);
        goto out;
    }
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(errpipe[0]);
        close(errpipe[1]);
        rc = reply_spawn_failed(ST_FORK, e);
        goto out;
    }
    if (pid == 0) {
        close(errpipe[0]);
        child_exec(&rq, fr->fds, errpipe[1], ruleset_fd);
    }
    close(errpipe[1]);
    inframe_close_fds(fr);
    struct spawn_error se;
    ssize_t got;
    do {
        got = read(errpipe[0], &se, sizeof se);
    } while (got < 0 && errno == EINTR);
    close(errpipe[0]);
    if (got == 0) {
        memset(&g_run, 0, sizeof g_run);
        g_run.active = 1;
        g_run.main_pid = pid;
        struct outframe f;
        out_begin(&f, "STARTED");
        out_add(&f, "pid=%d", (int)pid);
        rc = out_send(&f);
    } else {
        /* The child failed before exec and exits: reap it here, it is not a run. */
        int status;
        while (waitpid(pid, &status, __WALL) < 0 && errno == EINTR) {
        }
        if (got == (ssize_t)sizeof se)
            rc = reply_spawn_failed(se.stage, se.err);
        else
            rc = reply_spawn_failed(ST_SETUP, got < 0 ? errno : EIO);
    }
out:
    inframe_close_fds(fr);
    free(rq.argv);
    free(rq.envp);
    return rc;
}

/* Returns 0 to go on, -1 to shut down cleanly (EOF, EXIT), -2 to shut down on an error. */
static int handle_request(int ruleset_fd) {
    struct inframe fr;
    int rc = read_frame(&fr);
    if (rc == 0)
        return -1; /* EOF: the host is gone or done */
    if (rc < 0)
        return -2; /* framing is lost; nothing after this can be trusted */
    char **items = NULL;
    long n = split_items(&fr, &items);
    int out = 0;
    if (n <= 0) {
        inframe_close_fds(&fr);
        out = reply_error("frame is not a sequence of NUL-terminated items");
    } else if (strcmp(items[0], "RUN") == 0) {
        out = handle_run(&fr, items, n, ruleset_fd);
    } else if (fr.nfds != 0 || fr.fd_error) {
        inframe_close_fds(&fr);
        out = reply_error("%.64s carries no fds", items[0]);
    } else if (strcmp(items[0], "KILL") == 0 && n == 1) {
        if (kill(-1, SIGKILL) < 0 && errno != ESRCH)
            logmsg("kill(-1, SIGKILL) failed: %s", strerror(errno));
    } else if (strcmp(items[0], "EXIT") == 0 && n == 1) {
        free(items);
        free(fr.payload);
        return -1;
    } else {
        out = reply_error("unknown request %.64s", items[0]);
    }
    free(items);
    free(fr.payload);
    return out < 0 ? -2 : 0; /* a reply could not be sent: the host is gone */
}

/* ---- main ------------------------------------------------------------------------------- */

/* Launcher mode, on the host:
 *     contain-supervisor --exec-as UID GID [--join-cgroup DIR/tasks]...
 *                        [--disk-tmpfs MOUNTPOINT SIZE_BYTES INODES [--disk-dir NAME MODE]...]
 *                        -- PROGRAM ARGS...
 * first moves itself into each named cgroup v1 directory, then (with --disk-tmpfs) mounts the
 * sandbox's one disk budget, then drops every group, sets gid then uid (checking each took),
 * creates the --disk-dir directories and execs PROGRAM. The launcher uses it to start bwrap as
 * the unprivileged sandbox user through posix_spawn/vfork instead of a full fork of the Python
 * process. It never kills anything, so the pid-1 rule below does not apply to it.
 *
 * Why join here: bwrap and everything it starts inherit the cgroup at fork, so the sandbox is
 * inside its limits from its first instruction with no later migration. And it is cheap: writing
 * "0" to a v1 `tasks` file moves only the calling (single) thread, which the kernel does without
 * the global threadgroup lock that moving another process through cgroup.procs takes; that lock
 * waits for an RCU grace period (7-15 ms on a quiet 2-vCPU VM) whenever no other migration ran
 * in the last few milliseconds. Any failure refuses before anything is exec'd.
 *
 * Why the disk budget is mounted here and not by bwrap (contain.runtime.disk_budget has the
 * whole essay): bwrap's --tmpfs takes only a mode and a size, never nr_inodes, and the program
 * bwrap starts runs in a nested user namespace that does not own the tmpfs superblock, so it
 * cannot remount it either (EPERM, tested on bwrap 0.8 / Linux 6.x). Here the launcher makes a
 * mount namespace of its own (MS_SLAVE, so nothing propagates back to the host; not root: inside
 * a fresh user namespace that maps only its own uid and gid), mounts ONE tmpfs with size= and
 * nr_inodes= over MOUNTPOINT, and bwrap, exec'd in that namespace, bind-mounts its
 * subdirectories onto /tmp, /dev/shm and every scratch path. The tmpfs exists only in that
 * namespace and disappears with the sandbox; on the host MOUNTPOINT stays an empty directory. */
#define MAX_JOINS 16
#define MAX_DISK_DIRS 64

struct disk_dir {
    const char *name;
    long mode;
};

static int join_cgroup(const char *tasks_file) {
    const char *slash = strrchr(tasks_file, '/');
    if (tasks_file[0] != '/' || slash == NULL || strcmp(slash, "/tasks") != 0) {
        dprintf(STDERR_FILENO, "contain-supervisor: --join-cgroup wants an absolute .../tasks path, got %s\n",
                tasks_file);
        return -1;
    }
    int fd = open(tasks_file, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 || write(fd, "0", 1) != 1) {
        dprintf(STDERR_FILENO, "contain-supervisor: cannot join cgroup %s: %s\n", tasks_file, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

static int write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    ssize_t len = (ssize_t)strlen(text);
    if (fd < 0 || write(fd, text, (size_t)len) != len) {
        int saved = errno;
        if (fd >= 0)
            close(fd);
        errno = saved;
        return -1;
    }
    return close(fd);
}

/* A mount namespace of our own; without root, inside a user namespace mapping only our ids (so
 * the ids bwrap maps later are the same host ids as before). */
static int private_mount_namespace(int as_root, long uid, long gid) {
    if (!as_root) {
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0)
            return -1;
        char map[64];
        snprintf(map, sizeof map, "%ld %ld 1\n", uid, uid);
        if (write_file("/proc/self/setgroups", "deny") < 0 || write_file("/proc/self/uid_map", map) < 0)
            return -1;
        snprintf(map, sizeof map, "%ld %ld 1\n", gid, gid);
        if (write_file("/proc/self/gid_map", map) < 0)
            return -1;
    } else if (unshare(CLONE_NEWNS) < 0) {
        return -1;
    }
    /* Slave: host mounts still reach us, ours never reach the host. */
    return mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL);
}

static int mount_disk_budget(const char *mountpoint, long size, long inodes, long uid, long gid) {
    /* Through an O_PATH fd opened without following a final symlink: the tmpfs lands on exactly
     * the directory named, not wherever a link would point. */
    int dir = open(mountpoint, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir < 0)
        return -1;
    char via[64], opts[160];
    snprintf(via, sizeof via, "/proc/self/fd/%d", dir);
    snprintf(opts, sizeof opts, "size=%ld,nr_inodes=%ld,mode=0700,uid=%ld,gid=%ld", size, inodes, uid, gid);
    int rc = mount("tmpfs", via, "tmpfs", MS_NOSUID | MS_NODEV, opts);
    int saved = errno;
    close(dir);
    errno = saved;
    return rc;
}

/* After the switch to the sandbox user, so the directories are the sandbox user's. */
static int make_disk_dirs(const char *mountpoint, const struct disk_dir *dirs, int n) {
    int root = open(mountpoint, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (root < 0)
        return -1;
    for (int i = 0; i < n; i++) {
        if (mkdirat(root, dirs[i].name, 0700) < 0 || fchmodat(root, dirs[i].name, (mode_t)dirs[i].mode, 0) < 0) {
            int saved = errno;
            dprintf(STDERR_FILENO, "contain-supervisor: cannot create %s/%s: %s\n", mountpoint, dirs[i].name,
                    strerror(saved));
            close(root);
            errno = saved;
            return -1;
        }
    }
    return close(root);
}

static int parse_mode(const char *s, long *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 8); /* octal, as the launcher writes it: 1777, 0755 */
    if (s[0] == '\0' || errno != 0 || *end != '\0' || v < 0 || v > 01777)
        return -1;
    *out = v;
    return 0;
}

static int is_plain_name(const char *name) {
    return name[0] != '\0' && strchr(name, '/') == NULL && strcmp(name, ".") != 0 && strcmp(name, "..") != 0 &&
           strlen(name) < 64;
}

static int exec_as(int argc, char **argv) {
    long uid, gid, disk_size = 0, disk_inodes = 0;
    int i = 4, joins = 0, n_dirs = 0;
    const char *join[MAX_JOINS];
    const char *disk_mountpoint = NULL;
    struct disk_dir dirs[MAX_DISK_DIRS];
    if (argc < 6 || parse_int(argv[2], 1, 0x7fffffffL, &uid) < 0 || parse_int(argv[3], 1, 0x7fffffffL, &gid) < 0)
        goto usage;
    for (; i + 1 < argc && strcmp(argv[i], "--join-cgroup") == 0; i += 2) {
        if (joins == MAX_JOINS)
            goto usage;
        join[joins++] = argv[i + 1];
    }
    if (i + 3 < argc && strcmp(argv[i], "--disk-tmpfs") == 0) {
        disk_mountpoint = argv[i + 1];
        if (disk_mountpoint[0] != '/' || parse_int(argv[i + 2], 1, LONG_MAX, &disk_size) < 0 ||
            parse_int(argv[i + 3], 1, LONG_MAX, &disk_inodes) < 0)
            goto usage;
        for (i += 4; i + 2 < argc && strcmp(argv[i], "--disk-dir") == 0; i += 3) {
            if (n_dirs == MAX_DISK_DIRS || !is_plain_name(argv[i + 1]) ||
                parse_mode(argv[i + 2], &dirs[n_dirs].mode) < 0)
                goto usage;
            dirs[n_dirs++].name = argv[i + 1];
        }
    }
    if (i + 1 >= argc || strcmp(argv[i], "--") != 0)
        goto usage; /* the whole command line is checked before anything changes */
    int as_root = geteuid() == 0;
    if (!as_root && (getuid() != (uid_t)uid || getgid() != (gid_t)gid)) {
        dprintf(STDERR_FILENO, "contain-supervisor: only root may --exec-as another user (%ld:%ld)\n", uid, gid);
        return EXIT_REFUSED;
    }
    for (int j = 0; j < joins; j++)
        if (join_cgroup(join[j]) < 0)
            return EXIT_REFUSED;
    if (disk_mountpoint != NULL) {
        if (private_mount_namespace(as_root, uid, gid) < 0 ||
            mount_disk_budget(disk_mountpoint, disk_size, disk_inodes, uid, gid) < 0) {
            dprintf(STDERR_FILENO, "contain-supervisor: cannot mount the disk budget on %s: %s\n", disk_mountpoint,
                    strerror(errno));
            return EXIT_REFUSED;
        }
    }
    /* In a user namespace of our own setgroups is denied (and there is no group to drop). */
    if ((as_root && setgroups(0, NULL) < 0) || setresgid((gid_t)gid, (gid_t)gid, (gid_t)gid) < 0 ||
        setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) < 0) {
        dprintf(STDERR_FILENO, "contain-supervisor: cannot switch to %ld:%ld: %s\n", uid, gid, strerror(errno));
        return EXIT_REFUSED;
    }
    if (getuid() != (uid_t)uid || geteuid() != (uid_t)uid || getgid() != (gid_t)gid || setuid(0) == 0) {
        dprintf(STDERR_FILENO, "contain-supervisor: the switch to %ld:%ld did not hold\n", uid, gid);
        return EXIT_REFUSED;
    }
    if (disk_mountpoint != NULL && make_disk_dirs(disk_mountpoint, dirs, n_dirs) < 0)
        return EXIT_REFUSED;
    /* Capabilities held in our own user namespace end at this exec: the uid is not 0 there. */
    execv(argv[i + 1], &argv[i + 1]);
    dprintf(STDERR_FILENO, "contain-supervisor: cannot exec %s: %s\n", argv[i + 1], strerror(errno));
    return EXIT_REFUSED;
usage:
    dprintf(STDERR_FILENO, "contain-supervisor: usage: --exec-as UID GID [--join-cgroup DIR/tasks]... "
                           "[--disk-tmpfs MOUNTPOINT SIZE INODES [--disk-dir NAME MODE]...] -- PROGRAM "
                           "[ARGS...] (UID and GID must not be 0)\n");
    return EXIT_REFUSED;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--exec-as") == 0)
        return exec_as(argc, argv);
    /* First, before anything else: kill(-1, SIGKILL) outside a pid namespace of our own would
     * kill every process this user may signal on the host. */
    if (getpid() != 1) {
        dprintf(STDERR_FILENO, "contain-supervisor: refusing to start: not pid 1 of a pid namespace "
                               "(run it only as bwrap --as-pid-1 --unshare-pid)\n");
        return EXIT_REFUSED;
    }
    /* The launcher's environment reached us through bwrap unless it passed --clearenv. Nothing
     * here reads it; wipe the strings in place so /proc/1/environ shows none of them. */
    for (char **env = environ; env != NULL && *env != NULL; env++)
        memset(*env, 0, strlen(*env));
    environ = NULL;
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
        logmsg("prctl(PR_SET_DUMPABLE, 0) failed: %s", strerror(errno));
        return EXIT_REFUSED;
    }
    struct config cfg;
    if (parse_args(argc, argv, &cfg) < 0)
        return EXIT_REFUSED;
    struct stat st;
    if (fstat(cfg.control_fd, &st) < 0 || !S_ISSOCK(st.st_mode)) {
        logmsg("--control-fd %d is not an open socket", cfg.control_fd);
        return EXIT_REFUSED;
    }
    g_ctl = cfg.control_fd;
    if (fcntl(g_ctl, F_SETFD, FD_CLOEXEC) < 0) {
        logmsg("fcntl(control fd) failed: %s", strerror(errno));
        return EXIT_REFUSED;
    }
    if (signal(SIGPIPE, SIG_IGN) == SIG_ERR) {
        logmsg("signal(SIGPIPE) failed: %s", strerror(errno));
        return EXIT_REFUSED;
    }
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    if (sigprocmask(SIG_BLOCK, &chld, NULL) < 0) {
        logmsg("sigprocmask failed: %s", strerror(errno));
        return EXIT_REFUSED;
    }
    int sfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0) {
        logmsg("signalfd failed: %s", strerror(errno));
        return EXIT_REFUSED;
    }
    char err[MAX_ITEM_TEXT / 2];
    struct landlock_result ll;
    if (setup_landlock(&cfg, &ll, err, sizeof err) < 0) {
        logmsg("%s", err);
        reply_error("%s", err);
        return EXIT_REFUSED;
    }
    if (probe_securebits(&cfg, err, sizeof err) < 0) {
        logmsg("%s", err);
        reply_error("%s", err);
        return EXIT_REFUSED;
    }
    struct outframe f;
    out_begin(&f, "READY");
    out_add(&f, "pid=%d", (int)getpid());
    if (ll.ruleset_fd >= 0)
        out_add(&f, "landlock=applied:%d", ll.abi);
    else
        out_add(&f, "landlock=%s", ll.state);
    out_add(&f, "securebits=%s", g_securebits_available ? "available" : "unsupported");
    for (size_t i = 0; i < ll.n_skipped; i++)
        out_add(&f, "landlock_skipped=%.1024s", ll.skipped[i]);
    if (out_send(&f) < 0)
        shutdown_and_exit(1);

    for (;;) {
        struct pollfd pfd[2] = {{.fd = g_ctl, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
        if (poll(pfd, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            logmsg("poll failed: %s", strerror(errno));
            shutdown_and_exit(1);
        }
        if (pfd[1].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
            }
        }
        /* Reap on every wake-up: pid 1 inherits every orphan of the namespace. */
        reap_available();
        if (g_run.active && g_run.main_reaped)
            finish_run();
        if (pfd[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            int rc = handle_request(ll.ruleset_fd);
            if (rc < 0)
                shutdown_and_exit(rc == -1 ? 0 : 1);
        }
    }
}
