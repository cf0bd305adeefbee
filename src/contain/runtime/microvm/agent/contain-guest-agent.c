/*
 * contain-guest-agent: pid 1 of a contain microVM guest.
 *
 * The guest's /init (initramfs) execs this program as pid 1 with the control port on its command
 * line (a virtio-serial port, root 0600). The host talks to it with the frames of
 * docs/guest-agent-protocol.md: one byte stream, length-prefixed typed frames, no fd passing, so
 * the workload's stdin, stdout and stderr travel as DATA frames under credit-based flow control.
 *
 * What it enforces:
 *   - it refuses to run unless it is pid 1 (kill(-1, SIGKILL) anywhere else reaches processes it
 *     must not); it is not dumpable and runs at oom_score_adj -1000;
 *   - frames are bounded (MAX_BODY_BYTES), strictly typed and parsed; any framing error ends the
 *     agent (and the guest) after killing every workload process: nothing runs on a bad frame;
 *   - per command: a run init cloned into fresh user (only the workload's uid and gid mapped),
 *     pid, mount, ipc and uts namespaces, plus a cgroup namespace rooted at the run cgroup
 *     (RUN_NAMESPACES); a procfs of the run's pid namespace (hidepid=2); new session,
 *     oom_score_adj 1000, the run's cgroup (memory.max, pids.max when asked; refused when the
 *     guest has no cgroup v2), rlimits, chroot (when configured), the workload's uid/gid (never 0)
 *     with no supplementary groups, no capabilities and an empty bounding set (both checked),
 *     no_new_privs, the host's seccomp filter (contain's rule table; mandatory in SPAWN, installed
 *     last before exec, its failure fails the command), no fd but 0/1/2 across exec; any step
 *     failing is SPAWN_FAILED with its stage, never a weaker run;
 *   - teardown: when the main process is reaped, cgroup.kill and kill(-1, SIGKILL) until nothing is
 *     left; on KILL, SHUTDOWN, EOF and framing errors too;
 *   - output: never more DATA bytes than the host's credit; output_max per stream inside the guest;
 *   - files: every component opened with openat(O_NOFOLLOW) below the scratch root (itself opened
 *     component by component from /), as the workload's fsuid/fsgid, regular files only, sizes
 *     bounded; export is iterative with entry, byte and depth bounds.
 *
 * What it does not enforce: the guest kernel is the boundary (a workload with a kernel exploit owns
 * this process); the seccomp filter is the host's, not checked here beyond its size (at most
 * BPF_MAXINSNS instructions; the kernel verifies the program); the workload shares the guest's
 * net namespace with the agent (its egress path); network, block devices and the VMM's host limits
 * are the VMM side's job. It
 * trusts the host: a host that sends a header and stalls stalls the agent.
 *
 * Build: cc -O2 -static -std=gnu11 -Wall -Wextra -Werror with ../../supervisor/contain-exec.h beside the
 * source (contain.runtime.microvm.agent_build copies it there and hashes it into the name).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/random.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/reboot.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "contain-exec.h" /* shared with the supervisor: struct run_request, parse_run_item, split_nul_items, child_fail, exec_search */

#define EXIT_REFUSED 125
#define PROTOCOL_VERSION 2 /* 2: SPAWN carries seccomp= (mandatory) */
#define HEADER_BYTES 8
#define MAX_BODY_BYTES (256u * 1024u) /* docs/guest-agent-protocol.md, guest_channel.MAX_BODY_BYTES */
#define WINDOW_BYTES (256u * 1024u)   /* per-stream credit window, guest_channel.WINDOW_BYTES */
#define CHUNK_BYTES (64u * 1024u)     /* largest DATA body this agent sends */
#define MAX_ITEM_TEXT 4096
#define MAX_EXPORT_DEPTH 64
#define MAX_REL_PATH 3800 /* an export path= item must fit MAX_ITEM_TEXT */
#define MIN_RESEED 32
#define MAX_RESEED 512
#define MAX_FILTER_INSNS 4096 /* BPF_MAXINSNS: the kernel refuses longer programs */

enum msg_type {
    T_HELLO = 1, T_SPAWN = 2, T_DATA = 3, T_CREDIT = 4, T_KILL = 5, T_CLOSE_OUTPUT = 6,
    T_PUT_FILE = 7, T_GET_FILE = 8, T_EXPORT = 9, T_RESEED = 10, T_IDENTITY = 11, T_SHUTDOWN = 12,
    T_READY = 64, T_STARTED = 65, T_SPAWN_FAILED = 66, T_EXITED = 67, T_OK = 68, T_ERROR = 69,
    T_FILE = 70, T_ENTRY = 71, T_EXPORT_END = 72,
};
enum stream { S_STDIN = 0, S_STDOUT = 1, S_STDERR = 2, S_TRANSFER = 3 };

/* Spawn failure stages, sent as SPAWN_FAILED stage=... */
enum stage { ST_FORK = 1, ST_SETUP, ST_CGROUP, ST_RLIMIT, ST_IDS, ST_CHDIR, ST_SECCOMP, ST_EXEC, ST_NAMESPACES, ST_PROC };
static const char *stage_name(int st) {
    switch (st) {
    case ST_FORK: return "fork";
    case ST_CGROUP: return "cgroup";
    case ST_RLIMIT: return "rlimit";
    case ST_IDS: return "ids";
    case ST_CHDIR: return "chdir";
    case ST_SECCOMP: return "seccomp";
    case ST_EXEC: return "exec";
    case ST_NAMESPACES: return "namespaces";
    case ST_PROC: return "proc";
    default: return "setup";
    }
}

/* ---- state ------------------------------------------------------------------------------ */

struct config {
    const char *port_path;
    int port_fd;
    uid_t uid;
    gid_t gid;
    const char *cgroup_root;
    const char *chroot_dir;
    const char *machine_id_path;
};

struct outstream { /* stdout or stderr of the run, as the agent reads it */
    int fd;             /* read end, -1 once closed */
    uint64_t credit;    /* bytes the host still accepts */
    uint64_t forwarded; /* bytes sent so far */
    uint64_t max;       /* output_max (0: no cap) */
};

struct run_state {
    int active;         /* main process not yet reaped */
    pid_t main_pid;
    int main_status;
    int init_fd;        /* the run init's end of the status socket: the workload's wait status */
    uint64_t utime_us, stime_us;
    long maxrss_kb;
    uint64_t oom_before, pids_before;
    struct outstream out[3]; /* indexes S_STDOUT and S_STDERR */
    int stdin_fd;            /* write end, -1 once closed */
    char *stdin_buf;         /* WINDOW_BYTES */
    size_t stdin_len;
    int stdin_eof;
};

struct level {
    int fd;
    DIR *dir;
    size_t pathlen;
    int depth;
};

struct transfer { /* a GET_FILE or EXPORT in progress */
    int kind;           /* 0 none, T_GET_FILE, T_EXPORT */
    uint64_t credit;
    int file_fd;        /* the file whose bytes are being sent, or -1 */
    uint64_t file_left;
    /* export */
    struct level stack[MAX_EXPORT_DEPTH + 1];
    int sp; /* number of levels */
    char path[MAX_REL_PATH + 256];
    uint64_t entries, bytes, max_entries, max_bytes;
    int max_depth;
};

struct put_state {
    int active;
    int fd; /* -1: failed, keep consuming */
    int err;
    char errmsg[256];
    uint64_t size, received;
};

static struct config g_cfg;
static int g_port = -1;
static struct run_state g_run;
static struct transfer g_tx;
static struct put_state g_put;
static char g_cgroup_run[PATH_MAX]; /* the run cgroup's directory, "" when none */
static char g_controllers[64];      /* "memory,pids" or "" */
static int g_has_cgroup;
static unsigned char *g_inbuf;
static size_t g_inlen;

static void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logmsg(const char *fmt, ...) {
    char buf[MAX_ITEM_TEXT];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n >= 0)
        dprintf(STDERR_FILENO, "contain-guest-agent: %s\n", buf);
}

static void __attribute__((noreturn)) end_guest(int code);

/* ---- outgoing frames -------------------------------------------------------------------- */

static void write_all(const void *buf, size_t len) {
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(g_port, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            logmsg("control port write failed: %s", strerror(errno));
            end_guest(1);
        }
        p += n;
        len -= (size_t)n;
    }
}

/* Frames held back while a batch is open (the end of a run: its last output, the ends of its
 * streams and EXITED), written together: one port write, one wake-up of the host's reader. */
static unsigned char g_batch[8192];
static size_t g_batch_len;
static int g_batching;

static void flush_batch(void) {
    if (g_batch_len > 0)
        write_all(g_batch, g_batch_len);
    g_batch_len = 0;
}

static void send_frame(int type, int stream, const void *body, size_t len) {
    unsigned char h[HEADER_BYTES] = {
        (unsigned char)(len & 0xff), (unsigned char)((len >> 8) & 0xff),
        (unsigned char)((len >> 16) & 0xff), (unsigned char)((len >> 24) & 0xff),
        (unsigned char)type, (unsigned char)stream, 0, 0};
    if (g_batching && HEADER_BYTES + len <= sizeof g_batch - g_batch_len) {
        memcpy(g_batch + g_batch_len, h, HEADER_BYTES);
        if (len)
            memcpy(g_batch + g_batch_len + HEADER_BYTES, body, len);
        g_batch_len += HEADER_BYTES + len;
        return;
    }
    flush_batch(); /* frames leave in the order they were sent */
    if (len <= 4096) { /* one write for small frames: fewer virtio-serial round trips */
        unsigned char buf[HEADER_BYTES + 4096];
        memcpy(buf, h, HEADER_BYTES);
        if (len)
            memcpy(buf + HEADER_BYTES, body, len);
        write_all(buf, HEADER_BYTES + len);
        return;
    }
    write_all(h, HEADER_BYTES);
    write_all(body, len);
}

struct items {
    char data[4 * MAX_ITEM_TEXT];
    size_t len;
};

static void items_add(struct items *it, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void items_add(struct items *it, const char *fmt, ...) {
    char buf[MAX_ITEM_TEXT];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t len = strlen(buf) + 1;
    if (len > sizeof it->data - it->len)
        return; /* replies are formatted by us and short; drop rather than overflow */
    memcpy(it->data + it->len, buf, len);
    it->len += len;
}

static void send_items(int type, struct items *it) { send_frame(type, 0, it->data, it->len); }

static void reply_error(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void reply_error(int err, const char *fmt, ...) {
    char buf[MAX_ITEM_TEXT - 16];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0)
        buf[0] = '\0';
    struct items it = {.len = 0};
    items_add(&it, "message=%s", buf);
    if (err)
        items_add(&it, "errno=%d", err);
    send_items(T_ERROR, &it);
}

static void reply_ok(void) { send_frame(T_OK, 0, NULL, 0); }

static void __attribute__((noreturn)) protocol_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static void __attribute__((noreturn)) protocol_error(const char *fmt, ...) {
    char buf[MAX_ITEM_TEXT];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0)
        buf[0] = '\0';
    logmsg("protocol error, closing the channel: %s", buf);
    end_guest(1);
}

/* ---- small helpers ---------------------------------------------------------------------- */

static int parse_u64(const char *s, uint64_t hi, uint64_t *out) {
    size_t len = strlen(s);
    if (len == 0 || len > 20 || (len > 1 && s[0] == '0'))
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (v > hi)
        return -1;
    *out = v;
    return 0;
}

static int write_text_at(int dirfd, const char *name, const char *text) {
    int fd = openat(dirfd, name, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -1;
    size_t len = strlen(text);
    ssize_t n = write(fd, text, len);
    int e = errno;
    close(fd);
    if (n != (ssize_t)len) {
        errno = n < 0 ? e : EIO;
        return -1;
    }
    return 0;
}

static int write_text(const char *path, const char *text) {
    return write_text_at(AT_FDCWD, path, text);
}

static ssize_t read_text(const char *path, char *buf, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, cap - 1);
    close(fd);
    if (n < 0)
        return -1;
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    return n;
}

/* "key value" lines of memory.events / pids.events */
static uint64_t cgroup_event(const char *file, const char *key) {
    if (!g_has_cgroup)
        return 0;
    char path[PATH_MAX + 32], buf[1024];
    snprintf(path, sizeof path, "%s/%s", g_cgroup_run, file);
    if (read_text(path, buf, sizeof buf) < 0)
        return 0;
    size_t klen = strlen(key);
    char *line = buf;
    while (line != NULL && *line != '\0') {
        if (strncmp(line, key, klen) == 0 && line[klen] == ' ')
            return strtoull(line + klen + 1, NULL, 10);
        line = strchr(line, '\n');
        if (line != NULL)
            line++;
    }
    return 0;
}

/* ---- cgroup ----------------------------------------------------------------------------- */

/* Use (or mount) cgroup v2 at the root, enable memory and pids for children, make contain-run. */
static void setup_cgroup(void) {
    const char *root = g_cfg.cgroup_root;
    char path[PATH_MAX], buf[512];
    snprintf(path, sizeof path, "%s/cgroup.procs", root);
    /* favordynmods (Linux >= 6.1): a move through cgroup.procs, once per run, otherwise waits for
     * an RCU grace period (cgroup_threadgroup_rwsem's writer side), 10 to 100 ms measured under
     * TCG; forks pay a little more instead. Older kernels refuse the option: mount without. */
    if (access(path, F_OK) < 0 &&
        mount("cgroup2", root, "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, "favordynmods") < 0 &&
        (errno != EINVAL || mount("cgroup2", root, "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)) {
        logmsg("no cgroup v2 at %s (%s): memory and pid limits will be refused", root, strerror(errno));
        return;
    }
    snprintf(path, sizeof path, "%s/cgroup.controllers", root);
    if (read_text(path, buf, sizeof buf) < 0) {
        logmsg("cannot read %s: %s", path, strerror(errno));
        return;
    }
    g_controllers[0] = '\0';
    snprintf(path, sizeof path, "%s/cgroup.subtree_control", root);
    static const char *const wanted[] = {"memory", "pids"};
    for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++) {
        char word[32];
        snprintf(word, sizeof word, " %s ", wanted[i]);
        char padded[520];
        snprintf(padded, sizeof padded, " %s ", buf);
        if (strstr(padded, word) == NULL)
            continue;
        char op[32];
        snprintf(op, sizeof op, "+%s", wanted[i]);
        if (write_text(path, op) < 0) {
            logmsg("cannot enable %s in %s: %s", wanted[i], path, strerror(errno));
            continue;
        }
        if (g_controllers[0])
            strcat(g_controllers, ",");
        strcat(g_controllers, wanted[i]);
    }
    snprintf(g_cgroup_run, sizeof g_cgroup_run, "%s/contain-run", root);
    if (mkdir(g_cgroup_run, 0700) < 0 && errno != EEXIST) {
        logmsg("cannot create %s: %s", g_cgroup_run, strerror(errno));
        g_cgroup_run[0] = '\0';
        return;
    }
    g_has_cgroup = 1;
}

static int has_controller(const char *name) {
    char padded[80], word[32];
    snprintf(padded, sizeof padded, ",%s,", g_controllers);
    snprintf(word, sizeof word, ",%s,", name);
    return strstr(padded, word) != NULL;
}

static int cgroup_set(const char *file, const char *value) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", g_cgroup_run, file);
    return write_text(path, value);
}

/* ---- teardown --------------------------------------------------------------------------- */

static void account(pid_t pid, int status, const struct rusage *ru) {
    g_run.utime_us += (uint64_t)ru->ru_utime.tv_sec * 1000000u + (uint64_t)ru->ru_utime.tv_usec;
    g_run.stime_us += (uint64_t)ru->ru_stime.tv_sec * 1000000u + (uint64_t)ru->ru_stime.tv_usec;
    if (ru->ru_maxrss > g_run.maxrss_kb)
        g_run.maxrss_kb = ru->ru_maxrss;
    if (g_run.active && pid == g_run.main_pid) {
        g_run.active = 0;
        g_run.main_status = status;
        /* The run's init relays the workload's own wait status before it exits (an init cannot die
         * by a signal it sends itself); nothing there means it was killed first (KILL, OOM). */
        int32_t relayed;
        if (g_run.init_fd >= 0 && recv(g_run.init_fd, &relayed, sizeof relayed, MSG_DONTWAIT) == (ssize_t)sizeof relayed)
            g_run.main_status = relayed;
        if (g_run.init_fd >= 0) {
            close(g_run.init_fd);
            g_run.init_fd = -1;
        }
        g_run.main_pid = -1;
    }
}

/* SIGKILL every process of the guest but us (the run's cgroup first, then kill(-1) from pid 1,
 * which also reaches anything outside the cgroup), and reap until none is left. A fork racing
 * with kill(-1) lands in the task list before the walk or fails with SIGKILL pending; the kill is
 * repeated before every wait anyway. */
static void kill_and_reap_all(void) {
    for (;;) {
        if (g_has_cgroup)
            cgroup_set("cgroup.kill", "1"); /* ENOENT before 5.14: kill(-1) below still does it */
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
        return; /* ECHILD */
    }
}

static void __attribute__((noreturn)) end_guest(int code) {
    kill_and_reap_all();
    sync();
    /* pid 1 of the guest: power off (the VMM sees the VM end). In a pid namespace (tests) this ends
     * the namespace's init instead. */
    reboot(RB_POWER_OFF);
    _exit(code);
}

/* ---- stdio of a run --------------------------------------------------------------------- */

static void close_fd(int *fd) {
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

static void end_output(int s) {
    if (g_run.out[s].fd < 0)
        return;
    close_fd(&g_run.out[s].fd);
    send_frame(T_DATA, s, NULL, 0);
}

static int run_busy(void) {
    return g_run.active || g_run.out[S_STDOUT].fd >= 0 || g_run.out[S_STDERR].fd >= 0;
}

static void pump_output(int s) {
    struct outstream *o = &g_run.out[s];
    if (o->fd < 0 || o->credit == 0)
        return;
    static char buf[CHUNK_BYTES];
    uint64_t want = o->credit < CHUNK_BYTES ? o->credit : CHUNK_BYTES;
    if (o->max) {
        uint64_t room = o->max - o->forwarded;
        if (room < want)
            want = room;
    }
    ssize_t n = want ? read(o->fd, buf, (size_t)want) : 0;
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR)
            return;
        n = 0;
    }
    if (n == 0) { /* EOF, or the output cap reached: the workload now gets EPIPE */
        end_output(s);
        return;
    }
    send_frame(T_DATA, s, buf, (size_t)n);
    o->credit -= (uint64_t)n;
    o->forwarded += (uint64_t)n;
}

static void return_stdin_credit(size_t n) {
    if (n == 0)
        return;
    struct items it = {.len = 0};
    items_add(&it, "bytes=%zu", n);
    send_items(T_CREDIT, &it);
}

static void pump_stdin(void) {
    if (g_run.stdin_fd < 0)
        return;
    if (g_run.stdin_len > 0) {
        ssize_t n = write(g_run.stdin_fd, g_run.stdin_buf, g_run.stdin_len);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (n < 0) { /* EPIPE: the command closed its stdin; drop what is left, give the credit back */
            return_stdin_credit(g_run.stdin_len);
            g_run.stdin_len = 0;
            close_fd(&g_run.stdin_fd);
            return;
        }
        memmove(g_run.stdin_buf, g_run.stdin_buf + n, g_run.stdin_len - (size_t)n);
        g_run.stdin_len -= (size_t)n;
        return_stdin_credit((size_t)n);
    }
    if (g_run.stdin_len == 0 && g_run.stdin_eof)
        close_fd(&g_run.stdin_fd);
}

static void on_stdin_data(const unsigned char *body, size_t len) {
    if (len == 0) {
        g_run.stdin_eof = 1;
        pump_stdin();
        return;
    }
    /* The command is over: drop it without credit. Credit sent now would reach the host after
     * EXITED, where the next command's window would take it (the next SPAWN resets the window). */
    if (!g_run.active)
        return;
    if (g_run.stdin_fd < 0 || g_run.stdin_eof) { /* it closed its stdin: drop, give the credit back */
        if (!g_run.stdin_eof)
            return_stdin_credit(len);
        return;
    }
    if (g_run.stdin_len + len > WINDOW_BYTES)
        protocol_error("stdin data beyond the credit window");
    memcpy(g_run.stdin_buf + g_run.stdin_len, body, len);
    g_run.stdin_len += len;
    pump_stdin();
}

/* The main process is reaped: kill the rest, reap, report. Output drains afterwards. */
static void finish_run(void) {
    kill_and_reap_all();
    close_fd(&g_run.stdin_fd);
    g_run.stdin_len = 0;
    /* Every writer of the output pipes is gone: what they hold, and their ends, go out with EXITED
     * in one write as far as the credit allows (the main loop sends the rest as credit comes). */
    g_batching = 1;
    for (int s = S_STDOUT; s <= S_STDERR; s++) {
        while (g_run.out[s].fd >= 0 && g_run.out[s].credit > 0) {
            uint64_t before = g_run.out[s].forwarded;
            pump_output(s);
            if (g_run.out[s].fd >= 0 && g_run.out[s].forwarded == before)
                break; /* EAGAIN: nothing to read after all */
        }
    }
    struct items it = {.len = 0};
    items_add(&it, "status=%d", g_run.main_status);
    items_add(&it, "utime_us=%llu", (unsigned long long)g_run.utime_us);
    items_add(&it, "stime_us=%llu", (unsigned long long)g_run.stime_us);
    items_add(&it, "maxrss_kb=%ld", g_run.maxrss_kb);
    uint64_t oom = cgroup_event("memory.events", "oom_kill");
    uint64_t pids = cgroup_event("pids.events", "max");
    items_add(&it, "oom_kills=%llu", (unsigned long long)(oom >= g_run.oom_before ? oom - g_run.oom_before : 0));
    items_add(&it, "pids_limit_hits=%llu",
              (unsigned long long)(pids >= g_run.pids_before ? pids - g_run.pids_before : 0));
    send_items(T_EXITED, &it);
    flush_batch();
    g_batching = 0;
}

static void reap_available(void) {
    for (;;) {
        int status;
        struct rusage ru;
        pid_t pid = wait4(-1, &status, WNOHANG | __WALL, &ru);
        if (pid > 0) {
            int was_active = g_run.active;
            account(pid, status, &ru);
            if (was_active && !g_run.active)
                finish_run();
            continue;
        }
        if (pid < 0 && errno == EINTR)
            continue;
        return;
    }
}

/* ---- SPAWN ------------------------------------------------------------------------------ */

struct spawn_request {
    struct run_request run; /* argv, envp, cwd, rlimits: the items the supervisor's RUN has too */
    uint64_t memory_max, pids_max, output_max; /* 0: not asked */
    struct sock_filter *filter; /* the host's seccomp program (mandatory), installed before exec */
    unsigned short filter_len;
};

/* seccomp=HEX: the host's BPF program, 8 bytes per instruction as the kernel lays them out
 * (x86_64, little-endian), lowercase hex. 1..MAX_FILTER_INSNS instructions; anything else is
 * refused before any fork. Returns 0 or -1 with err set. */
static int parse_filter(const char *hex, struct spawn_request *rq, char *err, size_t errlen) {
    size_t len = strlen(hex);
    if (rq->filter != NULL) {
        snprintf(err, errlen, "seccomp given twice");
        return -1;
    }
    if (len == 0 || len % (2 * sizeof(struct sock_filter)) != 0) {
        snprintf(err, errlen, "seccomp must be whole BPF instructions in hex (%zu hex digits given)", len);
        return -1;
    }
    size_t insns = len / (2 * sizeof(struct sock_filter));
    if (insns > MAX_FILTER_INSNS) {
        snprintf(err, errlen, "seccomp filter of %zu instructions is over the BPF limit of %d", insns,
                 MAX_FILTER_INSNS);
        return -1;
    }
    unsigned char *bytes = malloc(len / 2);
    if (bytes == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < len / 2; i++) {
        int v = 0;
        for (int k = 0; k < 2; k++) {
            char c = hex[2 * i + (size_t)k];
            int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
            if (d < 0) {
                free(bytes);
                snprintf(err, errlen, "seccomp is not lowercase hex");
                return -1;
            }
            v = v * 16 + d;
        }
        bytes[i] = (unsigned char)v;
    }
    rq->filter = (struct sock_filter *)(void *)bytes;
    rq->filter_len = (unsigned short)insns;
    return 0;
}

/* Split an items body. Returns the count or -1; *items points into body (NUL-terminated). */
static long split_items(unsigned char *body, size_t len, char ***items) {
    return split_nul_items((char *)body, len, items);
}

static int parse_spawn(char **items, long n, struct spawn_request *rq, char *err, size_t errlen) {
    rq->run.argv = calloc((size_t)n + 1, sizeof(char *));
    rq->run.envp = calloc((size_t)n + 1, sizeof(char *));
    if (rq->run.argv == NULL || rq->run.envp == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t nargs = 0, nenv = 0;
    for (long i = 0; i < n; i++) {
        char *it = items[i];
        uint64_t *limit = NULL;
        const char *value = NULL;
        int parsed = parse_run_item(it, &rq->run, &nargs, &nenv, err, errlen);
        if (parsed < 0)
            return -1;
        if (parsed > 0) {
            continue;
        } else if (strncmp(it, "memory_max=", 11) == 0) {
            limit = &rq->memory_max, value = it + 11;
        } else if (strncmp(it, "pids_max=", 9) == 0) {
            limit = &rq->pids_max, value = it + 9;
        } else if (strncmp(it, "output_max=", 11) == 0) {
            limit = &rq->output_max, value = it + 11;
        } else if (strncmp(it, "seccomp=", 8) == 0) {
            if (parse_filter(it + 8, rq, err, errlen) < 0)
                return -1;
        } else {
            snprintf(err, errlen, "unknown SPAWN item %.200s", it);
            return -1;
        }
        if (limit != NULL && (*limit != 0 || parse_u64(value, UINT64_MAX - 1, limit) < 0 || *limit == 0)) {
            snprintf(err, errlen, "SPAWN item %.200s must be a positive number, given once", it);
            return -1;
        }
    }
    if (nargs == 0 || rq->run.cwd == NULL) {
        snprintf(err, errlen, "SPAWN needs cwd= and at least one arg=");
        return -1;
    }
    if (rq->filter == NULL) { /* fail closed: no workload runs without contain's filter */
        snprintf(err, errlen, "SPAWN needs seccomp= (the workload never runs unfiltered)");
        return -1;
    }
    return 0;
}

/* After setuid to a non-zero uid the kernel clears every capability set (no SECBIT_KEEP_CAPS);
 * check it rather than assume it, and that uid 0 cannot be regained. */
static int check_no_privilege(void) {
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof data);
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        return -1;
    if (syscall(SYS_capget, &hdr, data) < 0)
        return -1;
    for (int i = 0; i < 2; i++) {
        if (data[i].effective || data[i].permitted || data[i].inheritable) {
            errno = EPERM;
            return -1;
        }
    }
    for (int cap = 0; cap < 64; cap++) { /* the bounding set was emptied before the uid change */
        int has = prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
        if (has < 0)
            break; /* EINVAL: past the last capability this kernel knows */
        if (has != 0) {
            errno = EPERM;
            return -1;
        }
    }
    if (setuid(0) == 0 || setgid(0) == 0) {
        errno = EPERM;
        return -1;
    }
    return 0;
}

/* ---- the run's namespaces and its init --------------------------------------------------- */

/* Every run gets namespaces of its own inside the guest. One row per namespace, with the reason;
 * AT_CLONE rows are created by the agent's clone() of the run's init, AFTER_CGROUP rows by that
 * init once the agent has moved it into the run cgroup (so that cgroup is the namespace's root).
 * Not a row: CLONE_NEWNET. The guest's eth0 and lo are the run's egress path (QEMU's restricted
 * user network, contain's proxy outside); a net namespace of the guest has a dynamic inode
 * anyway, so it is never the host's. */
enum ns_when { AT_CLONE, AFTER_CGROUP };
struct ns_row {
    int flag;
    enum ns_when when;
    const char *why;
};
static const struct ns_row RUN_NAMESPACES[] = {
    {CLONE_NEWUSER, AT_CLONE, "only the workload's uid and gid are mapped; no id is root inside, and "
                              "capabilities held in it reach nothing the guest's initial namespace owns"},
    {CLONE_NEWPID, AT_CLONE, "the run sees and signals only its own processes; its /proc is this namespace's"},
    {CLONE_NEWNS, AT_CLONE, "the run's procfs, chroot and any mount stay out of the agent's mount table"},
    {CLONE_NEWIPC, AT_CLONE, "System V IPC and POSIX message queues are not shared with the agent or a later run"},
    {CLONE_NEWUTS, AT_CLONE, "a hostname change stays in the run"},
    {CLONE_NEWCGROUP, AFTER_CGROUP, "the run cgroup is the root of the cgroup tree the run sees"},
};

static int run_namespace_flags(enum ns_when when) {
    int flags = 0;
    for (size_t i = 0; i < sizeof RUN_NAMESPACES / sizeof RUN_NAMESPACES[0]; i++)
        flags |= RUN_NAMESPACES[i].when == when ? RUN_NAMESPACES[i].flag : 0;
    return flags;
}

/* Signals the run's init passes on to the workload (as pid 1 of the namespace it would otherwise
 * ignore them: the kernel drops default-action signals to a namespace's init). SIGKILL, which the
 * agent's KILL and teardown use, needs no forwarding: it reaches every process from the agent. */
static const int FORWARDED_SIGNALS[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
static volatile pid_t g_init_child = -1;

static void forward_signal(int sig) {
    if (g_init_child > 0)
        kill(g_init_child, sig);
}

/* Close every descriptor above 2 except the (at most two) in keep[]. */
static int close_all_but(const int *keep, size_t n) {
    unsigned lo = 3;
    int sorted[2] = {-1, -1};
    for (size_t i = 0; i < n && i < 2; i++)
        sorted[i] = keep[i];
    if (n == 2 && sorted[0] > sorted[1]) {
        int t = sorted[0];
        sorted[0] = sorted[1];
        sorted[1] = t;
    }
    for (size_t i = 0; i < n && i < 2; i++) {
        if (sorted[i] > (int)lo && syscall(SYS_close_range, lo, (unsigned)sorted[i] - 1, 0U) < 0)
            return -1;
        lo = (unsigned)sorted[i] + 1;
    }
    return (int)syscall(SYS_close_range, lo, ~0U, 0U);
}

/* No capability left in any set: inside the run's user namespace a uid change from an unmapped
 * uid does not clear them the way a change away from uid 0 does, so they are cleared here. */
static int drop_all_capabilities(void) {
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof data);
    return (int)syscall(SYS_capset, &hdr, data);
}

/* The workload: its own session, cwd, contain's filter last, exec. Runs in the run's init's
 * namespaces with the init's ids, empty capability sets, no_new_privs and default signal
 * dispositions, inherited. A vfork child: it changes no memory and never returns. */
static void __attribute__((noreturn)) workload_exec(struct spawn_request *rq, int errfd) {
    if (setsid() < 0)
        child_fail(errfd, ST_SETUP, errno);
    if (chdir(rq->run.cwd) < 0)
        child_fail(errfd, ST_CHDIR, errno);
    /* Last step before exec (the filter allows execve and write): contain's own filter, the same
     * program the process backend's supervisor installs. No filter, no workload. */
    struct sock_fprog prog = {.len = rq->filter_len, .filter = rq->filter};
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0)
        child_fail(errfd, ST_SECCOMP, errno);
    exec_search(rq->run.argv, rq->run.envp, errfd, ST_EXEC);
}

/* The run's init: pid 1 of the run's pid namespace, in its user, mount, ipc, uts (and, once
 * unshared here, cgroup) namespaces. The agent has mapped its ids, moved it into the run cgroup,
 * set its oom_score_adj and rlimits before the byte on ctlfd releases it. It mounts the run's
 * procfs, chroots, drops to the workload's ids with nothing left to regain, forks the workload,
 * reaps everything the namespace hands it, relays the workload's wait status on ctlfd and exits
 * (the kernel then kills whatever is left in the namespace). */
static void __attribute__((noreturn)) run_init(struct spawn_request *rq, const int fds[3], int errfd, int ctlfd) {
    char go;
    ssize_t got;
    do {
        got = read(ctlfd, &go, 1);
    } while (got < 0 && errno == EINTR);
    if (got != 1)
        _exit(127); /* the agent failed a step on its side and reports it */
    sigset_t empty;
    sigemptyset(&empty);
    if (sigprocmask(SIG_SETMASK, &empty, NULL) < 0)
        child_fail(errfd, ST_SETUP, errno);
    for (int sig = 1; sig < NSIG; sig++)
        signal(sig, SIG_DFL);
    if (setsid() < 0)
        child_fail(errfd, ST_SETUP, errno);
    int high[3];
    for (int i = 0; i < 3; i++) {
        high[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
        if (high[i] < 0)
            child_fail(errfd, ST_SETUP, errno);
    }
    for (int i = 0; i < 3; i++) {
        if (dup2(high[i], i) < 0)
            child_fail(errfd, ST_SETUP, errno);
    }
    /* Only 0, 1, 2, errfd and ctlfd (both CLOEXEC) survive: the control port never reaches the run. */
    int keep[2] = {errfd, ctlfd};
    if (close_all_but(keep, 2) < 0)
        child_fail(errfd, ST_SETUP, errno);
    if (unshare(run_namespace_flags(AFTER_CGROUP)) < 0)
        child_fail(errfd, ST_NAMESPACES, errno);
    /* The run's procfs: of its own pid namespace, hidepid=2 as /init's (the kernel lets a user
     * namespace mount proc only as nosuid, nodev, noexec as the one already visible). */
    char proc[PATH_MAX];
    snprintf(proc, sizeof proc, "%s/proc", g_cfg.chroot_dir != NULL ? g_cfg.chroot_dir : "");
    if (mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2") < 0)
        child_fail(errfd, ST_PROC, errno);
    if (g_cfg.chroot_dir != NULL && (chroot(g_cfg.chroot_dir) < 0 || chdir("/") < 0))
        child_fail(errfd, ST_IDS, errno);
    /* Empty the bounding set while CAP_SETPCAP is still held (in the run's user namespace, which
     * starts with a full one): with no_new_privs no exec could raise a capability anyway; this
     * leaves nothing to raise even without it. */
    for (int cap = 0; cap < 64; cap++) { /* check_no_privilege reads every one back below */
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
            if (errno == EINVAL)
                break; /* past the last capability this kernel knows */
            child_fail(errfd, ST_IDS, errno);
        }
    }
    /* setgroups is denied in the run's user namespace; the agent keeps no supplementary group. */
    if (getgroups(0, NULL) != 0)
        child_fail(errfd, ST_IDS, EPERM);
    if (setresgid(g_cfg.gid, g_cfg.gid, g_cfg.gid) < 0 || setresuid(g_cfg.uid, g_cfg.uid, g_cfg.uid) < 0)
        child_fail(errfd, ST_IDS, errno);
    if (drop_all_capabilities() < 0 || check_no_privilege() < 0)
        child_fail(errfd, ST_IDS, errno);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        child_fail(errfd, ST_SETUP, errno);
    /* The workload runs with the same uid: keep it from tracing or reading this process. */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
        child_fail(errfd, ST_SETUP, errno);
    /* vfork: the workload needs no copy of this process's memory, only a few syscalls until exec
     * (workload_exec never returns; this process waits until the exec or _exit). */
    pid_t child = vfork();
    if (child < 0)
        child_fail(errfd, ST_FORK, errno);
    if (child == 0) {
        close(ctlfd);
        workload_exec(rq, errfd);
    }
    close(errfd); /* the agent sees EOF once the workload's exec closed its copy */
    g_init_child = child;
    for (size_t i = 0; i < sizeof FORWARDED_SIGNALS / sizeof FORWARDED_SIGNALS[0]; i++) {
        struct sigaction sa = {.sa_handler = forward_signal};
        sigemptyset(&sa.sa_mask);
        sigaction(FORWARDED_SIGNALS[i], &sa, NULL);
    }
    int32_t status = 0;
    for (;;) {
        int st;
        pid_t pid = waitpid(-1, &st, __WALL);
        if (pid == child) {
            status = st;
            break;
        }
        if (pid < 0 && errno != EINTR)
            break; /* ECHILD: cannot happen before the workload is reaped */
    }
    ssize_t n = send(ctlfd, &status, sizeof status, MSG_NOSIGNAL);
    (void)n;
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0));
}

static void reply_spawn_failed(int stage, int err) {
    struct items it = {.len = 0};
    items_add(&it, "stage=%s", stage_name(stage));
    items_add(&it, "errno=%d", err);
    send_items(T_SPAWN_FAILED, &it);
}

/* The run cgroup's limit files as the agent last wrote them: only the agent writes them (the run
 * has no cgroupfs and no capability), so an unchanged value is not written again. */
enum { LIM_MEMORY, LIM_SWAP, LIM_PIDS, LIM_COUNT };
static char g_limit_written[LIM_COUNT][32];

static int cgroup_set_limit(int which, const char *file, const char *value) {
    if (strcmp(g_limit_written[which], value) == 0)
        return 0;
    g_limit_written[which][0] = '\0';
    if (cgroup_set(file, value) < 0)
        return -1;
    snprintf(g_limit_written[which], sizeof g_limit_written[which], "%s", value);
    return 0;
}

/* Limits of the run's cgroup; "max" for what the request leaves out. Returns 0 or an errno. */
static int apply_cgroup_limits(const struct spawn_request *rq) {
    if (!g_has_cgroup)
        return (rq->memory_max || rq->pids_max) ? ENOTSUP : 0;
    char value[32];
    if (rq->memory_max || has_controller("memory")) {
        if (!has_controller("memory"))
            return ENOTSUP;
        snprintf(value, sizeof value, "%llu", (unsigned long long)rq->memory_max);
        if (cgroup_set_limit(LIM_MEMORY, "memory.max", rq->memory_max ? value : "max") < 0)
            return errno;
        cgroup_set_limit(LIM_SWAP, "memory.swap.max", "0"); /* absent without swap accounting: nothing to limit */
    }
    if (rq->pids_max || has_controller("pids")) {
        if (!has_controller("pids"))
            return ENOTSUP;
        snprintf(value, sizeof value, "%llu", (unsigned long long)rq->pids_max);
        if (cgroup_set_limit(LIM_PIDS, "pids.max", rq->pids_max ? value : "max") < 0)
            return errno;
    }
    return 0;
}

static int write_proc_of(pid_t pid, const char *name, const char *text) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
    return write_text(path, text);
}

/* What only the agent (root of the guest's initial namespaces) can do for the run's init, while
 * it waits for the release byte: map the workload's uid and gid (and nothing else) into its user
 * namespace, deny setgroups there, move it into the run cgroup, make it the OOM killer's first
 * choice, set its rlimits (raising a hard limit needs CAP_SYS_RESOURCE of the initial namespace).
 * Returns 0, or -1 with the failed stage and errno. */
static int prepare_run_init(pid_t pid, const struct spawn_request *rq, int *stage, int *err) {
    char map[64], num[24];
    snprintf(map, sizeof map, "%u %u 1\n", (unsigned)g_cfg.uid, (unsigned)g_cfg.uid);
    *stage = ST_NAMESPACES;
    if (write_proc_of(pid, "uid_map", map) < 0)
        goto fail;
    snprintf(map, sizeof map, "%u %u 1\n", (unsigned)g_cfg.gid, (unsigned)g_cfg.gid);
    if (write_proc_of(pid, "setgroups", "deny") < 0 || write_proc_of(pid, "gid_map", map) < 0)
        goto fail;
    snprintf(num, sizeof num, "%d", (int)pid);
    *stage = ST_CGROUP;
    if (g_has_cgroup && cgroup_set("cgroup.procs", num) < 0)
        goto fail;
    *stage = ST_SETUP;
    if (write_proc_of(pid, "oom_score_adj", "1000") < 0) /* the run dies first on OOM */
        goto fail;
    *stage = ST_RLIMIT;
    for (size_t i = 0; i < rq->run.n_rlimits; i++) {
        if (prlimit(pid, (enum __rlimit_resource)rq->run.rlimits[i].resource, &rq->run.rlimits[i].value, NULL) < 0)
            goto fail;
    }
    *stage = 0;
    return 0;
fail:
    *err = errno;
    return -1;
}

static void handle_spawn(char **items, long n) {
    char err[MAX_ITEM_TEXT / 2];
    struct spawn_request rq;
    memset(&rq, 0, sizeof rq);
    int p_in[2] = {-1, -1}, p_out[2] = {-1, -1}, p_err[2] = {-1, -1}, errpipe[2] = {-1, -1};
    int ctl[2] = {-1, -1}; /* agent <-> run init: the release byte, then the workload's wait status */
    if (run_busy()) {
        reply_error(0, "a run is active or its output is not drained yet");
        goto out;
    }
    if (parse_spawn(items, n, &rq, err, sizeof err) < 0) {
        reply_error(0, "%s", err);
        goto out;
    }
    int cg = apply_cgroup_limits(&rq);
    if (cg != 0) {
        reply_spawn_failed(ST_CGROUP, cg);
        goto out;
    }
    if (pipe2(p_in, O_CLOEXEC) < 0 || pipe2(p_out, O_CLOEXEC) < 0 || pipe2(p_err, O_CLOEXEC) < 0 ||
        pipe2(errpipe, O_CLOEXEC) < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) < 0) {
        reply_spawn_failed(ST_FORK, errno);
        goto out;
    }
    uint64_t oom_before = cgroup_event("memory.events", "oom_kill");
    uint64_t pids_before = cgroup_event("pids.events", "max");
    /* fork() semantics (no CLONE_VM, child stack = ours), into the run's fresh namespaces. Not
     * clone3(CLONE_INTO_CGROUP): on kernels with the kill_seq fix of cgroup.kill (Linux 6.14 and
     * stable backports; the 6.18 of the host tests) a child cloned into a cgroup that was ever
     * killed is killed at birth (the sequence is read from the parent's cgroup), and the run
     * cgroup is killed after every run. Measured: every run after the first died of SIGKILL. */
    pid_t pid = (pid_t)syscall(SYS_clone, (unsigned long)run_namespace_flags(AT_CLONE) | SIGCHLD, NULL, NULL, NULL, 0UL);
    if (pid < 0) {
        reply_spawn_failed(ST_NAMESPACES, errno);
        goto out;
    }
    if (pid == 0) {
        close(ctl[0]);
        int fds[3] = {p_in[0], p_out[1], p_err[1]};
        run_init(&rq, fds, errpipe[1], ctl[1]);
    }
    close_fd(&errpipe[1]);
    close_fd(&ctl[1]);
    int stage = 0, step_err = 0;
    if (prepare_run_init(pid, &rq, &stage, &step_err) < 0 || write(ctl[0], "g", 1) != 1) {
        if (stage == 0)
            stage = ST_SETUP, step_err = errno;
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, __WALL) < 0 && errno == EINTR) {
        }
        reply_spawn_failed(stage, step_err);
        goto out;
    }
    struct spawn_error se;
    ssize_t got;
    do {
        got = read(errpipe[0], &se, sizeof se);
    } while (got < 0 && errno == EINTR);
    if (got != 0) {
        int status;
        while (waitpid(pid, &status, __WALL) < 0 && errno == EINTR) {
        }
        if (got == (ssize_t)sizeof se)
            reply_spawn_failed(se.stage, se.err);
        else
            reply_spawn_failed(ST_SETUP, got < 0 ? errno : EIO);
        goto out;
    }
    char *keep_buf = g_run.stdin_buf;
    memset(&g_run, 0, sizeof g_run);
    g_run.stdin_buf = keep_buf;
    g_run.active = 1;
    g_run.main_pid = pid;
    g_run.oom_before = oom_before;
    g_run.pids_before = pids_before;
    g_run.init_fd = ctl[0];
    ctl[0] = -1;
    g_run.stdin_fd = p_in[1];
    p_in[1] = -1;
    int reads[3] = {-1, p_out[0], p_err[0]};
    for (int s = S_STDOUT; s <= S_STDERR; s++) {
        g_run.out[s].fd = reads[s];
        g_run.out[s].credit = WINDOW_BYTES;
        g_run.out[s].max = rq.output_max;
        fcntl(reads[s], F_SETFL, O_NONBLOCK);
    }
    p_out[0] = p_err[0] = -1;
    fcntl(g_run.stdin_fd, F_SETFL, O_NONBLOCK);
    struct items it = {.len = 0};
    items_add(&it, "pid=%d", (int)pid);
    send_items(T_STARTED, &it);
out:
    for (int i = 0; i < 2; i++) {
        close_fd(&p_in[i]);
        close_fd(&p_out[i]);
        close_fd(&p_err[i]);
        close_fd(&errpipe[i]);
        close_fd(&ctl[i]);
    }
    free(rq.run.argv);
    free(rq.run.envp);
    free(rq.filter);
}

/* ---- files ------------------------------------------------------------------------------ */

/* Act with the workload's file-system ids (per thread; the agent has one): permission checks are
 * the workload's and created files are its own. From fsuid 0 to non-0 the kernel drops the
 * file-system capabilities from the effective set, and gives them back on the way back. */
static void as_workload_fs(int on) {
    syscall(SYS_setfsgid, on ? g_cfg.gid : 0);
    syscall(SYS_setfsuid, on ? g_cfg.uid : 0);
}

/* Each component is a plain name: no "", ".", ".."; the whole path is relative. */
static int valid_relative(const char *rel) {
    if (rel[0] == '\0' || rel[0] == '/' || strlen(rel) > MAX_REL_PATH)
        return 0;
    const char *p = rel;
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        if (len == 0 || (len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.'))
            return 0;
        if (slash == NULL)
            return 1;
        p = slash + 1;
    }
}

/* Open directory `path` (absolute, or relative to dirfd) one O_NOFOLLOW component at a time;
 * create missing ones (0755) when asked. Returns an fd or -1 with errno. */
static int open_dir_chain(int dirfd, const char *path, int create) {
    char buf[MAX_REL_PATH + 2];
    if (strlen(path) >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(buf, path);
    int fd = path[0] == '/' ? open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    char *save = NULL;
    for (char *part = strtok_r(buf, "/", &save); part != NULL; part = strtok_r(NULL, "/", &save)) {
        if (strcmp(part, ".") == 0 || strcmp(part, "..") == 0) {
            close(fd);
            errno = EINVAL;
            return -1;
        }
        int child = openat(fd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (child < 0 && errno == ENOENT && create) {
            if (mkdirat(fd, part, 0755) < 0 && errno != EEXIST) {
                int e = errno;
                close(fd);
                errno = e;
                return -1;
            }
            child = openat(fd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        int e = errno;
        close(fd);
        if (child < 0) {
            errno = e;
            return -1;
        }
        fd = child;
    }
    return fd;
}

/* Open a scratch root named as the workload sees it: with --chroot, below the chroot directory
 * (the agent's own, made by /init before any workload existed), else below /. Every component of
 * the root is opened O_NOFOLLOW. */
static int open_root(const char *root) {
    if (g_cfg.chroot_dir == NULL)
        return open_dir_chain(-1, root, 0);
    int base = open(g_cfg.chroot_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (base < 0)
        return -1;
    int fd = open_dir_chain(base, root + 1, 0); /* root is absolute: its components, relative */
    int e = errno;
    close(base);
    errno = e;
    return fd;
}

/* Splits rel into its parent directory (opened under root, created when asked) and last name. */
static int open_parent(const char *root, const char *rel, int create, const char **name) {
    int rootfd = open_root(root); /* as root: the scratch root's ancestors are not the workload's */
    if (rootfd < 0)
        return -1;
    as_workload_fs(1);
    char dir[MAX_REL_PATH + 2];
    const char *slash = strrchr(rel, '/');
    int fd;
    if (slash == NULL) {
        *name = rel;
        fd = fcntl(rootfd, F_DUPFD_CLOEXEC, 0);
    } else {
        memcpy(dir, rel, (size_t)(slash - rel));
        dir[slash - rel] = '\0';
        *name = slash + 1;
        fd = open_dir_chain(rootfd, dir, create);
    }
    int e = errno;
    close(rootfd);
    errno = e;
    return fd; /* the caller calls as_workload_fs(0) */
}

static const char *item_value(char **items, long n, const char *key) {
    size_t klen = strlen(key);
    const char *found = NULL;
    for (long i = 0; i < n; i++) {
        if (strncmp(items[i], key, klen) == 0 && items[i][klen] == '=') {
            if (found != NULL)
                return NULL; /* repeated: refused like a missing key */
            found = items[i] + klen + 1;
        }
    }
    return found;
}

static int items_only(char **items, long n, const char *const *keys) {
    for (long i = 0; i < n; i++) {
        int ok = 0;
        for (size_t k = 0; keys[k] != NULL; k++) {
            size_t klen = strlen(keys[k]);
            ok |= strncmp(items[i], keys[k], klen) == 0 && items[i][klen] == '=';
        }
        if (!ok)
            return 0;
    }
    return 1;
}

static void handle_put(char **items, long n) {
    static const char *const keys[] = {"root", "path", "mode", "size", NULL};
    const char *root = item_value(items, n, "root"), *rel = item_value(items, n, "path");
    const char *mode_s = item_value(items, n, "mode"), *size_s = item_value(items, n, "size");
    uint64_t size;
    char *end = NULL;
    long mode = mode_s ? strtol(mode_s, &end, 8) : -1;
    if (!items_only(items, n, keys) || !root || !rel || !size_s || root[0] != '/' || !valid_relative(rel) ||
        !mode_s || mode_s[0] == '\0' || *end != '\0' || mode < 0 || mode > 0777 ||
        parse_u64(size_s, UINT64_MAX - 1, &size) < 0)
        protocol_error("PUT_FILE needs root=ABS path=REL mode=OCTAL(<=0777) size=N");
    memset(&g_put, 0, sizeof g_put);
    g_put.active = 1;
    g_put.size = size;
    g_put.fd = -1;
    const char *name;
    int dirfd = open_parent(root, rel, 1, &name);
    if (dirfd >= 0) {
        g_put.fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                          (mode_t)mode);
        g_put.err = errno;
        close(dirfd);
    } else {
        g_put.err = errno;
    }
    struct stat st;
    if (g_put.fd >= 0 && (fstat(g_put.fd, &st) < 0 || !S_ISREG(st.st_mode))) {
        close_fd(&g_put.fd);
        snprintf(g_put.errmsg, sizeof g_put.errmsg, "%s is not a regular file", rel);
    } else if (g_put.fd >= 0 && fchmod(g_put.fd, (mode_t)mode) < 0) {
        g_put.err = errno;
        close_fd(&g_put.fd);
    }
    as_workload_fs(0);
    if (g_put.fd < 0 && g_put.errmsg[0] == '\0')
        snprintf(g_put.errmsg, sizeof g_put.errmsg, "cannot write %.200s: %s", rel, strerror(g_put.err));
}

static void on_put_data(const unsigned char *body, size_t len) {
    if (!g_put.active)
        protocol_error("transfer data without a PUT_FILE");
    if (len == 0) {
        if (g_put.received != g_put.size)
            protocol_error("PUT_FILE ended after %llu of %llu bytes", (unsigned long long)g_put.received,
                           (unsigned long long)g_put.size);
        g_put.active = 0;
        if (g_put.fd >= 0) {
            close_fd(&g_put.fd);
            reply_ok();
        } else {
            reply_error(g_put.err, "%s", g_put.errmsg);
        }
        return;
    }
    if (len > g_put.size - g_put.received)
        protocol_error("PUT_FILE data beyond the announced size");
    g_put.received += len;
    while (g_put.fd >= 0 && len > 0) {
        ssize_t w = write(g_put.fd, body, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            g_put.err = w < 0 ? errno : EIO;
            snprintf(g_put.errmsg, sizeof g_put.errmsg, "write failed: %s", strerror(g_put.err));
            close_fd(&g_put.fd);
            break;
        }
        body += w;
        len -= (size_t)w;
    }
}

/* Open a regular file under dirfd for reading, never through a symlink and never blocking on a
 * fifo; fills *st. Returns fd or -1 (errno; EINVAL when not a regular file). */
static int open_regular(int dirfd, const char *name, struct stat *st) {
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return -1;
    if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode)) {
        close(fd);
        errno = EINVAL;
        return -1;
    }
    return fd;
}

static void handle_get(char **items, long n) {
    static const char *const keys[] = {"root", "path", "max_bytes", NULL};
    const char *root = item_value(items, n, "root"), *rel = item_value(items, n, "path");
    const char *max_s = item_value(items, n, "max_bytes");
    uint64_t max;
    if (!items_only(items, n, keys) || !root || !rel || !max_s || root[0] != '/' || !valid_relative(rel) ||
        parse_u64(max_s, UINT64_MAX - 1, &max) < 0)
        protocol_error("GET_FILE needs root=ABS path=REL max_bytes=N");
    const char *name;
    struct stat st;
    int fd = -1, dirfd = open_parent(root, rel, 0, &name);
    if (dirfd >= 0) {
        fd = open_regular(dirfd, name, &st);
        int e = errno;
        close(dirfd);
        errno = e;
    }
    as_workload_fs(0);
    if (fd < 0) {
        if (errno == EINVAL)
            reply_error(EINVAL, "%.200s is not a regular file", rel);
        else
            reply_error(errno, "cannot read %.200s: %s", rel, strerror(errno));
        return;
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        reply_error(EFBIG, "%.200s is %llu bytes, over the %llu-byte limit", rel, (unsigned long long)st.st_size,
                    (unsigned long long)max);
        return;
    }
    struct items it = {.len = 0};
    items_add(&it, "size=%llu", (unsigned long long)st.st_size);
    send_items(T_FILE, &it);
    memset(&g_tx, 0, sizeof g_tx);
    g_tx.kind = T_GET_FILE;
    g_tx.credit = WINDOW_BYTES;
    g_tx.file_fd = fd;
    g_tx.file_left = (uint64_t)st.st_size;
}

/* Send the next chunk of the current file; exactly file_left bytes in all (zeros never: a file
 * that shrank ends early and the host sees fewer bytes than announced). Returns 1 when done. */
static int send_file_chunk(void) {
    static char buf[CHUNK_BYTES];
    uint64_t want = g_tx.file_left < CHUNK_BYTES ? g_tx.file_left : CHUNK_BYTES;
    if (want > g_tx.credit)
        want = g_tx.credit;
    ssize_t n = 0;
    if (g_tx.file_left > 0) {
        if (want == 0)
            return 0;
        do {
            n = read(g_tx.file_fd, buf, (size_t)want);
        } while (n < 0 && errno == EINTR);
    }
    if (n <= 0) {
        close_fd(&g_tx.file_fd);
        send_frame(T_DATA, S_TRANSFER, NULL, 0);
        return 1;
    }
    send_frame(T_DATA, S_TRANSFER, buf, (size_t)n);
    g_tx.credit -= (uint64_t)n;
    g_tx.file_left -= (uint64_t)n;
    return 0;
}

static void export_entry(const char *kind, uint64_t size, const char *reason) {
    struct items it = {.len = 0};
    items_add(&it, "kind=%s", kind);
    items_add(&it, "path=%s", g_tx.path);
    if (strcmp(kind, "file") == 0)
        items_add(&it, "size=%llu", (unsigned long long)size);
    if (reason != NULL)
        items_add(&it, "reason=%s", reason);
    send_items(T_ENTRY, &it);
}

static void export_end(const char *stopped) {
    as_workload_fs(1);
    for (int i = g_tx.sp - 1; i >= 0; i--)
        closedir(g_tx.stack[i].dir);
    as_workload_fs(0);
    g_tx.sp = 0;
    struct items it = {.len = 0};
    if (stopped != NULL)
        items_add(&it, "stopped=%s", stopped);
    send_items(T_EXPORT_END, &it);
    g_tx.kind = 0;
}

static void handle_export(char **items, long n) {
    static const char *const keys[] = {"root", "max_bytes", "max_entries", "max_depth", NULL};
    const char *root = item_value(items, n, "root");
    const char *mb = item_value(items, n, "max_bytes"), *me = item_value(items, n, "max_entries");
    const char *md = item_value(items, n, "max_depth");
    uint64_t depth;
    memset(&g_tx, 0, sizeof g_tx);
    if (!items_only(items, n, keys) || !root || root[0] != '/' || !mb || !me || !md ||
        parse_u64(mb, UINT64_MAX - 1, &g_tx.max_bytes) < 0 || parse_u64(me, UINT64_MAX - 1, &g_tx.max_entries) < 0 ||
        parse_u64(md, MAX_EXPORT_DEPTH, &depth) < 0 || depth == 0)
        protocol_error("EXPORT needs root=ABS max_bytes=N max_entries=N max_depth=1..%d", MAX_EXPORT_DEPTH);
    int fd = open_root(root); /* as put/get do; everything below is read as the workload (export_step) */
    DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
    if (dir == NULL) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        reply_error(e, "cannot export %.200s: %s", root, strerror(e));
        return;
    }
    g_tx.kind = T_EXPORT;
    g_tx.credit = WINDOW_BYTES;
    g_tx.file_fd = -1;
    g_tx.max_depth = (int)depth;
    g_tx.stack[0] = (struct level){.fd = fd, .dir = dir, .pathlen = 0, .depth = 0};
    g_tx.sp = 1;
}

/* One step of the export walk (the rules of files.export_tree). Runs as the workload's fsuid. */
static void export_step(void) {
    struct level *top = &g_tx.stack[g_tx.sp - 1];
    errno = 0;
    struct dirent *d = readdir(top->dir);
    if (d == NULL) {
        closedir(top->dir);
        g_tx.sp--;
        if (g_tx.sp == 0)
            export_end(NULL);
        return;
    }
    if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
        return;
    if (g_tx.entries >= g_tx.max_entries) {
        char why[128];
        snprintf(why, sizeof why, "the export limit of %llu entries was reached; the rest was not copied",
                 (unsigned long long)g_tx.max_entries);
        export_end(why);
        return;
    }
    g_tx.entries++;
    size_t nlen = strlen(d->d_name);
    if (top->pathlen + 1 + nlen > MAX_REL_PATH) {
        g_tx.path[top->pathlen] = '\0';
        return; /* cannot be named within the protocol's bound: left out */
    }
    char *at = g_tx.path + top->pathlen;
    if (top->pathlen > 0)
        *at++ = '/';
    memcpy(at, d->d_name, nlen + 1);
    size_t pathlen = (size_t)(at - g_tx.path) + nlen;
    int depth = top->depth + 1;
    struct stat st;
    if (fstatat(top->fd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return; /* vanished */
    if (S_ISDIR(st.st_mode)) {
        export_entry("dir", 0, NULL);
        if (depth >= g_tx.max_depth)
            return; /* the host reports it as too deep */
        int child = openat(top->fd, d->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat cst;
        if (child < 0 || fstat(child, &cst) < 0 || cst.st_ino != st.st_ino || cst.st_dev != st.st_dev) {
            if (child >= 0)
                close(child);
            return; /* swapped between stat and open: not the entry announced */
        }
        DIR *dir = fdopendir(child);
        if (dir == NULL) {
            close(child);
            return;
        }
        g_tx.stack[g_tx.sp++] = (struct level){.fd = child, .dir = dir, .pathlen = pathlen, .depth = depth};
        return;
    }
    if (!S_ISREG(st.st_mode)) {
        export_entry("skip", 0, "type");
        return;
    }
    if (g_tx.bytes + (uint64_t)st.st_size > g_tx.max_bytes) {
        export_entry("skip", 0, "bytes");
        return;
    }
    struct stat fst;
    int fd = open_regular(top->fd, d->d_name, &fst);
    if (fd < 0 || fst.st_ino != st.st_ino || fst.st_dev != st.st_dev) { /* swapped since the stat */
        if (fd >= 0)
            close(fd);
        export_entry("skip", 0, "open");
        return;
    }
    export_entry("file", (uint64_t)fst.st_size, NULL);
    g_tx.bytes += (uint64_t)fst.st_size;
    g_tx.file_fd = fd;
    g_tx.file_left = (uint64_t)fst.st_size;
}

/* Make progress on a transfer. Returns 1 when it could go on without waiting for credit. */
static int pump_transfer(void) {
    if (g_tx.kind == 0)
        return 0;
    if (g_tx.file_fd >= 0) {
        if (g_tx.credit == 0 && g_tx.file_left > 0)
            return 0;
        if (send_file_chunk() && g_tx.kind == T_GET_FILE)
            g_tx.kind = 0;
        return g_tx.kind != 0;
    }
    as_workload_fs(1);
    export_step();
    as_workload_fs(0);
    return g_tx.kind != 0;
}

/* ---- reseed, identity, hello ------------------------------------------------------------ */

static void handle_reseed(const unsigned char *body, size_t len) {
    if (len < MIN_RESEED || len > MAX_RESEED)
        protocol_error("RESEED needs %d..%d bytes", MIN_RESEED, MAX_RESEED);
    struct {
        struct rand_pool_info info;
        unsigned char buf[MAX_RESEED];
    } req;
    req.info.entropy_count = (int)(len * 8);
    req.info.buf_size = (int)len;
    memcpy(req.buf, body, len);
    /* Adding entropy alone does not re-key an already initialised CRNG (Linux >= 5.18 reseeds it
     * on a timer, every 60 s, drivers/char/random.c crng_reseed_interval): two VMs restored from
     * one snapshot would draw the same getrandom() bytes until then. RNDRESEEDCRNG forces the
     * reseed now, so the host's bytes are in every key from the next read on. */
    int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
    int rc = fd < 0 ? -1 : ioctl(fd, RNDADDENTROPY, &req.info);
    const char *step = "RNDADDENTROPY";
    if (rc == 0) {
        rc = ioctl(fd, RNDRESEEDCRNG);
        step = "RNDRESEEDCRNG";
    }
    int e = errno;
    if (fd >= 0)
        close(fd);
    explicit_bzero(&req, sizeof req);
    if (rc < 0)
        reply_error(e, "%s failed: %s", step, strerror(e));
    else
        reply_ok();
}

static void handle_identity(char **items, long n) {
    static const char *const keys[] = {"hostname", "machine_id", "realtime_ns", NULL};
    const char *host = item_value(items, n, "hostname"), *mid = item_value(items, n, "machine_id");
    const char *now_s = item_value(items, n, "realtime_ns"); /* optional: the host's clock */
    uint64_t now_ns = 0;
    int ok = items_only(items, n, keys) && host && mid && strlen(host) >= 1 && strlen(host) <= 63 &&
             strlen(mid) == 32 && (now_s == NULL || parse_u64(now_s, (uint64_t)INT64_MAX, &now_ns) == 0);
    for (const char *p = host; ok && *p; p++)
        ok = (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-';
    for (const char *p = mid; ok && *p; p++)
        ok = (*p >= 'a' && *p <= 'f') || (*p >= '0' && *p <= '9');
    if (!ok)
        protocol_error("IDENTITY needs hostname=[a-z0-9-]{1,63} machine_id=32 lowercase hex [realtime_ns=N]");
    /* A guest restored from a snapshot runs on the template's wall clock (the save's time plus
     * however long the template sat in the cache): set the host's before any command runs. */
    if (now_s != NULL) {
        struct timespec ts = {.tv_sec = (time_t)(now_ns / 1000000000u), .tv_nsec = (long)(now_ns % 1000000000u)};
        if (clock_settime(CLOCK_REALTIME, &ts) < 0) {
            reply_error(errno, "clock_settime failed: %s", strerror(errno));
            return;
        }
    }
    if (sethostname(host, strlen(host)) < 0) {
        reply_error(errno, "sethostname failed: %s", strerror(errno));
        return;
    }
    int fd = open(g_cfg.machine_id_path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0444);
    char line[34];
    snprintf(line, sizeof line, "%s\n", mid);
    if (fd < 0 || write(fd, line, 33) != 33) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        reply_error(e, "cannot write %s: %s", g_cfg.machine_id_path, strerror(e));
        return;
    }
    close(fd);
    reply_ok();
}

static void handle_hello(char **items, long n) {
    static const char *const keys[] = {"version", NULL};
    const char *v = item_value(items, n, "version");
    if (!items_only(items, n, keys) || v == NULL || strcmp(v, "2") != 0) {
        reply_error(0, "unsupported protocol version; this agent speaks version=%d", PROTOCOL_VERSION);
        return;
    }
    char boot_id[64] = "unknown";
    if (read_text("/proc/sys/kernel/random/boot_id", boot_id, sizeof boot_id) < 0)
        strcpy(boot_id, "unknown");
    struct utsname u;
    if (uname(&u) < 0)
        strcpy(u.release, "unknown");
    struct items it = {.len = 0};
    items_add(&it, "version=%d", PROTOCOL_VERSION);
    items_add(&it, "pid=%d", (int)getpid());
    items_add(&it, "boot_id=%s", boot_id);
    items_add(&it, "kernel=%s", u.release);
    items_add(&it, "cgroup=%s%s", g_has_cgroup ? "v2:" : "none", g_has_cgroup ? g_controllers : "");
    send_items(T_READY, &it);
}

/* ---- dispatch --------------------------------------------------------------------------- */

static int has_items_body(int type) { return type != T_DATA && type != T_RESEED; }

static void dispatch(int type, int stream, unsigned char *body, size_t len) {
    if (type == T_DATA) {
        if (stream == S_STDIN)
            on_stdin_data(body, len);
        else if (stream == S_TRANSFER)
            on_put_data(body, len);
        else
            protocol_error("DATA on stream %d from the host", stream);
        return;
    }
    /* Flow control (CREDIT, CLOSE_OUTPUT, stdin DATA) and KILL come from the host's pump and run
     * loop at any time, also between a PUT_FILE's data frames; a request there is out of step. */
    int is_flow = type == T_CREDIT || type == T_CLOSE_OUTPUT || type == T_KILL;
    if (g_put.active && !is_flow)
        protocol_error("frame type %d in the middle of a PUT_FILE", type);
    char **items = NULL;
    long n = 0;
    if (has_items_body(type)) {
        n = split_items(body, len, &items);
        if (n < 0)
            protocol_error("frame type %d: body is not NUL-terminated items", type);
    }
    int needs_stream = type == T_CREDIT || type == T_CLOSE_OUTPUT;
    if (!needs_stream && stream != 0)
        protocol_error("frame type %d with stream %d", type, stream);
    int busy_transfer = g_tx.kind != 0;
    switch (type) {
    case T_CREDIT: {
        const char *b = item_value(items, n, "bytes");
        uint64_t v;
        static const char *const keys[] = {"bytes", NULL};
        if (!items_only(items, n, keys) || b == NULL || parse_u64(b, WINDOW_BYTES, &v) < 0)
            protocol_error("CREDIT needs bytes=1..%u", WINDOW_BYTES);
        uint64_t *credit = stream == S_TRANSFER ? &g_tx.credit
                           : (stream == S_STDOUT || stream == S_STDERR) ? &g_run.out[stream].credit
                                                                        : NULL;
        if (credit == NULL)
            protocol_error("CREDIT for stream %d", stream);
        *credit += v;
        if (*credit > WINDOW_BYTES) /* late credit for a stream that ended: keep within the window */
            *credit = WINDOW_BYTES;
        break;
    }
    case T_CLOSE_OUTPUT:
        if ((stream != S_STDOUT && stream != S_STDERR) || n != 0)
            protocol_error("CLOSE_OUTPUT needs stream 1 or 2 and no items");
        end_output(stream);
        break;
    case T_HELLO: handle_hello(items, n); break;
    case T_KILL:
        if (n != 0)
            protocol_error("KILL takes no items");
        if (g_run.active) {
            if (g_has_cgroup)
                cgroup_set("cgroup.kill", "1");
            kill(-1, SIGKILL); /* reaped (and reported) through SIGCHLD */
        }
        break;
    case T_SHUTDOWN:
        reply_ok();
        end_guest(0);
    default:
        if (busy_transfer) /* GET_FILE / EXPORT streams are not interleaved with other replies */
            protocol_error("request type %d while a transfer is in progress", type);
        switch (type) {
        case T_SPAWN: handle_spawn(items, n); break;
        case T_PUT_FILE: handle_put(items, n); break;
        case T_GET_FILE: handle_get(items, n); break;
        case T_EXPORT: handle_export(items, n); break;
        case T_RESEED: handle_reseed(body, len); break;
        case T_IDENTITY: handle_identity(items, n); break;
        default: protocol_error("unknown frame type %d", type);
        }
    }
    free(items);
}

/* Read what the port has; dispatch every complete frame. Returns 0 on EOF. */
static int read_port(void) {
    size_t cap = HEADER_BYTES + MAX_BODY_BYTES;
    ssize_t n;
    do {
        n = read(g_port, g_inbuf + g_inlen, cap - g_inlen);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        if (errno == EAGAIN)
            return 1;
        logmsg("control port read failed: %s", strerror(errno));
        return 0;
    }
    if (n == 0)
        return 0;
    g_inlen += (size_t)n;
    size_t off = 0;
    while (g_inlen - off >= HEADER_BYTES) {
        unsigned char *h = g_inbuf + off;
        uint32_t len = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
        if (len > MAX_BODY_BYTES)
            protocol_error("frame of %u bytes exceeds the %u byte limit", len, MAX_BODY_BYTES);
        if (h[6] != 0 || h[7] != 0)
            protocol_error("reserved header bytes are not zero");
        if (h[5] > S_TRANSFER)
            protocol_error("stream %d does not exist", h[5]);
        if (g_inlen - off < HEADER_BYTES + len)
            break;
        /* items are parsed in place: keep a NUL after the body for the last item's strlen */
        dispatch(h[4], h[5], h + HEADER_BYTES, len);
        off += HEADER_BYTES + len;
    }
    memmove(g_inbuf, g_inbuf + off, g_inlen - off);
    g_inlen -= off;
    return 1;
}

/* ---- start-up --------------------------------------------------------------------------- */

static int parse_id(const char *s, unsigned *out) {
    uint64_t v;
    if (s == NULL || parse_u64(s, 65534, &v) < 0 || v == 0)
        return -1;
    *out = (unsigned)v;
    return 0;
}

static int parse_args(int argc, char **argv) {
    g_cfg = (struct config){.port_fd = -1, .uid = 1000, .gid = 1000, .cgroup_root = "/sys/fs/cgroup",
                            .machine_id_path = "/etc/machine-id"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        unsigned id;
        uint64_t fd;
        if (next == NULL) {
            logmsg("%.200s needs a value", a);
            return -1;
        }
        if (strcmp(a, "--port") == 0 && next[0] == '/') {
            g_cfg.port_path = next;
        } else if (strcmp(a, "--port-fd") == 0 && parse_u64(next, INT_MAX, &fd) == 0) {
            g_cfg.port_fd = (int)fd;
        } else if (strcmp(a, "--uid") == 0 && parse_id(next, &id) == 0) {
            g_cfg.uid = id;
        } else if (strcmp(a, "--gid") == 0 && parse_id(next, &id) == 0) {
            g_cfg.gid = id;
        } else if (strcmp(a, "--cgroup-root") == 0 && next[0] == '/') {
            g_cfg.cgroup_root = next;
        } else if (strcmp(a, "--chroot") == 0 && next[0] == '/') {
            g_cfg.chroot_dir = next;
        } else if (strcmp(a, "--machine-id-path") == 0 && next[0] == '/') {
            g_cfg.machine_id_path = next;
        } else {
            logmsg("bad argument %.200s %.200s (ids are 1..65534, paths absolute)", a, next);
            return -1;
        }
        i++;
    }
    if ((g_cfg.port_path == NULL) == (g_cfg.port_fd < 0)) {
        logmsg("give exactly one of --port PATH or --port-fd N");
        return -1;
    }
    return 0;
}

/* Open the control port and make it root's alone (0600): the workload (uid != 0, no
 * capabilities) can then never open it. A socket (--port-fd) is checked to be one. */
static int open_port(void) {
    int fd = g_cfg.port_fd;
    if (g_cfg.port_path != NULL)
        fd = open(g_cfg.port_path, O_RDWR | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        logmsg("cannot open the control port: %s", strerror(errno));
        return -1;
    }
    if (g_cfg.port_path != NULL) {
        if (!S_ISCHR(st.st_mode)) {
            logmsg("%s is not a character device", g_cfg.port_path);
            return -1;
        }
        if (fchown(fd, 0, 0) < 0 || fchmod(fd, 0600) < 0) {
            logmsg("cannot make %s root-only: %s", g_cfg.port_path, strerror(errno));
            return -1;
        }
    } else if (!S_ISSOCK(st.st_mode)) {
        logmsg("--port-fd %d is not a socket", fd);
        return -1;
    }
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
        return -1;
    return fd;
}

int main(int argc, char **argv) {
    if (getpid() != 1) {
        logmsg("refusing to run: not pid 1 (kill(-1) would reach processes outside the guest)");
        return EXIT_REFUSED;
    }
    if (parse_args(argc, argv) < 0)
        return EXIT_REFUSED;
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 || write_text("/proc/self/oom_score_adj", "-1000") < 0)
        logmsg("cannot harden the agent (dumpable/oom_score_adj): %s", strerror(errno));
    /* File requests act with the workload's fsuid/fsgid; supplementary groups still count in
     * permission checks, so the agent keeps none (root needs none). */
    if (setgroups(0, NULL) < 0) {
        logmsg("cannot drop supplementary groups: %s", strerror(errno));
        return EXIT_REFUSED;
    }
    g_port = open_port();
    g_inbuf = malloc(HEADER_BYTES + MAX_BODY_BYTES + 1);
    g_run.stdin_buf = malloc(WINDOW_BYTES);
    if (g_port < 0 || g_inbuf == NULL || g_run.stdin_buf == NULL)
        return EXIT_REFUSED;
    g_run.stdin_fd = g_run.out[S_STDOUT].fd = g_run.out[S_STDERR].fd = g_run.init_fd = -1;
    g_tx.file_fd = -1;
    signal(SIGPIPE, SIG_IGN);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) {
        logmsg("signalfd failed: %s", strerror(errno));
        return EXIT_REFUSED;
    }
    setup_cgroup();
    for (;;) {
        struct pollfd p[5];
        int what[5] = {-1, -1, -1, -1, -1}; /* the stream each pipe entry of p[] belongs to */
        int np = 0;
        p[np++] = (struct pollfd){.fd = g_port, .events = POLLIN};
        p[np++] = (struct pollfd){.fd = sfd, .events = POLLIN};
        for (int s = S_STDOUT; s <= S_STDERR; s++) {
            if (g_run.out[s].fd >= 0 && g_run.out[s].credit > 0) {
                what[np] = s;
                p[np++] = (struct pollfd){.fd = g_run.out[s].fd, .events = POLLIN};
            }
        }
        if (g_run.stdin_fd >= 0 && g_run.stdin_len > 0) {
            what[np] = S_STDIN;
            p[np++] = (struct pollfd){.fd = g_run.stdin_fd, .events = POLLOUT};
        }
        int ready_transfer = g_tx.kind != 0 && (g_tx.credit > 0 || g_tx.file_fd < 0);
        int rc = poll(p, (nfds_t)np, ready_transfer ? 0 : -1);
        if (rc < 0 && errno != EINTR) {
            logmsg("poll failed: %s", strerror(errno));
            end_guest(1);
        }
        if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            if (!read_port()) {
                logmsg("the host closed the control port");
                end_guest(0);
            }
        }
        if (p[1].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
            }
            reap_available();
        }
        for (int i = 2; i < np; i++) {
            if (!p[i].revents)
                continue;
            /* a frame handled above may have closed this pipe: act only if it is still the one polled */
            if (what[i] == S_STDIN && p[i].fd == g_run.stdin_fd)
                pump_stdin();
            else if (what[i] != S_STDIN && p[i].fd == g_run.out[what[i]].fd)
                pump_output(what[i]);
        }
        if (ready_transfer)
            pump_transfer();
    }
}
